// Tool-call parsing per family (Hermes/Qwen, Llama 3 JSON, Mistral), the syntax detection on the families'
// real templates (the chat-template fixtures), and the stream filter (held text, the calls at the end).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "coordinator/tool_call_parser.h"

namespace tp {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");

struct Case {
  const char* name;
  ToolCallSyntax syntax;
  std::string text;
  std::string content;                  // expected content
  std::vector<ParsedToolCall> calls;    // expected calls
};

TEST(ToolCallParser, Table) {
  const std::vector<Case> cases = {
      {"hermes one", ToolCallSyntax::Hermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
       "", {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}}},
      {"hermes content then two calls", ToolCallSyntax::Hermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>",
       "Let me check.", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", R"({"tz":"Europe/Paris"})"}}},
      {"hermes unterminated at eos", ToolCallSyntax::Hermes,
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}", "", {{"get_time", R"({"tz":"UTC"})"}}},
      {"hermes arguments as string", ToolCallSyntax::Hermes,
       "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}</tool_call>", "",
       {{"get_time", R"({"tz":"UTC"})"}}},
      {"hermes unknown tool is text", ToolCallSyntax::Hermes,
       "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", {}},
      {"hermes bad json is text", ToolCallSyntax::Hermes, "<tool_call>{\"name\": \"get_time\", </tool_call>",
       "<tool_call>{\"name\": \"get_time\", </tool_call>", {}},
      {"hermes plain text", ToolCallSyntax::Hermes, "The weather is nice.", "The weather is nice.", {}},
      {"llama3 one", ToolCallSyntax::Llama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}", "",
       {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}}},
      {"llama3 python tag and two", ToolCallSyntax::Llama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b}\"}}; {\"name\": \"get_time\", "
       "\"arguments\": {\"tz\": \"UTC\"}}",
       "", {{"get_weather", R"({"city":"a;b}"})"}, {"get_time", R"({"tz":"UTC"})"}}},
      {"llama3 prose is text", ToolCallSyntax::Llama3Json, "Sure! {\"name\": \"get_time\"}",
       "Sure! {\"name\": \"get_time\"}", {}},
      {"llama3 json that is no call", ToolCallSyntax::Llama3Json, "{\"answer\": 4}", "{\"answer\": 4}", {}},
      {"mistral array", ToolCallSyntax::Mistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
       "\"arguments\": {\"tz\": \"UTC\"}}]",
       "", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", R"({"tz":"UTC"})"}}},
      {"mistral args form with content", ToolCallSyntax::Mistral,
       "Checking. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": \"UTC\"}",
       "Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", R"({"tz":"UTC"})"}}},
      {"mistral truncated is text", ToolCallSyntax::Mistral, "[TOOL_CALLS][{\"name\": \"get_weather\"",
       "[TOOL_CALLS][{\"name\": \"get_weather\"", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ToolCallParse p = parse_tool_calls(c.syntax, c.text, kTools);
    EXPECT_EQ(p.content, c.content);
    EXPECT_EQ(p.calls, c.calls);
  }
}

TEST(ToolCallParser, NullToolsAcceptAnyName) {
  const auto p = parse_tool_calls(ToolCallSyntax::Hermes, "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>", nullptr);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "x");
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(ToolCallParser, DetectsSyntaxFromTheFamiliesTemplates) {
  const auto dir = std::filesystem::path(TPSERVE_SOURCE_DIR) / "tests/peers/fixtures/chat_templates";
  const std::vector<std::pair<const char*, ToolCallSyntax>> want = {
      {"qwen2.5", ToolCallSyntax::Hermes},       {"qwen3", ToolCallSyntax::Hermes},
      {"hermes2pro", ToolCallSyntax::Hermes},    {"smollm2", ToolCallSyntax::Hermes},
      {"llama3.1", ToolCallSyntax::Llama3Json},  {"llama3.2", ToolCallSyntax::Llama3Json},
      {"mistral-nemo", ToolCallSyntax::Mistral},
  };
  for (const auto& [family, syntax] : want) {
    std::ifstream f(dir / (std::string(family) + ".json"));
    ASSERT_TRUE(f) << family;
    const json doc = json::parse(f);
    EXPECT_EQ(detect_tool_call_syntax(doc["template"].get<std::string>()), syntax) << family;
  }
}

// Feeds `pieces` one by one; returns the content streamed (pushes then finish) and the calls.
std::pair<std::string, std::vector<ParsedToolCall>> stream(ToolCallSyntax s, const std::vector<std::string>& pieces) {
  ToolCallStreamFilter f(s, kTools);
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  auto end = f.finish();
  return {out + end.content, end.calls};
}

TEST(ToolCallStreamFilter, PlainTextPassesAndPartialMarkerIsHeldThenReleased) {
  ToolCallStreamFilter f(ToolCallSyntax::Hermes, kTools);
  EXPECT_EQ(f.push("Hello <to"), "Hello ");  // "<to" may begin "<tool_call>"
  EXPECT_EQ(f.push("day>"), "<today>");
  EXPECT_EQ(f.push(" done"), " done");
  const auto end = f.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "");
}

TEST(ToolCallStreamFilter, CallsAtTheEndContentBefore) {
  const auto [content, calls] =
      stream(ToolCallSyntax::Hermes, {"Let me", " check.\n<tool", "_call>\n{\"name\": \"get_time\", ",
                                      "\"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>"});
  EXPECT_EQ(content, "Let me check.\n");
  EXPECT_EQ(calls, (std::vector<ParsedToolCall>{{"get_time", R"({"tz":"UTC"})"}}));
}

TEST(ToolCallStreamFilter, HeldTextThatIsNoCallComesOutAtTheEnd) {
  const auto [content, calls] = stream(ToolCallSyntax::Hermes, {"a <tool_call> b", " c"});
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "a <tool_call> b c");
}

TEST(ToolCallStreamFilter, Llama3HoldsJsonStreamsProse) {
  auto [c1, k1] = stream(ToolCallSyntax::Llama3Json, {" ", "{\"name\": \"get_time\", ", "\"parameters\": {}}"});
  EXPECT_EQ(c1, "");
  EXPECT_EQ(k1, (std::vector<ParsedToolCall>{{"get_time", "{}"}}));
  ToolCallStreamFilter f(ToolCallSyntax::Llama3Json, kTools);
  EXPECT_EQ(f.push("<|pyth"), "");
  EXPECT_EQ(f.push("on_tag|>{\"name\": \"get_time\", \"parameters\": {}}"), "");
  EXPECT_EQ(f.finish().calls.size(), 1u);
  auto [c2, k2] = stream(ToolCallSyntax::Llama3Json, {"Hi", " {there}"});
  EXPECT_EQ(c2, "Hi {there}");
  EXPECT_TRUE(k2.empty());
}

// A resumed stream: the filter primed with the text the client has goes on as the one that streamed it —
// nothing of it sent again, the calls parsed from the whole text, plain Llama 3 prose stays plain.
TEST(ToolCallStreamFilter, PrimedWithTheContinuedTextGoesOnAsTheUnbrokenOne) {
  const std::vector<std::string> rest = {"<tool", "_call>\n{\"name\": \"get_time\", ",
                                         "\"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>"};
  std::vector<std::string> all = {"Let me check.\n"};
  all.insert(all.end(), rest.begin(), rest.end());
  const auto unbroken = stream(ToolCallSyntax::Hermes, all);
  ToolCallStreamFilter f(ToolCallSyntax::Hermes, kTools);
  f.prime("Let me check.\n");
  std::string out;
  for (const auto& p : rest) out += f.push(p);
  const auto end = f.finish();
  EXPECT_EQ(out + end.content, "") << "the client has the content";
  EXPECT_EQ(end.calls, unbroken.second);
  ToolCallStreamFilter g(ToolCallSyntax::Llama3Json, kTools);
  g.prime("Hi");
  EXPECT_EQ(g.push(" {\"name\": \"get_time\", \"parameters\": {}}"), " {\"name\": \"get_time\", \"parameters\": {}}")
      << "prose began: it stays prose";
  ToolCallStreamFilter h(ToolCallSyntax::Llama3Json, kTools);
  h.prime("");
  EXPECT_EQ(h.push("{\"name\": \"get_time\", \"parameters\": {}}"), "");
  EXPECT_EQ(h.finish().calls, (std::vector<ParsedToolCall>{{"get_time", "{}"}}));
  // Primed with part of a call (held when it was streamed): still held, parsed at the end.
  ToolCallStreamFilter m(ToolCallSyntax::Llama3Json, kTools);
  m.prime("{\"name\": \"get_");
  EXPECT_EQ(m.push("time\", \"parameters\": {}}"), "");
  const auto m_end = m.finish();
  EXPECT_EQ(m_end.content, "");
  EXPECT_EQ(m_end.calls, (std::vector<ParsedToolCall>{{"get_time", "{}"}}));
  ToolCallStreamFilter hc(ToolCallSyntax::Hermes, kTools);
  hc.prime("Let me check.\n<tool");
  std::string hc_out;
  for (size_t i = 1; i < rest.size(); ++i) hc_out += hc.push(rest[i]);
  const auto hc_end = hc.finish();
  EXPECT_EQ(hc_out + hc_end.content, "");
  EXPECT_EQ(hc_end.calls, unbroken.second);
  // A partial marker the client got once the next text showed it was none: not sent again.
  ToolCallStreamFilter pm(ToolCallSyntax::Hermes, kTools);
  pm.prime("Hello <to");
  EXPECT_EQ(pm.push("day>"), "day>");
  EXPECT_EQ(pm.finish().content, "");
}

TEST(ToolCallStreamFilter, Mistral) {
  const auto [content, calls] =
      stream(ToolCallSyntax::Mistral, {"[TOOL", "_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]"});
  EXPECT_EQ(content, "");
  EXPECT_EQ(calls, (std::vector<ParsedToolCall>{{"get_weather", R"({"city":"Oslo"})"}}));
}

}  // namespace
}  // namespace tp
