// The parts of a generation request between the parser and the engine, each on its own, with SmolLM2's real
// tokenizer: GenerationJob (validation against the vocabulary and the context, batched prompts, echo),
// ChoiceStream (incremental text, stop strings across tokens, eog, echo, echo + prompt logprobs in OpenAI's
// legacy shape, vLLM's prompt_logprobs) and the response shapes (SseWriter chunks, final_response).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "coordinator/choice_stream.h"
#include "coordinator/generation_job.h"
#include "coordinator/openai_response.h"
#include "coordinator/structured_output.h"
#include "rank/model_file.h"

namespace tp {
namespace {

using json = nlohmann::json;

std::string source_dir() {
  const char* env = std::getenv("TPSERVE_SOURCE_DIR");
  return env && *env ? env : TPSERVE_SOURCE_DIR;
}

const Tokenizer& tok() {
  static const Tokenizer t(open_model(source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf")->tokenizer());
  return t;
}

FieldError job_error(const std::string& body, int64_t max_context = 64) {
  try {
    completion_job(parse_completion_body(body), tok(), max_context);
  } catch (const FieldError& e) {
    return e;
  }
  ADD_FAILURE() << "no FieldError for " << body;
  return FieldError("", "");
}

TEST(GenerationJob, BatchedPromptsBecomeTokenPromptsWithEcho) {
  const GenerationJob job = completion_job(
      parse_completion_body(R"({"prompt": ["Hello", "The capital of France is"], "n": 2, "echo": true,
                                "logprobs": 2, "max_tokens": 3, "logit_bias": {"28": 5}})"),
      tok(), 2048);
  ASSERT_EQ(job.prompts.size(), 2u);
  EXPECT_EQ(job.n_choices(), 4);
  EXPECT_EQ(job.prompts[1].tokens, tok().encode("The capital of France is", tok().add_bos(), true));
  EXPECT_EQ(job.prompts[0].echo, "Hello");
  EXPECT_EQ(job.echo_logprobs, 2);
  EXPECT_EQ(job.engine_prompt_logprobs(), 2);
  const Request r = job.engine_request(1, 99, 2048);
  EXPECT_EQ(r.prompt, job.prompts[1].tokens);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_EQ(r.sampling.seed, 99u);
  EXPECT_EQ(r.prompt_logprobs, 2);
  EXPECT_EQ(r.logit_bias, (std::vector<LogitBias>{{28, 5.0f}}));
  // Token prompts echo their decoded text; without echo nothing is echoed and no prompt logprobs are computed.
  const GenerationJob ids = completion_job(parse_completion_body(R"({"prompt": [[504, 3575]], "echo": true})"), tok(), 2048);
  EXPECT_EQ(ids.prompts[0].echo, "The capital");
  EXPECT_EQ(ids.engine_prompt_logprobs(), -1);  // echo alone: the text, no logprobs
  const GenerationJob plain = completion_job(parse_completion_body(R"({"prompt": "x", "prompt_logprobs": 3})"), tok(), 2048);
  EXPECT_TRUE(plain.prompts[0].echo.empty());
  EXPECT_EQ(plain.engine_prompt_logprobs(), 3);
  EXPECT_EQ(plain.engine_request(0, 1, 2048).max_tokens, 2048 - 1);  // default: the rest of the context
}

TEST(GenerationJob, RefusesWhatTheModelCannotTakeNamingTheField) {
  const FieldError vocab = job_error(R"({"prompt": [[1, 2], [3, 49152]]})");
  EXPECT_EQ(vocab.field, "prompt[1][1]");
  EXPECT_EQ(std::string(vocab.what()), "prompt[1][1] is token id 49152, outside the vocabulary [0, 49152)");
  EXPECT_EQ(job_error(R"({"prompt": [5, 49999]})").field, "prompt[1]");
  const FieldError bias = job_error(R"({"prompt": "x", "logit_bias": {"3": 1, "50000": 2}})");
  EXPECT_EQ(bias.field, "logit_bias[1]");
  const FieldError ctx = job_error(R"({"prompt": ["short", ")" + std::string(300, 'a') + R"("]})");
  EXPECT_EQ(ctx.field, "prompt[1]");
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  try {
    chat_job(parse_chat_completion_body(R"({"messages": [{"role": "user", "content": ")" + std::string(300, 'b') + R"("}]})"),
             tok(), ChatTemplate::resolve("chatml", "", "", ""), 64);
    ADD_FAILURE() << "no error";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field, "messages");
    EXPECT_EQ(e.code, "context_length_exceeded");
  }
}

// tpserve_continuation: the ids are output already sent — appended to the prompt as resumed output, counted by
// max_tokens, the echo and prompt logprobs dropped, their text counted in the text offsets.
TEST(GenerationJob, AContinuationIsOutputAlreadySent) {
  const std::vector<int32_t> said = tok().encode(" Paris, and", false, false);
  const json body = {{"prompt", "The capital of France is"}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 10},
                     {"tpserve_continuation", said}};
  const GenerationJob job = completion_job(parse_completion_request(body), tok(), 2048);
  std::vector<int32_t> all = tok().encode("The capital of France is", tok().add_bos(), true);
  const size_t n_prompt = all.size();
  all.insert(all.end(), said.begin(), said.end());
  EXPECT_EQ(job.prompts[0].tokens, all);
  EXPECT_TRUE(job.prompts[0].echo.empty()) << "the client has the echo";
  EXPECT_EQ(job.prompts[0].continued_chars, 35) << "\"The capital of France is Paris, and\"";
  EXPECT_EQ(job.n_continued, int64_t(said.size()));
  EXPECT_EQ(job.engine_prompt_logprobs(), -1) << "the client has the echo's logprobs";
  EXPECT_EQ(job.params.sampling.logprobs, 2);
  const Request r = job.engine_request(0, 7, 2048);
  EXPECT_EQ(r.max_tokens, 10 - int64_t(said.size()));
  EXPECT_EQ(r.n_resumed_output, int64_t(said.size())) << "the penalties count them as output";
  EXPECT_EQ(r.prompt.size(), n_prompt + said.size());
  // Chat: after the rendered messages; without max_tokens the rest of the context.
  const ChatTemplate chatml = ChatTemplate::resolve("chatml", "", "", "");
  const GenerationJob chat = chat_job(
      parse_chat_completion_request({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"tpserve_continuation", said}}),
      tok(), chatml, 2048);
  EXPECT_EQ(std::vector<int32_t>(chat.prompts[0].tokens.end() - int64_t(said.size()), chat.prompts[0].tokens.end()), said);
  EXPECT_EQ(chat.prompts[0].continued_chars, 11);
  EXPECT_EQ(chat.engine_request(0, 7, 2048).max_tokens, 2048 - int64_t(chat.prompts[0].tokens.size()));
  // An empty continuation: the client has the echo only.
  const GenerationJob none = completion_job(
      parse_completion_request({{"prompt", "ab"}, {"echo", true}, {"tpserve_continuation", json::array()}}), tok(), 2048);
  EXPECT_TRUE(none.prompts[0].echo.empty());
  EXPECT_EQ(none.prompts[0].continued_chars, 2);
  // The end-of-generation token is output with ignore_eos.
  EXPECT_NO_THROW(completion_job(parse_completion_request({{"prompt", "ab"}, {"ignore_eos", true},
                                                           {"tpserve_continuation", {tok().eos_id()}}}),
                                 tok(), 2048));
}

// A chat stream with tools continues too: the job keeps the continued text (the stream's call parser is primed
// with it, tool_call_response.h); not streamed, its calls would be parsed from the new text alone: refused.
TEST(GenerationJob, AToolStreamContinuationKeepsItsText) {
  const std::vector<int32_t> said = tok().encode("Let me check.", false, false);
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_time", "parameters": {}}}])");
  const json body = {{"messages", {{{"role", "user"}, {"content", "Time?"}}}}, {"tools", tools},
                     {"tpserve_continuation", said}, {"stream", true}};
  const ChatTemplate chatml = ChatTemplate::resolve(  // a Jinja template: the fall-back renders no tools
      "", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "<|im_start|>assistant\n", "", "");
  const GenerationJob job = chat_job(parse_chat_completion_request(body), tok(), chatml, 2048);
  ASSERT_EQ(job.tool_syntax, ToolCallSyntax::Hermes);
  EXPECT_EQ(job.continued_text, "Let me check.");
  EXPECT_EQ(job.n_continued, int64_t(said.size()));
  json plain = body;
  plain.erase("stream");
  try {
    chat_job(parse_chat_completion_request(plain), tok(), chatml, 2048);
    ADD_FAILURE() << "no error";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field, "tpserve_continuation");
    EXPECT_NE(std::string(e.what()).find("tools unless streamed"), std::string::npos) << e.what();
  }
}

TEST(GenerationJob, RefusesAContinuationThatIsNotConsistent) {
  // A character whose UTF-8 bytes span several tokens: its first token alone leaves bytes pending.
  const std::vector<int32_t> emoji = tok().encode("\xF0\x9F\x8C\x8A", false, false);  // U+1F30A
  ASSERT_GT(emoji.size(), 1u);
  const int32_t w = tok().encode(" x", false, false).at(0);  // an ordinary word
  struct Case {
    json extra;
    std::string field, message_part;
  };
  const std::vector<Case> cases = {
      {{{"n", 2}}, "tpserve_continuation", "n > 1"},
      {{{"prompt", {"a", "b"}}}, "tpserve_continuation", "several prompts"},
      {{{"prompt_logprobs", 1}}, "tpserve_continuation", "prompt_logprobs"},
      {{{"tpserve_continuation", {w, 49152}}}, "tpserve_continuation[1]", "outside the vocabulary"},
      {{{"tpserve_continuation", {w, tok().eos_id()}}}, "tpserve_continuation", "end-of-generation"},
      {{{"tpserve_continuation", {w, emoji[0]}}}, "tpserve_continuation", "inside a UTF-8 character"},
      {{{"max_tokens", 1}}, "tpserve_continuation", "more than max_tokens (1)"},
      {{{"prompt", std::vector<int32_t>(40, w)}, {"tpserve_continuation", std::vector<int32_t>(40, w)}}, "tpserve_continuation",
       "maximum context length is 64"},
  };
  for (const Case& c : cases) {
    json body = {{"prompt", "ab"}, {"tpserve_continuation", {w, w}}};
    body.update(c.extra);
    const FieldError e = job_error(body.dump());
    EXPECT_EQ(e.field, c.field) << body.dump();
    EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
  }
}

// A continuation under an output constraint: the engine request's grammar goes on from after the continued
// output; a continuation the grammar does not allow is refused naming its first such token.
TEST(GenerationJob, AConstrainedContinuationResumesItsGrammar) {
  StructuredOutputCompiler compiler(tok(), tok().vocab_size());
  const std::vector<int32_t> yes = tok().encode("yes", false, false);
  const json choice = {"yes please", "no thanks"};
  const std::vector<int32_t> please = tok().encode(" please", false, false);
  GenerationJob job = completion_job(
      parse_completion_request({{"prompt", "ab"}, {"guided_choice", choice}, {"tpserve_continuation", yes}}), tok(), 2048);
  job.grammar = compiler.compile(job.params.constraint);
  const Request r = job.engine_request(0, 7, 2048);
  ASSERT_TRUE(r.grammar);
  EXPECT_NE(r.grammar, job.grammar);
  ConstraintMatcher m(r.grammar);
  for (const int32_t t : please) EXPECT_TRUE(m.accept(t)) << "\" please\" follows \"yes\"";
  GenerationJob wrong = completion_job(
      parse_completion_request({{"prompt", "ab"}, {"guided_choice", choice}, {"tpserve_continuation", please}}), tok(),
      2048);
  wrong.grammar = job.grammar;
  try {
    wrong.engine_request(0, 7, 2048);
    ADD_FAILURE() << "accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field, "tpserve_continuation[0]");
    EXPECT_NE(std::string(e.what()).find("guided_choice"), std::string::npos) << e.what();
  }
  GenerationJob plain = job;  // no continuation: the compiled grammar as it is
  plain.n_continued = 0;
  EXPECT_EQ(plain.engine_request(0, 7, 2048).grammar, job.grammar);
}

RequestOutput output(int32_t index, std::vector<int32_t> tokens, int64_t n_generated, FinishReason finish = FinishReason::None) {
  RequestOutput o;
  o.index = index;
  o.new_tokens = std::move(tokens);
  o.n_generated = n_generated;
  o.finished = finish != FinishReason::None;
  o.finish_reason = finish;
  return o;
}

TEST(ChoiceStream, TextStopStringsAcrossTokensAndEog) {
  const std::vector<int32_t> ids = tok().encode(" Paris is the capital. END of story", false, false);
  ChoiceOptions opt;
  opt.stop = {"END"};
  ChoiceStream c(tok(), opt);
  std::string streamed;
  bool stopped = false;
  for (size_t i = 0; i < ids.size() && !c.finished(); ++i) {
    const ChoiceDelta d = c.push(output(0, {ids[i]}, int64_t(i) + 1));
    streamed += d.text;
    stopped = stopped || d.stopped_by_string;
  }
  EXPECT_EQ(streamed, " Paris is the capital. ");
  EXPECT_EQ(c.text(), streamed);
  EXPECT_EQ(c.finish_reason(), "stop");
  EXPECT_TRUE(stopped);  // the engine still runs it: the handler aborts that choice
  EXPECT_FALSE(c.engine_done());
  EXPECT_TRUE(c.push(output(0, {}, 9, FinishReason::Abort)).empty());  // the abort's output adds nothing
  EXPECT_TRUE(c.engine_done());

  ChoiceStream eog(tok(), ChoiceOptions{});
  const ChoiceDelta d = eog.push(output(0, {ids[0], tok().eos_id()}, 2, FinishReason::Stop));
  EXPECT_EQ(d.text, " Paris");  // the end-of-generation token is not text
  EXPECT_EQ(d.finish, "stop");
}

TEST(ChoiceStream, EchoWithPromptLogprobsInBothShapes) {
  const std::vector<int32_t> prompt = tok().encode("The capital of France", false, false);
  ASSERT_EQ(prompt.size(), 4u);
  auto lp = std::make_shared<std::vector<TokenLogprobs>>(prompt.size());
  for (size_t i = 1; i < prompt.size(); ++i) {
    (*lp)[i].logprob = -float(i);
    (*lp)[i].rank = int32_t(i) + 1;
    (*lp)[i].top_ids = {28, 29};
    (*lp)[i].top_logprobs = {-0.5f, -0.75f};
  }
  ChoiceOptions opt;
  opt.echo = "The capital of France";
  opt.echo_logprobs = 1;
  opt.prompt_logprobs = 2;
  opt.want_logprobs = true;
  opt.prompt = prompt;
  ChoiceStream c(tok(), opt);
  RequestOutput first = output(0, {tok().encode(" is", false, false)[0]}, 1);
  first.prompt_logprobs = lp;
  first.logprobs = {TokenLogprobs{-0.25f, {}, {}, 1}};
  const ChoiceDelta d = c.push(first);
  EXPECT_EQ(d.text, "The capital of France is");
  // Legacy completions logprobs: the 4 prompt tokens (first null) then the generated one; top 1 + the token.
  const json& l = d.logprobs;
  ASSERT_EQ(l["tokens"].size(), 5u);
  EXPECT_EQ(l["tokens"][0], "The");
  EXPECT_TRUE(l["token_logprobs"][0].is_null());
  EXPECT_TRUE(l["top_logprobs"][0].is_null());
  EXPECT_EQ(l["token_logprobs"][2], -2.0);
  EXPECT_EQ(l["top_logprobs"][1].size(), 2u);  // top 1 ("-") + the prompt token itself
  EXPECT_EQ(l["text_offset"], json::array({0, 3, 11, 14, 21}));
  EXPECT_EQ(l["token_logprobs"][4], -0.25);
  // vLLM's prompt_logprobs: null, then {id: {logprob, rank, decoded_token}} with the token and the top 2.
  const json& p = d.prompt_logprobs;
  ASSERT_EQ(p.size(), 4u);
  EXPECT_TRUE(p[0].is_null());
  EXPECT_EQ(p[3].size(), 3u);
  EXPECT_EQ(p[3][std::to_string(prompt[3])]["rank"], 4);
  EXPECT_EQ(p[3][std::to_string(prompt[3])]["logprob"], -3.0);
  EXPECT_EQ(p[3]["28"]["rank"], 1);
  EXPECT_EQ(p[3]["29"]["decoded_token"], tok().token_to_piece(29));
  EXPECT_EQ(c.prompt_logprobs(), p);
  EXPECT_EQ(c.logprobs(), l);
  // Later deliveries carry neither the echo nor the prompt logprobs again.
  const ChoiceDelta d2 = c.push(output(0, {28}, 2, FinishReason::Length));
  EXPECT_TRUE(d2.prompt_logprobs.is_null());
  EXPECT_EQ(d2.finish, "length");
  EXPECT_EQ(c.text(), "The capital of France is" + tok().token_to_piece(28));
}

// A continuation's text offsets count the text the client already has (the echo and the continued output).
TEST(ChoiceStream, AContinuationsTextOffsetsStartAfterTheContinuedText) {
  ChoiceOptions opt;
  opt.want_logprobs = true;
  opt.continued_chars = 35;
  ChoiceStream c(tok(), opt);
  const std::vector<int32_t> ids = tok().encode(" then Lyon", false, false);
  RequestOutput o = output(0, ids, int64_t(ids.size()));
  o.logprobs.assign(ids.size(), TokenLogprobs{-0.5f, {}, {}, 1});
  const ChoiceDelta d = c.push(o);
  EXPECT_EQ(d.text, " then Lyon");
  ASSERT_EQ(d.logprobs["text_offset"].size(), ids.size());
  EXPECT_EQ(d.logprobs["text_offset"][0], 35);
  EXPECT_EQ(d.logprobs["text_offset"][1], 35 + int64_t(tok().token_to_piece(ids[0]).size()));
}

TEST(ChoiceStream, MaxTokensZeroStillEchoes) {
  ChoiceOptions opt;
  opt.echo = "Hi there";
  ChoiceStream c(tok(), opt);
  const ChoiceDelta d = c.push(output(0, {}, 0, FinishReason::Length));
  EXPECT_EQ(d.text, "Hi there");
  EXPECT_EQ(d.finish, "length");
  EXPECT_TRUE(c.logprobs().is_null());  // not asked for
}

// A ResponseStream that records what was written.
class Recorder final : public ResponseStream {
 public:
  bool start(int status, const std::string& content_type) override {
    started_ = true;
    head = std::to_string(status) + " " + content_type;
    return true;
  }
  bool write(std::string_view data) override {
    events.emplace_back(data);
    return true;
  }
  bool started() const override { return started_; }
  bool peer_closed() override { return false; }
  std::string head;
  std::vector<std::string> events;
  json event(size_t i) const { return json::parse(events.at(i).substr(6)); }  // "data: {...}\n\n"

 private:
  bool started_ = false;
};

TEST(OpenAiResponse, ChunksAndFinalBodies) {
  Recorder rec;
  SseWriter sse(rec, ResponseHeader{"cmpl-1", 7, "smol", false});
  ASSERT_TRUE(sse.start());
  ChoiceDelta d;
  d.text = "Hi";
  d.prompt_logprobs = json::array({nullptr});
  d.finish = "length";
  ASSERT_TRUE(sse.delta(3, d));
  ASSERT_TRUE(sse.usage(5, 1));
  ASSERT_TRUE(sse.done());
  EXPECT_EQ(rec.head, "200 text/event-stream");
  ASSERT_EQ(rec.events.size(), 4u);
  EXPECT_EQ(rec.event(0)["choices"][0]["text"], "Hi");
  EXPECT_EQ(rec.event(0)["choices"][0]["index"], 3);
  EXPECT_EQ(rec.event(0)["choices"][0]["prompt_logprobs"], json::array({nullptr}));
  EXPECT_EQ(rec.event(1)["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(rec.event(2)["usage"]["total_tokens"], 6);
  EXPECT_EQ(rec.events[3], "data: [DONE]\n\n");

  Recorder chat;
  SseWriter csse(chat, ResponseHeader{"chatcmpl-1", 7, "smol", true});
  csse.role(0);
  d.finish.clear();
  csse.delta(0, d);
  EXPECT_EQ(chat.event(0)["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chat.event(1)["choices"][0]["delta"]["content"], "Hi");
  EXPECT_EQ(chat.event(1)["prompt_logprobs"], json::array({nullptr}));  // chat: at the top level
  EXPECT_EQ(chat.event(1)["object"], "chat.completion.chunk");

  std::vector<std::unique_ptr<ChoiceStream>> choices;
  ChoiceOptions opt;
  opt.chat = true;
  choices.push_back(std::make_unique<ChoiceStream>(tok(), opt));
  choices[0]->push(output(0, {tok().encode(" ok", false, false)[0]}, 1, FinishReason::Stop));
  const json body = final_response(ResponseHeader{"chatcmpl-2", 9, "smol", true}, choices, 12);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], " ok");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 12}, {"completion_tokens", 1}, {"total_tokens", 13}}));
  EXPECT_FALSE(body.contains("prompt_logprobs"));
}

}  // namespace
}  // namespace tp
