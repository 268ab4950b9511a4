// A generation request as the engine will run it: the parsed OpenAI body (openai_request.h) checked against
// the model (vocabulary, context length) and turned into token prompts. One job holds one or more prompts
// (a batched completions request); prompt j's choice i has the OpenAI index j * n + i.
// Every failure throws FieldError (HTTP 400 naming the parameter) before anything reaches the engine.
#pragma once
#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat_template.h"
#include "coordinator/openai_request.h"
#include "coordinator/request.h"
#include "coordinator/tokenizer.h"
#include "coordinator/tool_call_parser.h"

namespace tp {

struct JobPrompt {
  std::vector<int32_t> tokens;  // non-empty, ids in the vocabulary, fewer than max_context
  std::string echo;             // completions with echo: the prompt text to put before the completion
  // With a continuation: the characters (code points) of the choice's text the client already has — the echo
  // and the continued output (completions' text_offset counts from the choice's start); 0 otherwise.
  int64_t continued_chars = 0;
};

struct GenerationJob {
  bool chat = false;
  GenerationParams params;
  std::vector<JobPrompt> prompts;  // >= 1
  bool echo = false;
  // Completions echo + logprobs: the top-k of the prompt tokens lead each choice's logprobs; -1: no.
  int32_t echo_logprobs = -1;
  // Chat with tools and tool_choice auto: the output is parsed for calls in this syntax (tool_call_parser.h),
  // naming one of `tools`; nullopt: no parsing.
  std::optional<ToolCallSyntax> tool_syntax;
  nlohmann::ordered_json tools;
  // params.constraint compiled (ApiHandlers::compile_constraint); null: unconstrained.
  std::shared_ptr<const CompiledConstraint> grammar;
  // [prompts] or empty: blocks another replica offers for prompt j (kv_import.h), put on its engine Request.
  std::vector<std::shared_ptr<const KvImport>> kv_imports;

  // Output tokens continued from an earlier run (params.continuation, already appended to prompt 0 and counted
  // in params.resumed_output_tokens and max_tokens): usage counts them as completion tokens, not prompt.
  int64_t n_continued = 0;
  // Their text (the choice's output the client already has; a stream with tools primes its call parser with it,
  // tool_call_response.h).
  std::string continued_text;

  int32_t n_choices() const { return int32_t(prompts.size()) * params.n; }
  // The k the engine computes prompt logprobs with: the larger of echo_logprobs and prompt_logprobs.
  int32_t engine_prompt_logprobs() const;
  // The engine request for prompt j (its sampling seed given); max_tokens defaults to the rest of the context.
  // With a continuation and a grammar: the grammar resumed after the continued output (resume_constraint;
  // FieldError "tpserve_continuation[i]" naming the first token it does not allow).
  Request engine_request(size_t j, uint64_t seed, int64_t max_context) const;
};

// Throws FieldError: a token id outside the vocabulary ("prompt[3]", "prompt[1][3]", "logit_bias[0]"), a
// prompt that encodes to nothing or leaves no room in max_context ("context_length_exceeded").
// With params.continuation (both kinds of job; FieldError "tpserve_continuation" when it is not consistent: with
// several prompts, n > 1, prompt_logprobs, or tools on a response that is not streamed (its calls would be
// parsed from the continuation's text alone); an id outside the vocabulary; an
// end-of-generation token (without ignore_eos); text ending inside a UTF-8 character; more tokens than
// max_tokens; no room left in the context): its ids are appended to the prompt as resumed output
// (resumed_output_tokens), max_tokens is reduced by their number, echo and the prompt's logprobs are dropped
// (the client has them), and the prompt's continued_chars counts the echo and the continued text.
GenerationJob completion_job(CompletionRequest r, const Tokenizer& tok, int64_t max_context);
// A chat job renders the messages, tools, documents and chat_template_kwargs through the chat template; tool_choice
// required / named goes through apply_forced_tool_call (chat_tools.h).
GenerationJob chat_job(ChatCompletionRequest r, const Tokenizer& tok, const ChatTemplate& chat, int64_t max_context);

}  // namespace tp
