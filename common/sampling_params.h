// Per-request sampling parameters: what the coordinator puts into a StepPlan and the sampler obeys.
// Order of operations on one row of logits (rank/sampler.h): logit_bias -> penalties -> temperature -> top_k
// -> softmax -> min_p -> top_p -> one seeded draw. Penalties (vLLM's definitions, applied to the biased logits):
//   repetition  every token id in prompt or output:  logit > 0 ? logit / r : logit * r
//   frequency   logit -= frequency_penalty * (times the id occurs in the output)
//   presence    logit -= presence_penalty  * (1 if the id occurs in the output)
// Logprobs are of the raw logits (log_softmax before bias, penalties and temperature, vLLM's default).
//
// The ranges below are the one statement of what a valid value is: the HTTP parser, the engine and the
// StepPlan deserializer all check through check_sampling / check_sampling_value.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tp {

struct SamplingParams {
  float temperature = 1.0f;        // [0, 2]; 0: greedy (argmax of the penalized logits, lowest id wins a tie)
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

inline constexpr int32_t kMaxLogprobs = 20;      // OpenAI's limit for top_logprobs
inline constexpr float kMaxLogitBias = 100.0f;   // OpenAI's: each logit_bias value in [-100, 100]

// One additive bias on one token's logit (OpenAI logit_bias), applied before penalties.
struct LogitBias {
  int32_t token = 0;   // in [0, vocab)
  float bias = 0.0f;   // [-kMaxLogitBias, kMaxLogitBias]
  bool operator==(const LogitBias&) const = default;
};

// A float field's valid interval: [lo, hi], or (lo, hi] when lo_open. Finite values only.
struct SamplingRange {
  const char* field;
  double lo, hi;
  bool lo_open = false;
};
inline constexpr SamplingRange kTemperatureRange{"temperature", 0, 2};
inline constexpr SamplingRange kTopPRange{"top_p", 0, 1, true};
inline constexpr SamplingRange kMinPRange{"min_p", 0, 1};
inline constexpr SamplingRange kPresencePenaltyRange{"presence_penalty", -2, 2};
inline constexpr SamplingRange kFrequencyPenaltyRange{"frequency_penalty", -2, 2};
inline constexpr SamplingRange kRepetitionPenaltyRange{"repetition_penalty", 0, 2, true};
inline constexpr SamplingRange kLogitBiasRange{"logit_bias", -kMaxLogitBias, kMaxLogitBias};

// A value outside its range: which field, and a message naming the field, the range and the value
// ("top_p must be in (0, 1], got 0").
struct SamplingViolation {
  std::string field;
  std::string message;
};

// Checks v as the float it is stored as (1e-50 passes > 0 as a double, not as a float).
std::optional<SamplingViolation> check_sampling_value(const SamplingRange& r, double v);
// The first out-of-range field of p (top_k >= 0 and logprobs in [-1, kMaxLogprobs] included); nullopt if valid.
std::optional<SamplingViolation> check_sampling(const SamplingParams& p);

}  // namespace tp
