// OpenAI request parsing: typed structs for valid bodies, 400s with param/code/message for invalid ones,
// and the OpenAI error JSON.
#include "coordinator/openai_request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "coordinator/openai_error.h"

namespace tp {
namespace {

using json = nlohmann::json;

// Runs `f`, expects an ApiException 400; returns it for further checks.
template <class F>
ApiError expect_400(F&& f) {
  try {
    f();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.type, "invalid_request_error");
    return e.error;
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

ApiError completion_error(const std::string& body) {
  return expect_400([&] { parse_completion_body(body); });
}
ApiError chat_error(const std::string& body) {
  return expect_400([&] { parse_chat_completion_body(body); });
}

TEST(OpenAiError, JsonShape) {
  ApiError e = bad_request("temperature must be between 0 and 2, got 3.5", "temperature");
  EXPECT_EQ(json::parse(to_json(e)),
            json::parse(R"({"error":{"message":"temperature must be between 0 and 2, got 3.5",
                          "type":"invalid_request_error","param":"temperature","code":"invalid_value"}})"));
  json j = json::parse(to_json(internal_error("boom")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(j["error"]["type"], "internal_server_error");
  EXPECT_EQ(unauthorized().status, 401);
  EXPECT_EQ(model_not_found("gpt-9").status, 404);
  EXPECT_EQ(model_not_found("gpt-9").code, "model_not_found");
  EXPECT_EQ(model_not_found("gpt-9").message, "The model `gpt-9` does not exist.");
  EXPECT_EQ(payload_too_large("x").status, 413);
  EXPECT_EQ(rate_limited("x").status, 429);
  EXPECT_EQ(service_unavailable("x").status, 503);
  // Invalid UTF-8 in a message does not throw.
  EXPECT_NO_THROW(to_json(bad_request("bad \xFF byte")));
}

TEST(OpenAiRequest, CompletionDefaults) {
  auto r = parse_completion_body(R"({"model":"smol","prompt":"Hello"})");
  EXPECT_EQ(r.params.model, "smol");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "Hello");
  EXPECT_FALSE(r.params.max_tokens.has_value());
  EXPECT_EQ(r.params.sampling, SamplingParams{});
  EXPECT_FALSE(r.params.seed.has_value());
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.params.stream);
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_TRUE(r.params.ignored_fields.empty());
}

TEST(OpenAiRequest, CompletionAllFields) {
  auto r = parse_completion_body(R"({
    "model":"smol","prompt":["Once upon"],"max_tokens":32,"temperature":0.7,"top_p":0.9,"top_k":40,
    "min_p":0.05,"seed":1234,"stop":["\n\n","END"],"ignore_eos":true,"presence_penalty":0.5,
    "frequency_penalty":-0.5,"repetition_penalty":1.1,"logprobs":5,"n":2,"stream":true,
    "stream_options":{"include_usage":true},"echo":false,"user":"u-1","best_of":2,"suffix":null,
    "mystery":1,"logit_bias":{}})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once upon");
  EXPECT_TRUE(r.params.logit_bias.empty());
  EXPECT_EQ(r.params.max_tokens, 32);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.05f);
  EXPECT_EQ(r.params.seed, 1234u);
  EXPECT_EQ(r.params.sampling.seed, 1234u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_FLOAT_EQ(r.params.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_EQ(r.params.sampling.logprobs, 5);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.params.ignored_fields, (std::vector<std::string>{"mystery"}));
}

TEST(OpenAiRequest, PromptForms) {
  auto t = parse_completion_body(R"({"prompt":[1, 2, 3]})");
  ASSERT_EQ(t.prompts.size(), 1u);
  EXPECT_TRUE(t.prompts[0].is_tokens);
  EXPECT_EQ(t.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto nested = parse_completion_body(R"({"prompt":[[7, 8]]})");
  ASSERT_EQ(nested.prompts.size(), 1u);
  EXPECT_EQ(nested.prompts[0].tokens, (std::vector<int32_t>{7, 8}));
  // Batches: strings or token arrays, in order.
  auto strings = parse_completion_body(R"({"prompt":["a","bc","d"]})");
  ASSERT_EQ(strings.prompts.size(), 3u);
  EXPECT_EQ(strings.prompts[1].text, "bc");
  auto arrays = parse_completion_body(R"({"prompt":[[1],[2,3]]})");
  ASSERT_EQ(arrays.prompts.size(), 2u);
  EXPECT_EQ(arrays.prompts[1].tokens, (std::vector<int32_t>{2, 3}));
  auto s = parse_completion_body(R"({"prompt":"x","stop":"\n","top_k":-1,"max_tokens":16.0})");
  EXPECT_EQ(s.params.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(s.params.sampling.top_k, 0);
  EXPECT_EQ(s.params.max_tokens, 16);

  const ApiError mixed = completion_error(R"({"prompt":["a",[1]]})");
  EXPECT_EQ(mixed.param, "prompt[1]");
  EXPECT_EQ(mixed.code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt":[[1],"a"]})").param, "prompt[1]");
  EXPECT_EQ(completion_error(R"({"prompt":["a",""]})").message, "prompt[1] must not be empty");
  EXPECT_EQ(completion_error(R"({"prompt":[[1],[]]})").param, "prompt[1]");
  EXPECT_EQ(completion_error(R"({"prompt":[[1],[2,-1]]})").param, "prompt[1][1]");
  std::string big = R"({"prompt":[)";
  for (int i = 0; i < 257; ++i) big += std::string(i ? "," : "") + "\"p\"";
  big += "]}";
  EXPECT_EQ(completion_error(big).message, "a batch may hold at most 256 prompts, got 257");
  EXPECT_EQ(completion_error(R"({"prompt":""})").message, "prompt must not be empty");
  EXPECT_EQ(completion_error(R"({"prompt":[]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":[1,-2]})").param, "prompt[1]");
  EXPECT_EQ(completion_error(R"({"prompt":[1,2.5]})").code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt":{"a":1}})").code, "invalid_type");
  auto missing = completion_error(R"({"model":"m"})");
  EXPECT_EQ(missing.param, "prompt");
  EXPECT_EQ(missing.code, "missing_required_parameter");
}

TEST(OpenAiRequest, RangeErrorsNameFieldAndValue) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"prompt":"x","temperature":3.5})", "temperature", "temperature must be between 0 and 2, got 3.5"},
      {R"({"prompt":"x","temperature":-1})", "temperature", "temperature must be between 0 and 2, got -1"},
      {R"({"prompt":"x","top_p":0})", "top_p", "top_p must be in (0, 1], got 0"},
      {R"({"prompt":"x","top_p":1.5})", "top_p", "top_p must be in (0, 1], got 1.5"},
      {R"({"prompt":"x","min_p":2})", "min_p", "min_p must be between 0 and 1, got 2"},
      {R"({"prompt":"x","top_k":-5})", "top_k", "top_k must be -1 (off), 0 (off) or a positive integer, got -5"},
      {R"({"prompt":"x","max_tokens":-1})", "max_tokens", "max_tokens must be at least 0, got -1"},
      {R"({"prompt":"x","prompt_logprobs":21})", "prompt_logprobs", "prompt_logprobs must be between 0 and 20, got 21"},
      {R"({"prompt":"x","logit_bias":{"5":100.5}})", "logit_bias", "logit_bias must be between -100 and 100, got 100.5"},
      {R"({"prompt":"x","logit_bias":{"x":1}})", "logit_bias",
       "logit_bias keys must be token ids (non-negative integers as strings), got \"x\""},
      {R"({"prompt":"x","logit_bias":{"-3":1}})", "logit_bias",
       "logit_bias keys must be token ids (non-negative integers as strings), got \"-3\""},
      {R"({"prompt":"x","n":0})", "n", "n must be between 1 and 16, got 0"},
      {R"({"prompt":"x","n":17})", "n", "n must be between 1 and 16, got 17"},
      {R"({"prompt":"x","logprobs":21})", "logprobs", "logprobs must be between 0 and 20, got 21"},
      {R"({"prompt":"x","presence_penalty":2.5})", "presence_penalty",
       "presence_penalty must be between -2 and 2, got 2.5"},
      {R"({"prompt":"x","frequency_penalty":-3})", "frequency_penalty",
       "frequency_penalty must be between -2 and 2, got -3"},
      {R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty",
       "repetition_penalty must be in (0, 2], got 0"},
      {R"({"prompt":"x","stop":["a","b","c","d","e"]})", "stop", "stop may contain at most 4 sequences, got 5"},
      {R"({"prompt":"x","stop":[""]})", "stop", "stop sequences must not be empty strings"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
       "stream_options can only be set when stream is true"},
  };
  for (const auto& c : cases) {
    auto e = completion_error(c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.message, c.message) << c.body;
    EXPECT_EQ(e.code, "invalid_value") << c.body;
  }
}

TEST(OpenAiRequest, TypeErrors) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"prompt":"x","temperature":"hot"})", "temperature", "temperature must be a number, got string \"hot\""},
      {R"({"prompt":"x","max_tokens":1.5})", "max_tokens", "max_tokens must be an integer, got number 1.5"},
      {R"({"prompt":"x","stream":1})", "stream", "stream must be a boolean, got number 1"},
      {R"({"prompt":"x","stop":5})", "stop", "stop must be a string or an array of strings, got number 5"},
      {R"({"prompt":"x","stop":["a",1]})", "stop[1]", "stop[1] must be a string, got number 1"},
      {R"({"prompt":"x","model":3})", "model", "model must be a string, got number 3"},
      {R"({"prompt":"x","seed":true})", "seed", "seed must be an integer, got boolean true"},
      {R"({"prompt":"x","stream":true,"stream_options":{"include_usage":"yes"}})", "stream_options.include_usage",
       "stream_options.include_usage must be a boolean, got string \"yes\""},
  };
  for (const auto& c : cases) {
    auto e = completion_error(c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.message, c.message) << c.body;
    EXPECT_EQ(e.code, "invalid_type") << c.body;
  }
}

// Prompt logprobs (echo + logprobs, vLLM's prompt_logprobs), max_tokens 0 and logit_bias parse as given.
TEST(OpenAiRequest, PromptLogprobsMaxTokensZeroAndLogitBias) {
  auto lm_eval = parse_completion_body(
      R"({"prompt":[[1,2,3],[4,5]],"max_tokens":1,"logprobs":1,"echo":true,"temperature":0,"seed":1234})");
  EXPECT_TRUE(lm_eval.echo);
  EXPECT_EQ(lm_eval.logprobs, 1);
  EXPECT_EQ(lm_eval.prompts.size(), 2u);
  auto zero = parse_completion_body(R"({"prompt":"x","max_tokens":0,"prompt_logprobs":3})");
  EXPECT_EQ(zero.params.max_tokens, 0);
  EXPECT_EQ(zero.params.prompt_logprobs, 3);
  EXPECT_TRUE(zero.params.ignored_fields.empty());
  auto bias = parse_completion_body(R"({"prompt":"x","logit_bias":{"50256":-100,"7":2.5}})");
  ASSERT_EQ(bias.params.logit_bias.size(), 2u);
  EXPECT_EQ(bias.params.logit_bias[0], (LogitBias{50256, -100.0f}));  // nlohmann keeps keys sorted
  EXPECT_EQ(bias.params.logit_bias[1], (LogitBias{7, 2.5f}));
  auto chat = parse_chat_completion_body(
      R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":0,"max_completion_tokens":0})");
  EXPECT_EQ(chat.params.prompt_logprobs, 0);
  EXPECT_EQ(chat.params.max_tokens, 0);
}

// tpserve_continuation (the router's resumption of a broken stream): token ids, on both endpoints; checked
// against the model and the rest of the request when tokenized (request_path_test.cpp).
TEST(OpenAiRequest, ContinuationIsAnArrayOfTokenIds) {
  EXPECT_EQ(parse_completion_body(R"({"prompt": "x", "tpserve_continuation": [5, 0, 7]})").params.continuation,
            (std::vector<int32_t>{5, 0, 7}));
  EXPECT_EQ(parse_chat_completion_body(R"({"messages": [{"role": "user", "content": "hi"}],
                                           "tpserve_continuation": []})").params.continuation,
            std::vector<int32_t>{});
  EXPECT_FALSE(parse_completion_body(R"({"prompt": "x", "tpserve_continuation": null})").params.continuation);
  EXPECT_TRUE(parse_completion_body(R"({"prompt": "x"})").params.ignored_fields.empty());
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "tpserve_continuation": 5})", "tpserve_continuation"},
      {R"({"prompt": "x", "tpserve_continuation": [[5]]})", "tpserve_continuation[0]"},
      {R"({"prompt": "x", "tpserve_continuation": [1, -2]})", "tpserve_continuation[1]"},
      {R"({"prompt": "x", "tpserve_continuation": [1, "2"]})", "tpserve_continuation[1]"},
      {R"({"prompt": "x", "tpserve_continuation": [1], "resumed_output_tokens": 1})", "tpserve_continuation"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(completion_error(c.body).param, c.param) << c.body;
    json chat = json::parse(c.body);
    chat.erase("prompt");
    chat["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    EXPECT_EQ(chat_error(chat.dump()).param, c.param) << chat.dump();
  }
}

TEST(OpenAiRequest, NullMeansNotGiven) {
  auto r = parse_completion_body(R"({"prompt":"x","temperature":null,"stop":null,"max_tokens":null,"seed":null})");
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_FALSE(r.params.max_tokens.has_value());
}

TEST(OpenAiRequest, UnsupportedFeatures) {
  EXPECT_EQ(completion_error(R"({"prompt":"x","suffix":"tail"})").param, "suffix");
  EXPECT_EQ(completion_error(R"({"prompt":"x","best_of":3})").param, "best_of");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})").param,
            "tools[0].function");
  // json_object / json_schema are supported (structured_output_test.cpp); other types are not.
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})").param,
            "response_format.type");
}

TEST(OpenAiRequest, MalformedJson) {
  auto e = completion_error(R"({"prompt": "x",})");
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("invalid JSON body at byte 16"), std::string::npos) << e.message;
  EXPECT_EQ(completion_error("").code, "invalid_json");
  auto arr = completion_error("[1,2]");
  EXPECT_EQ(arr.message, "request body must be a JSON object, got array");
  // Found by tests/fuzz/openai_request_fuzz: a number beyond a double was a 500 (json::out_of_range).
  auto big = completion_error(R"({"prompt":"x","temperature":1e999})");
  EXPECT_EQ(big.code, "invalid_json") << big.message;
  // Deep nesting is refused while parsing (a 100k-deep array used to overflow the stack in an error message).
  const std::string deep = R"({"messages":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto d = chat_error(deep);
  EXPECT_EQ(d.code, "invalid_json");
  EXPECT_NE(d.message.find("nested deeper than 64 levels"), std::string::npos) << d.message;
  const std::string ok_depth = R"({"prompt":"x","user_data":)" + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_NO_THROW(parse_completion_body(ok_depth));
  // A wrong type shows a summary of an array or object, not its dump.
  auto t = chat_error(R"({"messages":[[[1,2,3]]]})");
  EXPECT_NE(t.message.find("an array of 1"), std::string::npos) << t.message;
}

TEST(OpenAiRequest, RangesAreCheckedAsStoredFloats) {
  // 1e-50 > 0 as a double but 0 as a float: refused by the parser, naming the field.
  EXPECT_EQ(completion_error(R"({"prompt":"x","top_p":1e-50})").param, "top_p");
  EXPECT_EQ(completion_error(R"({"prompt":"x","repetition_penalty":1e-46})").param, "repetition_penalty");
  EXPECT_EQ(completion_error(R"({"prompt":"x","temperature":1e300})").param, "temperature");
  EXPECT_FLOAT_EQ(parse_completion_body(R"({"prompt":"x","top_p":1e-30})").params.sampling.top_p, 1e-30f);
}

TEST(OpenAiRequest, ChatMessages) {
  auto r = parse_chat_completion_body(R"({"model":"smol","messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"part one"},{"type":"text","text":"part two"}],"name":"bob"},
      {"role":"assistant","content":null},
      {"role":"developer","content":"dev"}],
    "max_tokens":10,"max_completion_tokens":20,"logprobs":true,"top_logprobs":3,"stream":true})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0], (ChatMessage{"system", "Be brief."}));
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "part one\npart two");
  EXPECT_EQ(r.messages[1].name, "bob");  // kept for the template (HF passes a message's name through)
  EXPECT_EQ(r.messages[2], (ChatMessage{"assistant", ""}));
  EXPECT_EQ(r.messages[3], (ChatMessage{"system", "dev"}));
  EXPECT_EQ(r.params.max_tokens, 20);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.params.sampling.logprobs, 3);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_TRUE(r.params.stream);
  EXPECT_FALSE(r.params.include_usage);
}

TEST(OpenAiRequest, ChatErrors) {
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"({})", "messages", "missing_required_parameter"},
      {R"({"messages":[]})", "messages", "invalid_value"},
      {R"({"messages":"hi"})", "messages", "invalid_type"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role", "missing_required_parameter"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role", "unsupported_value"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content", "missing_required_parameter"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content", "invalid_type"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "messages[0].content[0].type", "unsupported_value"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text",
       "missing_required_parameter"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs", "invalid_value"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30})", "top_logprobs",
       "invalid_value"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":3})", "logprobs", "invalid_type"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1})", "max_completion_tokens",
       "invalid_value"},
      {R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"1"}]}]})",
       "messages[0].tool_calls[0].function", "missing_required_parameter"},
  };
  for (const auto& c : cases) {
    auto e = chat_error(c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body << " -> " << e.message;
  }
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"robot","content":"x"}]})").message,
            "messages[0].role must be one of system, user, assistant, tool, got \"robot\"");
}

TEST(OpenAiRequest, Limits) {
  ApiLimits limits;
  limits.max_n = 2;
  limits.max_stop = 1;
  EXPECT_EQ(expect_400([&] { parse_completion_body(R"({"prompt":"x","n":3})", limits); }).param, "n");
  EXPECT_EQ(expect_400([&] { parse_completion_body(R"({"prompt":"x","stop":["a","b"]})", limits); }).param, "stop");
}

TEST(OpenAiRequest, Tokenize) {
  auto p = parse_tokenize_body(R"({"model":"smol","prompt":"Hello"})");
  EXPECT_FALSE(p.is_chat);
  EXPECT_EQ(p.prompt, "Hello");
  EXPECT_TRUE(p.add_special_tokens);
  auto c = parse_tokenize_body(R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
  EXPECT_TRUE(c.is_chat);
  EXPECT_FALSE(c.add_special_tokens);
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_EQ(c.messages, (std::vector<ChatMessage>{{"user", "hi"}}));
  EXPECT_EQ(expect_400([] { parse_tokenize_body("{}"); }).code, "missing_required_parameter");
  EXPECT_EQ(expect_400([] { parse_tokenize_body(R"({"prompt":"a","messages":[]})"); }).param, "prompt");
  EXPECT_EQ(expect_400([] { parse_tokenize_body(R"({"prompt":"a","add_special_tokens":"no"})"); }).code,
            "invalid_type");

  auto d = parse_detokenize_body(R"({"tokens":[1,2,3]})");
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(parse_detokenize_body(R"({"tokens":[]})").tokens.empty());
  EXPECT_EQ(expect_400([] { parse_detokenize_body(R"({"tokens":[1,-1]})"); }).param, "tokens[1]");
  EXPECT_EQ(expect_400([] { parse_detokenize_body(R"({"tokens":"1 2"})"); }).code, "invalid_type");
  EXPECT_EQ(expect_400([] { parse_detokenize_body(R"({"tokens":[4294967296]})"); }).param, "tokens[0]");
}

}  // namespace
}  // namespace tp
