// /v1/responses pieces without a model: the request mapped onto a chat body (and its 400s), a chat response
// mapped to a Response, and ResponsesStream turning the chat SSE chunks into the Responses API's events.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "coordinator/openai_error.h"
#include "coordinator/responses_api.h"

namespace tp {
namespace {

using json = nlohmann::json;

TEST(ResponsesApi, RequestToChatBody) {
  const json chat = responses_to_chat_body(json::parse(
      R"({"model":"m","input":"hi","instructions":"Be brief.","max_output_tokens":5,"temperature":0,"stream":true,"store":false})"));
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}])"));
  EXPECT_EQ(chat["max_tokens"], 5);
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_FALSE(chat.contains("store"));
  const json list = responses_to_chat_body(json::parse(
      R"({"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]},{"role":"assistant","content":"b"}]})"));
  EXPECT_EQ(list["messages"][0]["content"], json::parse(R"([{"type":"text","text":"a"}])"));
  EXPECT_EQ(list["messages"][1]["role"], "assistant");
}

TEST(ResponsesApi, RequestErrorsNameTheField) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({})", "input"},
      {R"({"input":5})", "input"},
      {R"({"input":[]})", "input"},
      {R"({"input":"x","previous_response_id":"resp_1"})", "previous_response_id"},
      {R"({"input":"x","tools":[{"type":"function","name":"f"}]})", "tools"},
      {R"({"input":"x","text":{"format":{"type":"json_object"}}})", "text.format"},
      {R"({"input":[{"type":"function_call_output","call_id":"c","output":"x"}]})", "input[0].type"},
      {R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})", "input[0].content[0].type"},
      {R"({"input":"x","instructions":3})", "instructions"},
  };
  for (const auto& [body, param] : cases) {
    try {
      responses_to_chat_body(json::parse(body));
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error.param, param) << body;
      EXPECT_EQ(e.error.status, 400);
    }
  }
}

TEST(ResponsesApi, ChatToResponse) {
  const json chat = json::parse(R"({"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"m",
    "choices":[{"index":0,"message":{"role":"assistant","content":"Paris."},"finish_reason":"stop","logprobs":null}],
    "usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}})");
  const json r = chat_to_response(chat, "resp_x", "Be brief.");
  EXPECT_EQ(r["id"], "resp_x");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["output_text"], "Paris.");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Paris.");
  EXPECT_EQ(r["output"][0]["role"], "assistant");
  EXPECT_EQ(r["usage"]["input_tokens"], 10);
  EXPECT_EQ(r["usage"]["output_tokens"], 3);
  json cut = chat;
  cut["choices"][0]["finish_reason"] = "length";
  EXPECT_EQ(chat_to_response(cut, "resp_x", nullptr)["status"], "incomplete");
  EXPECT_EQ(chat_to_response(cut, "resp_x", nullptr)["incomplete_details"]["reason"], "max_output_tokens");
}

// Collects what the adapter writes.
struct Capture : ResponseStream {
  std::vector<std::string> writes;
  bool began = false;
  bool start(int, const std::string&) override { return began = true; }
  bool write(std::string_view d) override {
    writes.emplace_back(d);
    return true;
  }
  bool started() const override { return began; }
  bool peer_closed() override { return false; }
};

std::vector<json> events(const Capture& c) {
  std::vector<json> out;
  for (const std::string& w : c.writes) {
    const size_t data = w.find("data: ");
    EXPECT_EQ(w.rfind("event: ", 0), 0u) << w;
    json e = json::parse(w.substr(data + 6));
    EXPECT_NE(w.find("event: " + e["type"].get<std::string>() + "\n"), std::string::npos) << w;
    out.push_back(std::move(e));
  }
  return out;
}

TEST(ResponsesStream, ChatChunksBecomeResponseEvents) {
  Capture cap;
  ResponsesStream s(cap, "resp_1", "m", 7, nullptr);
  ASSERT_TRUE(s.start(200, "text/event-stream"));
  const auto chunk = [](const json& choice) {
    return sse_event(json{{"object", "chat.completion.chunk"}, {"choices", json::array({choice})}}.dump());
  };
  ASSERT_TRUE(s.write(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}})));
  ASSERT_TRUE(s.write(chunk({{"index", 0}, {"delta", {{"content", "Hel"}}}, {"finish_reason", nullptr}})));
  ASSERT_TRUE(s.write(chunk({{"index", 0}, {"delta", {{"content", "lo"}}}, {"finish_reason", nullptr}})));
  ASSERT_TRUE(s.write(chunk({{"index", 0}, {"delta", json::object()}, {"finish_reason", "stop"}})));
  ASSERT_TRUE(s.write(sse_event(json{{"choices", json::array()},
                                     {"usage", {{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}}}
                                    .dump())));
  ASSERT_TRUE(s.write(sse_event("[DONE]")));
  const std::vector<json> ev = events(cap);
  std::vector<std::string> types;
  for (const json& e : ev) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.delta", "response.output_text.done",
                                             "response.content_part.done", "response.output_item.done",
                                             "response.completed"}));
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i]["sequence_number"], i);
  EXPECT_EQ(ev[4]["delta"], "Hel");
  EXPECT_EQ(ev[6]["text"], "Hello");
  EXPECT_EQ(ev.back()["response"]["status"], "completed");
  EXPECT_EQ(ev.back()["response"]["output_text"], "Hello");
  EXPECT_EQ(ev.back()["response"]["usage"]["output_tokens"], 2);
  EXPECT_EQ(ev.back()["response"]["id"], "resp_1");
}

TEST(ResponsesStream, ErrorEventAndIncomplete) {
  Capture cap;
  ResponsesStream s(cap, "resp_1", "m", 7, nullptr);
  ASSERT_TRUE(s.start(200, "text/event-stream"));
  ASSERT_TRUE(s.write(sse_event(to_json(internal_error("generation failed: boom")))));
  auto ev = events(cap);
  EXPECT_EQ(ev.back()["type"], "error");
  EXPECT_EQ(ev.back()["message"], "generation failed: boom");
  Capture cap2;
  ResponsesStream s2(cap2, "resp_2", "m", 7, nullptr);
  ASSERT_TRUE(s2.start(200, "text/event-stream"));
  ASSERT_TRUE(s2.write(sse_event(json{{"choices", json::array({{{"index", 0}, {"delta", {{"content", "a"}}},
                                                                 {"finish_reason", "length"}}})}}.dump())));
  ASSERT_TRUE(s2.write(sse_event("[DONE]")));
  ev = events(cap2);
  EXPECT_EQ(ev.back()["type"], "response.incomplete");
  EXPECT_EQ(ev.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

}  // namespace
}  // namespace tp
