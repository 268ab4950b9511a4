// The models' own chat templates rendered by our engine (llama.cpp's Jinja) against transformers'
// apply_chat_template: tests/peers/fixtures/chat_templates/<family>.json (made by
// tests/peers/make_chat_template_fixtures.sh) holds each family's template and, per conversation, the exact text
// transformers rendered — or the error it raised, which we must raise too. Byte-for-byte equality, no tolerance.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "coordinator/jinja_template.h"
#include "coordinator/openai_error.h"

namespace tp {
namespace {

using json = nlohmann::ordered_json;

std::filesystem::path fixture_dir() {
  return std::filesystem::path(TPSERVE_SOURCE_DIR) / "tests/peers/fixtures/chat_templates";
}

json load(const std::string& family) {
  std::ifstream f(fixture_dir() / (family + ".json"));
  if (!f) throw std::runtime_error("missing fixture " + family);
  return json::parse(f);
}

class FamilyFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyFixture, RendersLikeTransformers) {
  setenv("TZ", "UTC", 1);  // the fixtures pin strftime_now() to an instant, formatted in UTC
  tzset();
  const json doc = load(GetParam());
  const JinjaTemplate t(doc["template"].get<std::string>(), doc["bos_token"].get<std::string>(),
                        doc["eos_token"].get<std::string>());
  ASSERT_FALSE(doc["cases"].empty());
  for (const json& c : doc["cases"]) {
    SCOPED_TRACE(GetParam() + " / " + c["name"].get<std::string>());
    ChatRenderInput in;
    in.messages = c["messages"];
    in.tools = c["tools"];
    in.documents = c["documents"];
    in.kwargs = c["kwargs"];
    in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    in.now = doc["now"].get<std::time_t>();
    if (c.contains("error")) {
      EXPECT_THROW(t.render(in), ApiException) << "transformers raised: " << c["error"];
    } else {
      EXPECT_EQ(t.render(in), c["expected"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyFixture,
                         ::testing::Values("smollm2", "llama3.1", "llama3.2", "qwen2.5", "qwen3", "mistral-nemo",
                                           "gemma2", "hermes2pro", "gpt-oss"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(JinjaTemplate, ParseErrorIsInputErrorWithPosition) {
  try {
    JinjaTemplate t("{% for m in messages %}{{ m.content }", "", "");
    FAIL() << "parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chat template does not parse"), std::string::npos) << e.what();
  }
}

TEST(JinjaTemplate, RaiseExceptionIs400OnMessages) {
  const JinjaTemplate t("{{ raise_exception('roles must alternate') }}", "", "");
  try {
    t.render({});
    FAIL() << "rendered";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.param, "messages");
    EXPECT_NE(e.error.message.find("roles must alternate"), std::string::npos) << e.error.message;
  }
}

TEST(JinjaTemplate, KwargsOverrideAndToolsUndefinedWhenNull) {
  const JinjaTemplate t("{{ bos_token }}|{{ tools is defined }}|{{ flag }}|{{ add_generation_prompt }}", "<s>", "</s>");
  ChatRenderInput in;
  in.kwargs = {{"flag", "x"}, {"bos_token", "B"}};
  EXPECT_EQ(t.render(in), "B|False|x|True");
  in.tools = json::array();
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in), "B|True|x|False");
}

TEST(ToolCallArguments, JsonStringsBecomeObjectsOthersStay) {
  const json in = json::parse(R"([
    {"role": "assistant", "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
      {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
      {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[1]"}}]},
    {"role": "user", "content": "{\"x\": 1}"}])");
  const json out = tool_call_arguments_as_objects(in);
  EXPECT_EQ(out[0]["tool_calls"][0]["function"]["arguments"], json({{"x", 1}}));
  EXPECT_EQ(out[0]["tool_calls"][1]["function"]["arguments"], "not json");
  EXPECT_EQ(out[0]["tool_calls"][2]["function"]["arguments"], "[1]");
  EXPECT_EQ(out[1]["content"], "{\"x\": 1}");
}

}  // namespace
}  // namespace tp
