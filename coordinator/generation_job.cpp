#include "coordinator/generation_job.h"

#include <algorithm>

#include "common/error.h"
#include "common/token_ids.h"

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
  return job;
}

}  // namespace tp
