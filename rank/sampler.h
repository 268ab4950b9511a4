// Picks the next token from one row of logits [vocab]: greedy (temperature 0) or sampled with
// temperature, top-k, top-p and min-p, from a seeded generator (same seed, same logits -> same token).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace tp {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id wins a tie)
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0: off
  float min_p = 0.0f;        // [0, 1]; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;
};

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
