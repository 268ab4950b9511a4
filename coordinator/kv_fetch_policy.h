// Fetch or recompute: the receiving replica's choice for a prefix another replica holds (issue 15, deliverable 3).
//
//   fetch_seconds(bytes)      = latency_s + bytes / link_bytes_per_s       (bytes: per rank, the ranks pull in parallel)
//   recompute_seconds(tokens) = tokens / prefill_tokens_per_s
//   fetch iff fetch_seconds(bytes) < recompute_seconds(tokens)
//
// Both rates are measured: link_bytes_per_s starts from the start-up loopback transfer (set_link) and then follows
// every successful fetch; prefill_tokens_per_s follows the engine's steps that computed >= kMinPrefillTokens tokens
// (tokens / forward seconds of the step). Each update is an exponential moving average with weight kEwmaWeight for
// the new sample. Until a prefill step was measured, prefill_tokens_per_s is the prior kPriorPrefillTokensPerS
// (SmolLM2-135M on 2 Zen 4 cores runs prefill at roughly this rate), stated so the first decision is not a guess
// hidden in code. Not thread-safe: the engine thread.
#pragma once
#include <cstdint>

namespace tp {

class KvFetchPolicy {
 public:
  static constexpr double kEwmaWeight = 0.3;
  static constexpr int64_t kMinPrefillTokens = 32;
  static constexpr double kPriorPrefillTokensPerS = 1000.0;
  static constexpr double kPriorLinkBytesPerS = 1e9;
  static constexpr double kPriorLatencyS = 2e-3;

  // A start-up measurement (bytes moved in seconds over one fetch); replaces the prior.
  void set_link(int64_t bytes, double seconds);
  void observe_fetch(int64_t bytes, double seconds);
  void observe_prefill(int64_t tokens, double seconds);

  double fetch_seconds(int64_t bytes) const;
  double recompute_seconds(int64_t tokens) const;
  bool should_fetch(int64_t bytes, int64_t tokens) const { return fetch_seconds(bytes) < recompute_seconds(tokens); }

  double link_bytes_per_s() const { return link_bytes_per_s_; }
  double prefill_tokens_per_s() const { return prefill_tokens_per_s_; }
  bool prefill_measured() const { return prefill_measured_; }

 private:
  double link_bytes_per_s_ = kPriorLinkBytesPerS;
  double latency_s_ = kPriorLatencyS;
  double prefill_tokens_per_s_ = kPriorPrefillTokensPerS;
  bool prefill_measured_ = false;
};

}  // namespace tp
