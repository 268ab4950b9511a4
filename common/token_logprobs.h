// The log-probabilities reported for one sampled token (OpenAI `logprobs`): the sampled token's own and the
// k most likely alternatives, from log_softmax of the raw logits (before penalties and temperature).
#pragma once
#include <cstdint>
#include <vector>

namespace tp {

struct TokenLogprobs {
  float logprob = 0.0f;              // log p(sampled token), <= 0
  std::vector<int32_t> top_ids;      // [k] most likely token ids, by descending logprob (lowest id first on a tie)
  std::vector<float> top_logprobs;   // [k] their logprobs
  int32_t rank = 1;                  // 1 + the number of ids with a larger raw logit (vLLM's Logprob.rank), >= 1
  bool operator==(const TokenLogprobs&) const = default;
};

}  // namespace tp
