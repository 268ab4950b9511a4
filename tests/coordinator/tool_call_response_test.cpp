// Tool calls in chat responses: the non-streamed rewrite of choices and the argument fragments of streams.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "coordinator/tool_call_response.h"

namespace tp {
namespace {

using json = nlohmann::json;

TEST(ToolCallResponse, RewritesChoicesWithCalls) {
  json body = json::parse(R"({"object":"chat.completion","choices":[
    {"index":0,"message":{"role":"assistant","content":"Sure.\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>"},"finish_reason":"stop"},
    {"index":1,"message":{"role":"assistant","content":"plain text"},"finish_reason":"stop"},
    {"index":2,"message":{"role":"assistant","content":"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"},"finish_reason":"length"}]})");
  const auto tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"f"}}])");
  int n = 0;
  apply_tool_calls(body, ToolCallSyntax::Hermes, tools, [&] { return "call_" + std::to_string(n++); });
  const json& c0 = body["choices"][0];
  EXPECT_EQ(c0["finish_reason"], "tool_calls");
  EXPECT_EQ(c0["message"]["content"], "Sure.");
  EXPECT_EQ(c0["message"]["tool_calls"],
            json::parse(R"([{"id":"call_0","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}])"));
  EXPECT_EQ(body["choices"][1]["message"]["content"], "plain text");
  EXPECT_FALSE(body["choices"][1]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][2]["finish_reason"], "length");  // a call is reported; the reason stays
  EXPECT_TRUE(body["choices"][2]["message"]["content"].is_null());
}

TEST(ToolCallResponse, ArgumentFragmentsConcatenateAndKeepUtf8Whole) {
  const std::string args = R"({"city": "Zürich", "note": "日本語のテキスト"})";
  const auto frags = argument_fragments(args, 4);
  std::string joined;
  for (const std::string& f : frags) {
    joined += f;
    ASSERT_FALSE(f.empty());
    EXPECT_NE(static_cast<unsigned char>(f[0]) & 0xC0, 0x80) << "fragment starts inside a UTF-8 sequence";
  }
  EXPECT_EQ(joined, args);
  EXPECT_GT(frags.size(), 5u);
  EXPECT_TRUE(argument_fragments("", 4).empty());
}

}  // namespace
}  // namespace tp
