// Picks the next token from one row of logits [vocab]: greedy (temperature 0) or sampled with
// temperature, top-k, top-p and min-p, from a seeded generator (same seed, same logits -> same token).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "common/sampling_params.h"

namespace tp {

// Index of the largest logit; the lowest index wins a tie.
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // (logit or prob, id), reused
};

}  // namespace tp
