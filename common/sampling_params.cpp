// The sampling ranges, checked (see sampling_params.h).
#include "common/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace tp {
namespace {

// "2" for integral values, else the shortest text that reads back as the same double ("0.05", "3.5").
std::string num(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

}  // namespace

std::optional<SamplingViolation> check_sampling_value(const SamplingRange& r, double v) {
  const bool fits = std::isfinite(v) && std::fabs(v) <= double(std::numeric_limits<float>::max());
  const float f = fits ? float(v) : 0.0f;
  const bool ok = fits && (r.lo_open ? double(f) > r.lo : double(f) >= r.lo) && double(f) <= r.hi;
  if (ok) return std::nullopt;
  const std::string range = r.lo_open ? "in (" + num(r.lo) + ", " + num(r.hi) + "]"
                                      : "between " + num(r.lo) + " and " + num(r.hi);
  return SamplingViolation{r.field, std::string(r.field) + " must be " + range + ", got " + num(v)};
}

std::optional<SamplingViolation> check_sampling(const SamplingParams& p) {
  const std::pair<const SamplingRange*, float> floats[] = {
      {&kTemperatureRange, p.temperature},           {&kTopPRange, p.top_p},
      {&kMinPRange, p.min_p},                        {&kPresencePenaltyRange, p.presence_penalty},
      {&kFrequencyPenaltyRange, p.frequency_penalty}, {&kRepetitionPenaltyRange, p.repetition_penalty}};
  for (const auto& [range, v] : floats)
    if (auto bad = check_sampling_value(*range, v)) return bad;
  if (p.top_k < 0) return SamplingViolation{"top_k", "top_k must be >= 0 (0: off), got " + std::to_string(p.top_k)};
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs)
    return SamplingViolation{"logprobs", "logprobs must be -1 (off) or between 0 and " + std::to_string(kMaxLogprobs) +
                                             ", got " + std::to_string(p.logprobs)};
  return std::nullopt;
}

}  // namespace tp
