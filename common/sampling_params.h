// Per-request sampling parameters: what the coordinator puts into a StepPlan and the sampler obeys.
// Order of operations on one row of logits (rank/sampler.h): penalties -> temperature -> top_k -> softmax
// -> min_p -> top_p -> one seeded draw. Penalties (vLLM's definitions, applied to the raw logits):
//   repetition  every token id in prompt or output:  logit > 0 ? logit / r : logit * r
//   frequency   logit -= frequency_penalty * (times the id occurs in the output)
//   presence    logit -= presence_penalty  * (1 if the id occurs in the output)
// Logprobs are of the raw logits (log_softmax before penalties and temperature, vLLM's default).
#pragma once
#include <cstdint>

namespace tp {

struct SamplingParams {
  float temperature = 1.0f;        // >= 0; 0: greedy (argmax of the penalized logits, lowest id wins a tie)
  float top_p = 1.0f;              // (0, 1]
  int32_t top_k = 0;               // >= 0; 0: off
  float min_p = 0.0f;              // [0, 1]; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;               // same seed, same logits -> same tokens
  float presence_penalty = 0.0f;   // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;  // [-2, 2]; 0: off
  float repetition_penalty = 1.0f; // (0, 2]; 1: off
  int32_t logprobs = -1;           // -1: none; k in [0, kMaxLogprobs]: the sampled token's logprob + the top k
  bool operator==(const SamplingParams&) const = default;

  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f; }
};

inline constexpr int32_t kMaxLogprobs = 20;  // OpenAI's limit for top_logprobs

}  // namespace tp
