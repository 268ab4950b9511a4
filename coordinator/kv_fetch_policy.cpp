#include "coordinator/kv_fetch_policy.h"

#include <algorithm>

namespace tp {

void KvFetchPolicy::set_link(int64_t bytes, double seconds) {
  if (bytes <= 0 || seconds <= 0) return;
  link_bytes_per_s_ = double(bytes) / seconds;
}

void KvFetchPolicy::observe_fetch(int64_t bytes, double seconds) {
  if (bytes <= 0 || seconds <= 0) return;
  // The fixed part (connection, request) is inside `seconds`: attributing it all to bandwidth errs toward
  // recomputing, which is always correct.
  link_bytes_per_s_ = (1 - kEwmaWeight) * link_bytes_per_s_ + kEwmaWeight * (double(bytes) / seconds);
}

void KvFetchPolicy::observe_prefill(int64_t tokens, double seconds) {
  if (tokens < kMinPrefillTokens || seconds <= 0) return;
  const double rate = double(tokens) / seconds;
  prefill_tokens_per_s_ = prefill_measured_ ? (1 - kEwmaWeight) * prefill_tokens_per_s_ + kEwmaWeight * rate : rate;
  prefill_measured_ = true;
}

double KvFetchPolicy::fetch_seconds(int64_t bytes) const {
  return latency_s_ + double(std::max<int64_t>(bytes, 0)) / link_bytes_per_s_;
}

double KvFetchPolicy::recompute_seconds(int64_t tokens) const {
  return double(std::max<int64_t>(tokens, 0)) / prefill_tokens_per_s_;
}

}  // namespace tp
