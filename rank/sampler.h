// Picks the next token from one row of logits [vocab]: greedy (temperature 0) or sampled with temperature,
// top-k, top-p and min-p. Stateless across steps: the random draw depends only on (seed, position), so the
// same seed gives the same text, and a sequence recomputed after preemption samples exactly as before.
#pragma once
#include <cstdint>
#include <vector>

#include "common/sampling_params.h"

namespace tp {

// Index of the largest logit; the lowest index wins a tie.
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  // p must be valid (coordinator/request.h validate_sampling; StepPlan deserialization checks it too).
  // position: the index the sampled token will have in its sequence.
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position);

 private:
  std::vector<std::pair<float, int32_t>> cand_;  // (logit or prob, id), reused scratch
};

}  // namespace tp
