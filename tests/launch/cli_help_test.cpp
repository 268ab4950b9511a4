// `tpserve --help`, `tpserve <command> --help` and `--version` as a user runs them: exit 0 with the text on
// stdout; every option of every subcommand listed with a description and its default (or "required" / "off");
// every option the help lists accepted by the parser, and an unknown one refused by name.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "common/version.h"
#include "tests/util/run_tpserve.h"

namespace {

// stdout only (stderr discarded), and the exit code.
tp::test::Result run_stdout(const std::string& args) {
  const std::string cmd = std::string(TPSERVE_BIN) + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// The options each subcommand had before its table existed: none may go missing from --help.
const std::map<std::string, std::vector<std::string>> kOptions = {
    {"generate", {"model", "prompt", "max-tokens", "temperature", "top-p", "top-k", "min-p", "seed", "config", "dtype",
                  "threads", "tp", "ignore-eos"}},
    {"convert", {"in", "out", "to"}},
    {"synth", {"out", "layers", "hidden", "heads", "kv-heads", "intermediate", "vocab", "seed", "dtype"}},
    {"plan", {"model", "gpu-mem", "gpus", "tp", "dp", "weights", "kv-dtype", "context", "mean-len", "reserve", "kv-mem",
              "block-size", "cards", "json"}},
    {"config", {"config"}},
    {"quantize", {"in", "out", "scheme", "method", "group-size", "act-order", "calib", "calib-tokens", "ignore"}},
    {"serve", {"config", "model", "host", "port", "tp", "threads", "api-key", "dtype", "kv-events"}},
    {"router", {"config", "model", "replicas", "policy", "host", "port", "api-key", "log-format", "kv-fetch"}},
    {"eval", {"model", "text", "ref", "context", "max-chunks", "json", "tp", "threads", "dtype", "kv-cache-dtype"}},
    {"simulate", {"model", "gpu", "workload", "tp", "dp", "nodes", "weights", "kv-dtype", "kv-mem", "json"}},
};

struct HelpLine {
  std::string name, placeholder, rest;
};

// "  --name PLACEHOLDER   description (default: x)" lines of a --help text.
std::vector<HelpLine> option_lines(const std::string& help) {
  std::vector<HelpLine> lines;
  static const std::regex re(R"(^  --([a-z0-9-]+)( [^ ]+)?  +(.*)$)");
  size_t pos = 0;
  while (pos < help.size()) {
    const size_t end = help.find('\n', pos);
    const std::string line = help.substr(pos, end - pos);
    std::smatch m;
    if (std::regex_match(line, m, re)) lines.push_back({m[1], m[2].matched ? m[2].str().substr(1) : "", m[3]});
    pos = end == std::string::npos ? help.size() : end + 1;
  }
  return lines;
}

TEST(CliHelp, TopLevelHelpListsEveryCommand) {
  for (const char* flag : {"--help", "-h"}) {
    const auto r = run_stdout(flag);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("usage: tpserve <command>"), std::string::npos) << r.out;
    for (const auto& [cmd, opts] : kOptions) EXPECT_NE(r.out.find("\n  " + cmd + " "), std::string::npos) << cmd;
    EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
  }
}

TEST(CliHelp, EverySubcommandListsEachOptionWithItsDefault) {
  for (const auto& [cmd, opts] : kOptions) {
    for (const char* flag : {"--help", "-h"}) {
      const auto r = run_stdout(cmd + " " + flag);
      ASSERT_EQ(r.code, 0) << cmd << " " << flag << "\n" << r.out;
      EXPECT_EQ(r.out.rfind("usage: tpserve " + cmd + " [options]\n", 0), 0u) << r.out;
      const auto lines = option_lines(r.out);
      for (const std::string& o : opts) {
        const auto it = std::find_if(lines.begin(), lines.end(), [&](const HelpLine& l) { return l.name == o; });
        ASSERT_NE(it, lines.end()) << cmd << ": --" << o << " is not in --help:\n" << r.out;
        // A description, then exactly one of: its default, "required", "off" (a flag).
        static const std::regex tail(R"(^[^ ].* \((default: .+|required|off)\)$)");
        EXPECT_TRUE(std::regex_match(it->rest, tail)) << cmd << " --" << o << ": '" << it->rest << "'";
        EXPECT_EQ(it->placeholder.empty(), it->rest.ends_with("(off)")) << cmd << " --" << o << ": " << it->rest;
      }
      EXPECT_NE(r.out.find("-h, --help"), std::string::npos) << r.out;
    }
  }
}

TEST(CliHelp, LiteralDefaultsAreTheOnesUsed) {
  // Spot checks of defaults the commands apply themselves (their tests check the behaviour).
  const auto gen = run_stdout("generate --help").out;
  EXPECT_NE(gen.find("--max-tokens N"), std::string::npos) << gen;
  EXPECT_NE(gen.find("(default: 64)"), std::string::npos) << gen;
  EXPECT_NE(gen.find("--prompt TEXT"), std::string::npos) << gen;
  EXPECT_NE(gen.find("(required)"), std::string::npos) << gen;
  const auto plan = run_stdout("plan --help").out;
  EXPECT_NE(plan.find("(default: 3GiB)"), std::string::npos) << plan;
  EXPECT_NE(plan.find("SIZE: 80GB = 80e9 bytes"), std::string::npos) << plan;
  const auto synth = run_stdout("synth --help").out;
  EXPECT_NE(synth.find("--layers L"), std::string::npos) << synth;
  EXPECT_NE(synth.find("transformer layers (default: 4)"), std::string::npos) << synth;
}

TEST(CliHelp, EveryListedOptionIsAcceptedByTheParser) {
  // Parsing stops at --help, so `cmd --opt VALUE --help` exits 0 only when --opt is one of cmd's options.
  for (const auto& [cmd, opts] : kOptions) {
    const auto lines = option_lines(run_stdout(cmd + " --help").out);
    ASSERT_FALSE(lines.empty()) << cmd;
    for (const HelpLine& l : lines) {
      const std::string args = cmd + " --" + l.name + (l.placeholder.empty() ? "" : " x") + " --help";
      const auto r = tp::test::run_tpserve(args);
      EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
    }
    const auto bad = tp::test::run_tpserve(cmd + " --no-such-option 1 --help");
    EXPECT_EQ(bad.code, 2) << cmd << "\n" << bad.out;
    EXPECT_NE(bad.out.find("tpserve " + cmd + ": unknown option --no-such-option"), std::string::npos) << bad.out;
  }
}

TEST(CliHelp, HelpAfterAValueIsNotHelp) {
  // `--prompt -h` gives "-h" as the prompt's value: the parser does not mistake a value for an option.
  const auto r = tp::test::run_tpserve("generate --prompt -h --max-tokens ten");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-tokens: expected an integer, got 'ten'"), std::string::npos) << r.out;
}

TEST(CliVersion, PrintsVersionCommitBuildTypeAndBackends) {
  for (const char* arg : {"--version", "version"}) {
    const auto r = run_stdout(arg);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, tp::version_line() + "\n");
    EXPECT_EQ(r.out.rfind(std::string("tpserve ") + TPSERVE_EXPECTED_VERSION + " (commit ", 0), 0u) << r.out;
    static const std::regex shape(
        R"(^tpserve \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,}(-dirty)?|unknown), \w+ build, CUDA: (yes|no), NCCL: (yes|no)\)\n$)");
    EXPECT_TRUE(std::regex_search(r.out, shape)) << r.out;
  }
}

}  // namespace
