#include "coordinator/generation_job.h"

#include <algorithm>

#include "common/error.h"
#include "common/token_ids.h"
#include "coordinator/openai_logprobs.h"
#include "coordinator/structured_output.h"

namespace tp {
namespace {

// Checks one prompt against the vocabulary and the context; `param` names it ("prompt", "prompt[2]", "messages").
void check_prompt(const std::vector<int32_t>& tokens, const Tokenizer& tok, int64_t max_context, const std::string& param) {
  if (tokens.empty()) throw FieldError(param, "the prompt encodes to no tokens");
  check_token_ids(tokens, tok.vocab_size(), param);
  const int64_t n = int64_t(tokens.size());
  if (n >= max_context)
    throw FieldError(param,
                     "This model's maximum context length is " + std::to_string(max_context) + " tokens; the prompt has " +
                         std::to_string(n) + " tokens, leaving no room for a completion",
                     "context_length_exceeded");
}

void check_common(const GenerationParams& p, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const LogitBias& b : p.logit_bias) ids.push_back(b.token);
  check_token_ids(ids, tok.vocab_size(), "logit_bias");
}

// Applies params.continuation to a job whose prompts are built (see the header).
void apply_continuation(GenerationJob& job, const Tokenizer& tok, int64_t max_context) {
  if (!job.params.continuation) return;
  const std::vector<int32_t>& cont = *job.params.continuation;
  const auto refuse = [](const std::string& why) { throw FieldError("tpserve_continuation", "tpserve_continuation " + why); };
  const std::pair<bool, const char*> conflicts[] = {
      {job.prompts.size() != 1, "several prompts"},
      {job.params.n != 1, "n > 1"},
      {job.params.prompt_logprobs.has_value(), "prompt_logprobs"},
      {job.tool_syntax.has_value() && !job.params.stream, "tools unless streamed"},
  };
  for (const auto& [conflict, what] : conflicts)
    if (conflict) refuse(std::string("cannot be combined with ") + what);
  check_token_ids(cont, tok.vocab_size(), "tpserve_continuation");
  const int64_t k = int64_t(cont.size());
  if (job.params.max_tokens && k > *job.params.max_tokens)
    refuse("has " + std::to_string(k) + " tokens, more than max_tokens (" + std::to_string(*job.params.max_tokens) + ")");
  JobPrompt& jp = job.prompts[0];
  IncrementalDecoder dec(tok, false);
  std::string text;
  for (int32_t t : cont) {
    if (!job.params.ignore_eos && tok.is_eog(t)) refuse("holds an end-of-generation token (" + std::to_string(t) + ")");
    text += dec.push(t);
  }
  if (dec.n_pending() != 0) refuse("ends inside a UTF-8 character");
  if (int64_t(jp.tokens.size()) + k >= max_context)
    throw FieldError("tpserve_continuation",
                     "This model's maximum context length is " + std::to_string(max_context) + " tokens; the prompt (" +
                         std::to_string(jp.tokens.size()) + ") and tpserve_continuation (" + std::to_string(k) +
                         ") leave no room for a completion",
                     "context_length_exceeded");
  jp.tokens.insert(jp.tokens.end(), cont.begin(), cont.end());
  jp.continued_chars = utf8_chars(jp.echo) + utf8_chars(text);
  jp.echo.clear();
  job.echo = false;
  job.echo_logprobs = -1;
  job.params.resumed_output_tokens = k;
  if (job.params.max_tokens) *job.params.max_tokens -= k;
  job.n_continued = k;
  job.continued_text = std::move(text);
}

}  // namespace

int32_t GenerationJob::engine_prompt_logprobs() const {
  return std::max(echo_logprobs, params.prompt_logprobs.value_or(-1));
}

Request GenerationJob::engine_request(size_t j, uint64_t seed, int64_t max_context) const {
  Request r;
  r.prompt = prompts.at(j).tokens;
  r.sampling = params.sampling;
  r.sampling.seed = seed;
  r.n = params.n;
  r.max_tokens = params.max_tokens.value_or(max_context - int64_t(r.prompt.size()));
  r.ignore_eos = params.ignore_eos;
  r.n_resumed_output = params.resumed_output_tokens;
  r.prompt_logprobs = engine_prompt_logprobs();
  r.logit_bias = params.logit_bias;
  r.grammar = grammar;
  if (grammar && n_continued > 0 && j == 0)  // the matcher goes on from after the continued output
    r.grammar = resume_constraint(grammar, std::vector<int32_t>(r.prompt.end() - n_continued, r.prompt.end()),
                                  "tpserve_continuation", params.constraint.param);
  return r;
}

GenerationJob completion_job(CompletionRequest r, const Tokenizer& tok, int64_t max_context) {
  GenerationJob job;
  job.params = std::move(r.params);
  job.echo = r.echo;
  if (r.echo && r.logprobs) job.echo_logprobs = *r.logprobs;
  check_common(job.params, tok);
  const bool batch = r.prompts.size() > 1;
  for (size_t j = 0; j < r.prompts.size(); ++j) {
    const Prompt& p = r.prompts[j];
    const std::string param = batch ? "prompt[" + std::to_string(j) + "]" : "prompt";
    JobPrompt jp;
    jp.tokens = p.is_tokens ? p.tokens : tok.encode(p.text, tok.add_bos(), true);
    check_prompt(jp.tokens, tok, max_context, param);
    if (job.params.resumed_output_tokens > int64_t(jp.tokens.size()))
      throw FieldError("resumed_output_tokens", "resumed_output_tokens (" +
                                                    std::to_string(job.params.resumed_output_tokens) + ") exceeds " +
                                                    param + "'s " + std::to_string(jp.tokens.size()) + " tokens");
    if (r.echo) jp.echo = p.is_tokens ? tok.decode(p.tokens, false) : p.text;
    job.prompts.push_back(std::move(jp));
  }
  apply_continuation(job, tok, max_context);
  return job;
}

GenerationJob chat_job(ChatCompletionRequest r, const Tokenizer& tok, const ChatTemplate& chat, int64_t max_context) {
  GenerationJob job;
  job.chat = true;
  job.params = std::move(r.params);
  check_common(job.params, tok);
  const bool forced_call = apply_forced_tool_call(r.tools, job.params);
  ChatRenderInput in;
  in.messages = template_messages(r.messages);
  in.tools = r.tools.tools;
  in.documents = r.tools.documents;
  in.kwargs = r.tools.chat_template_kwargs;
  in.add_generation_prompt = r.add_generation_prompt;
  if (r.tools.parse_calls()) {
    job.tool_syntax = chat.jinja() ? detect_tool_call_syntax(chat.jinja()->source()) : ToolCallSyntax::Hermes;
    job.tools = r.tools.tools;
  } else if (forced_call) {  // the output is exactly {"name": ..., "arguments": {...}} (the schema forces it)
    job.tool_syntax = ToolCallSyntax::Llama3Json;
    job.tools = r.tools.tools;
  }
  JobPrompt jp;
  jp.tokens = tok.encode(chat.render(in), false, true);
  check_prompt(jp.tokens, tok, max_context, "messages");
  if (job.params.resumed_output_tokens > 0)  // a resumed stream is a completions request of token ids
    throw FieldError("resumed_output_tokens", "resumed_output_tokens is for /v1/completions prompts only");
  job.prompts.push_back(std::move(jp));
  apply_continuation(job, tok, max_context);
  return job;
}

}  // namespace tp
