// CliArgs over a CommandSpec: the table is the parser's only source (unknown options refused by name, flags
// vs values, literal defaults applied, computed defaults left to the command) and usage_text prints it.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "launch/cli_args.h"

namespace tp {
namespace {

const CommandSpec kSpec{"demo",
                        "a demo command",
                        {OptionSpec::required_value("model", "PATH", "the model"),
                         OptionSpec::value("max-tokens", "N", "64", "tokens to generate"),
                         OptionSpec::value("temperature", "T", "0.5", "sampling temperature"),
                         OptionSpec::value("label", "TEXT", "", "an optional label"),
                         OptionSpec::computed("tp", "N", "parallel.tp of the config", "tensor-parallel degree"),
                         OptionSpec::flag("json", "print JSON")},
                        "SIZE: 80GB = 80e9 bytes."};

std::string usage_error(const std::vector<std::string>& args) {
  try {
    CliArgs a(kSpec, args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CliArgs, ValuesFlagsAndDefaults) {
  const CliArgs a(kSpec, {"--model", "m.gguf", "--temperature=0.25", "--json"});
  EXPECT_FALSE(a.help());
  EXPECT_EQ(a.required("model"), "m.gguf");
  EXPECT_DOUBLE_EQ(a.real("temperature", 0, 2), 0.25);
  EXPECT_EQ(a.integer("max-tokens", 1, 1000), 64);  // the table's literal default
  EXPECT_FALSE(a.has("max-tokens"));
  EXPECT_EQ(a.integer("tp", 3, 1, 8), 3);  // computed default: the command's fallback
  EXPECT_FALSE(a.str("label").has_value());
  EXPECT_TRUE(a.flag("json"));
  const CliArgs b(kSpec, {"--model", "m", "--tp", "2", "--max-tokens", "7"});
  EXPECT_EQ(b.integer("tp", 3, 1, 8), 2);
  EXPECT_EQ(b.integer("max-tokens", 1, 1000), 7);
  EXPECT_FALSE(b.flag("json"));
}

TEST(CliArgs, HelpStopsParsingWhereAnOptionMayStand) {
  EXPECT_TRUE(CliArgs(kSpec, {"--help"}).help());
  EXPECT_TRUE(CliArgs(kSpec, {"--model", "m", "-h", "--whatever"}).help());
  const CliArgs v(kSpec, {"--model", "-h"});  // a value, not an option
  EXPECT_FALSE(v.help());
  EXPECT_EQ(v.required("model"), "-h");
}

TEST(CliArgs, MistakesNameTheOption) {
  EXPECT_NE(usage_error({"--frob", "1"}).find("demo: unknown option --frob (options: --model, --max-tokens"),
            std::string::npos);
  EXPECT_NE(usage_error({"--json=yes"}).find("demo: --json takes no value"), std::string::npos);
  EXPECT_NE(usage_error({"--model"}).find("demo: --model needs a value (PATH)"), std::string::npos);
  EXPECT_NE(usage_error({"--tp", "1", "--tp=2"}).find("demo: --tp given twice"), std::string::npos);
  EXPECT_NE(usage_error({"stray"}).find("demo: unexpected argument 'stray'"), std::string::npos);
  const CliArgs a(kSpec, {"--max-tokens", "ten", "--temperature", "9"});
  EXPECT_THROW(a.required("model"), UsageError);
  try {
    a.integer("max-tokens", 1, 1000);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "demo: --max-tokens: expected an integer, got 'ten'");
  }
  EXPECT_THROW(a.real("temperature", 0, 2), UsageError);
}

TEST(CliArgs, MisuseOfTheTableIsABug) {
  const CliArgs a(kSpec, {"--model", "m"});
  EXPECT_THROW(a.str("nope"), std::logic_error);                // not in the table
  EXPECT_THROW(a.integer("max-tokens", 5, 1, 9), std::logic_error);  // a fallback would shadow the literal default
  EXPECT_THROW(a.integer("tp", 1, 9), std::logic_error);        // no literal default to use
  EXPECT_THROW(a.flag("model"), std::logic_error);              // not a flag
}

TEST(CliArgs, UsageTextListsEveryOptionWithItsDefault) {
  const std::string u = usage_text(kSpec);
  EXPECT_EQ(u.rfind("usage: tpserve demo [options]\na demo command\n", 0), 0u) << u;
  for (const char* line : {
                           "  --model PATH     the model (required)\n",
                           "  --max-tokens N   tokens to generate (default: 64)\n",
                           "  --temperature T  sampling temperature (default: 0.5)\n",
                           "  --label TEXT     an optional label (default: none)\n",
                           "  --tp N           tensor-parallel degree (default: parallel.tp of the config)\n",
                           "  --json           print JSON (off)\n",
                           "  -h, --help       print this help and exit\n",
                           "\nSIZE: 80GB = 80e9 bytes.\n"})
    EXPECT_NE(u.find(line), std::string::npos) << "missing: " << line << "\n" << u;
}

}  // namespace
}  // namespace tp
