// Per-request sampling parameters: what the coordinator puts into a StepPlan and the sampler obeys.
#pragma once
#include <cstdint>

namespace tp {

struct SamplingParams {
  float temperature = 1.0f;  // >= 0; 0: greedy (argmax, lowest id wins a tie)
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // >= 0; 0: off
  float min_p = 0.0f;        // [0, 1]; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;         // same seed, same logits -> same tokens
  bool operator==(const SamplingParams&) const = default;
};

}  // namespace tp
