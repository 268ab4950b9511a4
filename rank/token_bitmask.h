// Structured output at sampling: a token bitmask (SeqPlan::token_bitmask, filled by the coordinator's grammar
// matcher) applied to rows of logits before anything else of the sampler (logit_bias, penalties, temperature,
// top-k/top-p/min-p, the draw, logprobs): a disallowed token's logit becomes -inf, so every later step keeps it
// out (-inf stays -inf under bias, penalties and temperature; its softmax weight is 0) and logprobs are those
// of the allowed tokens.
// Mask layout: [n_words] int32, token t allowed iff bit t % 32 of word t / 32 is set; t >= 32 x n_words is not
// allowed (padding rows of the logits past the tokenizer's vocabulary).
#pragma once
#include <cstdint>
#include <span>

namespace tp {

// row [vocab]; an empty mask leaves the row as it is.
void apply_token_bitmask(float* row, int64_t vocab, std::span<const int32_t> mask);

// One masked row of a step's logits.
struct MaskedRow {
  int64_t row = 0;                   // index into logits [n_rows, vocab]
  std::span<const int32_t> mask;     // [n_words]
};

// The step's masks over its logits [n_rows, vocab], in one pass over the batch.
void apply_token_bitmasks(float* logits, int64_t vocab, std::span<const MaskedRow> rows);

// Tokens the mask allows among [0, vocab).
int64_t count_allowed(std::span<const int32_t> mask, int64_t vocab);

}  // namespace tp
