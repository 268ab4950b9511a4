// Logprobs in OpenAI's response shapes, built up token by token as a generation streams:
//   chat         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}]}
//   completions  {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{piece: logprob, ...}],
//                 "text_offset": [...]}   (the dicts hold the top k plus the sampled token, as OpenAI's legacy API)
// A token's text is its piece (the bytes it stands for; invalid UTF-8 is replaced when the JSON is dumped, the
// exact bytes are in chat's "bytes"). -inf (probability 0) is reported as -9999.0, as vLLM does: JSON has no
// infinities. text_offset counts characters (code points), as Python's len() does for vLLM.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/token_logprobs.h"

namespace tp {

inline constexpr double kMinReportedLogprob = -9999.0;

// token id -> its text (Tokenizer::token_to_piece).
using TokenPiece = std::function<std::string(int32_t)>;

// The empty logprobs object of a choice (what a choice that produced no token reports).
nlohmann::json empty_logprobs(bool chat);
// Appends sampled token `id` with its logprobs `l` to `lp` (null: starts an empty object first), with at most
// k of its top alternatives (-1: all it has). text_offset: where the token's text starts in the choice's
// text, in characters (completions only).
void append_logprobs(nlohmann::json& lp, bool chat, const TokenPiece& piece, int32_t id, const TokenLogprobs& l,
                     int64_t text_offset, int32_t k = -1);
// Completions echo + logprobs: appends the prompt's tokens to `lp` (null: starts an empty object), the first
// with a null logprob and null top_logprobs, the others with prompt_lp[i] (k alternatives each); text
// offsets start at 0 and advance by each token's characters.
void append_prompt_logprobs(nlohmann::json& lp, const TokenPiece& piece, const std::vector<int32_t>& prompt,
                            const std::vector<TokenLogprobs>& prompt_lp, int32_t k);
// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], one entry per
// prompt token, each dict holding the prompt token and its k most likely alternatives (rank 1..k).
nlohmann::json vllm_prompt_logprobs(const TokenPiece& piece, const std::vector<int32_t>& prompt,
                                    const std::vector<TokenLogprobs>& prompt_lp, int32_t k);
// Appends the arrays of logprobs object `from` (a delta, same shape) to `into` (null: becomes a copy).
void extend_logprobs(nlohmann::json& into, const nlohmann::json& from);
// Code points in UTF-8 text (continuation bytes not counted).
int64_t utf8_chars(std::string_view s);

}  // namespace tp
