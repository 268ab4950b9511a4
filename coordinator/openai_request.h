// Parsing and validation of OpenAI-compatible request bodies into typed structs:
//   POST /v1/completions       -> CompletionRequest
//   POST /v1/chat/completions  -> ChatCompletionRequest
//   POST /tokenize, /detokenize (vLLM's extra endpoints) -> TokenizeRequest, DetokenizeRequest
// Chat messages may carry tool calls and tool results, and a chat request tools (chat_tools.h).
// Every failure throws ApiException carrying HTTP 400, type "invalid_request_error", the offending field
// as `param` ("temperature", "messages[1].content", "stream_options.include_usage") and a `code`
// ("invalid_json", "invalid_type", "invalid_value", "missing_required_parameter", "unsupported_value"),
// with a message naming the field and the value ("temperature must be between 0 and 2, got 3.5").
// Unknown fields are ignored like vLLM does and listed in `ignored_fields` so the server can log them.
// "user" is accepted and ignored. Token ids are checked >= 0 here; the server checks them against the
// vocabulary and the context length (it knows both).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/sampling_params.h"
#include "coordinator/chat_template.h"
#include "coordinator/chat_tools.h"
#include "coordinator/output_constraint.h"
#include "coordinator/openai_error.h"

namespace tp {

// Server-side bounds a request is checked against.
struct ApiLimits {
  int32_t max_n = 16;           // n (choices per request) in [1, max_n]
  int32_t max_prompts = 256;    // prompts in one batched completions request
  int32_t max_stop = 4;         // at most this many stop strings (OpenAI: 4)
  int32_t max_logprobs = 20;    // logprobs / top_logprobs in [0, max_logprobs] (OpenAI: 20)
};

// Fields shared by completions and chat completions.
struct GenerationParams {
  std::string model;                       // may be empty (the server then uses its only model)
  std::optional<int64_t> max_tokens;       // >= 0 (0: only the prompt, for its logprobs); nullopt: up to the context
  // Ranges from common/sampling_params.h (top_k -1 -> 0); logprobs from the completion/chat fields below.
  SamplingParams sampling;
  std::vector<LogitBias> logit_bias;       // {"token id": bias in [-100, 100]}; ids checked >= 0 here
  std::optional<int32_t> prompt_logprobs;  // vLLM's: [0, max_logprobs] per prompt token after the first
  std::optional<uint64_t> seed;            // given seed (also in sampling.seed); nullopt: the server picks one
  std::vector<std::string> stop;           // 0..max_stop non-empty strings
  bool ignore_eos = false;
  // vLLM's return_token_ids: each streamed choice chunk carries "token_ids", the generated token ids it covers
  // (also when they add no text yet); the router replays a broken stream from them.
  bool return_token_ids = false;
  // resumed_output_tokens (tpserve's, for the router's replay of a broken stream): the last K tokens of each
  // prompt were generated earlier by this same generation, so the penalties count them as output, not prompt
  // (with the seed and the absolute position, the continuation samples as the unbroken run). >= 0, <= each
  // prompt's length (checked when tokenized).
  int64_t resumed_output_tokens = 0;
  // tpserve_continuation (tpserve's, for the router's resumption of a broken stream; nullopt: absent): the
  // token ids this generation's choice already output on a replica that died. The replica treats them as
  // output already generated and sent — appended to the prompt, counted as output by max_tokens, the penalties
  // and usage, decoded into the text offsets, not sent again, no echo — and streams only what follows (with
  // the seed and the absolute position, the continuation samples as the unbroken run). Ids >= 0 here; one
  // prompt, n = 1, no prompt_logprobs, ids in the vocabulary and within max_tokens and the context: checked
  // when tokenized (generation_job.h).
  std::optional<std::vector<int32_t>> continuation;
  int32_t n = 1;                           // [1, max_n]
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage (only with stream)
  std::vector<std::string> ignored_fields; // unknown top-level keys, in body order
  // Structured output: at most one of response_format {type: json_object | json_schema {name, schema, strict}}
  // ("text": none), guided_json (object or JSON text) / guided_regex / guided_choice / guided_grammar, or
  // structured_outputs {json | regex | choice | grammar}. Checked for shape here (a schema must be a JSON
  // object, choices non-empty strings); compiled, and refused when invalid, by StructuredOutputCompiler.
  OutputConstraint constraint;
};

// A completion prompt: text, or token ids when is_tokens.
struct Prompt {
  bool is_tokens = false;
  std::string text;              // !is_tokens: non-empty
  std::vector<int32_t> tokens;   // is_tokens: non-empty, each >= 0
};

struct CompletionRequest {
  GenerationParams params;
  // string | [int, ...] (one prompt) | [string, ...] | [[int, ...], ...] (a batch: choice index = prompt * n + i)
  std::vector<Prompt> prompts;   // [1, max_prompts]
  std::optional<int32_t> logprobs;  // [0, max_logprobs]; nullopt: none (also in params.sampling.logprobs)
  // Prepend the prompt to each choice's text; with logprobs, the prompt tokens lead the choice's logprobs (the
  // first one null), as OpenAI's legacy API and vLLM do.
  bool echo = false;
};

struct ChatCompletionRequest {
  GenerationParams params;       // max_tokens from max_completion_tokens when both are given
  std::vector<ChatMessage> messages;  // non-empty; text parts of an array content joined with "\n"
  bool logprobs = false;                // params.sampling.logprobs = top_logprobs or 0 when true
  std::optional<int32_t> top_logprobs;  // [0, max_logprobs]; only with logprobs = true
  bool add_generation_prompt = true;    // vLLM extension
  ChatTools tools;                      // tools, tool_choice, documents, chat_template_kwargs (chat_tools.h)
};

// /tokenize: either a prompt or a message list (vLLM's TokenizeCompletionRequest / TokenizeChatRequest).
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;                   // !is_chat
  std::vector<ChatMessage> messages;    // is_chat, non-empty
  bool add_special_tokens = true;       // default true for a prompt, false for messages (as vLLM)
  bool add_generation_prompt = true;    // is_chat only
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;          // each >= 0; may be empty
};

// Deepest nesting of arrays/objects a request body may have (OpenAI bodies need 5 or so).
inline constexpr int kMaxJsonDepth = 64;

// The body as JSON; throws ApiException 400 code "invalid_json" naming the byte position (also for nesting
// past kMaxJsonDepth and numbers beyond a double), or "request body must be a JSON object" when it is valid
// JSON of another kind.
nlohmann::json parse_json_body(std::string_view body);

CompletionRequest parse_completion_request(const nlohmann::json& body, const ApiLimits& limits = {});
ChatCompletionRequest parse_chat_completion_request(const nlohmann::json& body, const ApiLimits& limits = {});
TokenizeRequest parse_tokenize_request(const nlohmann::json& body);
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body);

// Convenience: parse_json_body + the typed parser (distinct names: a string converts to both json and
// string_view).
CompletionRequest parse_completion_body(std::string_view body, const ApiLimits& limits = {});
ChatCompletionRequest parse_chat_completion_body(std::string_view body, const ApiLimits& limits = {});
TokenizeRequest parse_tokenize_body(std::string_view body);
DetokenizeRequest parse_detokenize_body(std::string_view body);

}  // namespace tp
