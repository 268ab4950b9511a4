// The request side of tool calling: tools / tool_choice / documents / chat_template_kwargs validation, message
// tool fields, the forced-call schema and its refusal until structured output exists.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "coordinator/chat_tools.h"
#include "coordinator/openai_request.h"

namespace tp {
namespace {

using ojson = nlohmann::ordered_json;

const char* kTools = R"("tools":[
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
  {"type":"function","function":{"name":"get_time"}}])";

ChatCompletionRequest chat(const std::string& extra) {
  return parse_chat_completion_body(R"({"messages":[{"role":"user","content":"x"}],)" + extra + "}");
}

ApiError chat_error(const std::string& extra) {
  try {
    chat(extra);
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "no error for " << extra;
  return {};
}

TEST(ChatTools, DefaultsAndChoices) {
  auto none = parse_chat_completion_body(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_TRUE(none.tools.tools.is_null());
  EXPECT_EQ(none.tools.choice.mode, ToolChoiceMode::None);
  EXPECT_FALSE(none.tools.parse_calls());
  auto r = chat(kTools);
  ASSERT_EQ(r.tools.tools.size(), 2u);
  EXPECT_EQ(r.tools.choice.mode, ToolChoiceMode::Auto);
  EXPECT_TRUE(r.tools.parse_calls());
  // Key order is the client's ("type" before "function"), as templates print it with tojson.
  EXPECT_EQ(r.tools.tools[0].begin().key(), "type");
  EXPECT_EQ(chat(std::string(kTools) + R"(,"tool_choice":"none")").tools.choice.mode, ToolChoiceMode::None);
  EXPECT_EQ(chat(std::string(kTools) + R"(,"tool_choice":"required")").tools.choice.mode, ToolChoiceMode::Required);
  auto named = chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})");
  EXPECT_EQ(named.tools.choice.mode, ToolChoiceMode::Named);
  EXPECT_EQ(named.tools.choice.name, "get_time");
  auto k = chat(R"("chat_template_kwargs":{"enable_thinking":false},"documents":[{"title":"a","text":"b"}])");
  EXPECT_EQ(k.tools.chat_template_kwargs, ojson({{"enable_thinking", false}}));
  EXPECT_EQ(k.tools.documents.size(), 1u);
  EXPECT_TRUE(k.params.ignored_fields.empty());
}

TEST(ChatTools, Errors) {
  struct Case {
    std::string extra;
    const char* param;
  };
  const Case cases[] = {
      {R"("tools":{})", "tools"},
      {R"("tools":[5])", "tools[0]"},
      {R"("tools":[{"type":"retrieval","function":{"name":"a"}}])", "tools[0].type"},
      {R"("tools":[{"type":"function","function":{}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"a","parameters":3}}])", "tools[0].function.parameters"},
      {R"("tools":[{"function":{"name":"a"}},{"function":{"name":"a"}}])", "tools[1].function.name"},
      {R"("tool_choice":"required")", "tool_choice"},
      {std::string(kTools) + R"(,"tool_choice":"sometimes")", "tool_choice"},
      {std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})",
       "tool_choice.function.name"},
      {std::string(kTools) + R"(,"tool_choice":{"type":"function"})", "tool_choice.function.name"},
      {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
      {R"("documents":"x")", "documents"},
      {R"("chat_template_kwargs":[1])", "chat_template_kwargs"},
  };
  for (const Case& c : cases) EXPECT_EQ(chat_error(c.extra).param, c.param) << c.extra;
}

TEST(ChatTools, MessageToolFields) {
  auto r = parse_chat_completion_body(R"({"messages":[
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"a\": 1}"}}]},
    {"role":"tool","tool_call_id":"call_1","name":"get_weather","content":"18 C"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  // arguments: the JSON string became an object, in the client's key order
  EXPECT_EQ(r.messages[1].tool_calls.dump(),
            R"([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","a":1}}}])");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  try {
    parse_chat_completion_body(R"({"messages":[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}]})");
    ADD_FAILURE() << "user tool_calls accepted";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.param, "messages[0].tool_calls");
  }
}

TEST(ChatTools, ForcedCallSchemaBecomesTheConstraint) {
  auto named = chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})");
  EXPECT_EQ(forced_tool_call_schema(named.tools).dump(),
            R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object","properties":)"
            R"({"city":{"type":"string"}},"required":["city"]}},"required":["name","arguments"]})");
  auto required = chat(std::string(kTools) + R"(,"tool_choice":"required")");
  const ojson any = forced_tool_call_schema(required.tools);
  ASSERT_TRUE(any.contains("anyOf"));
  EXPECT_EQ(any["anyOf"].size(), 2u);
  EXPECT_EQ(any["anyOf"][1]["properties"]["arguments"], ojson({{"type", "object"}}));
  EXPECT_TRUE(forced_tool_call_schema(chat(kTools).tools).is_null());
  // Forced: the call's schema becomes the request's structured-output constraint.
  ASSERT_TRUE(apply_forced_tool_call(required.tools, required.params));
  EXPECT_EQ(required.params.constraint.kind, OutputConstraint::Kind::JsonSchema);
  EXPECT_EQ(required.params.constraint.spec, any.dump());
  EXPECT_EQ(required.params.constraint.param, "tool_choice");
  // With another constraint on the same request: 400 on tool_choice.
  auto both = chat(std::string(kTools) + R"(,"tool_choice":"required","response_format":{"type":"json_object"})");
  try {
    apply_forced_tool_call(both.tools, both.params);
    ADD_FAILURE() << "forced call combined with response_format accepted";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.param, "tool_choice");
  }
  GenerationParams p;
  EXPECT_FALSE(apply_forced_tool_call(chat(kTools).tools, p));
  EXPECT_FALSE(p.constraint.active());
}

}  // namespace
}  // namespace tp
