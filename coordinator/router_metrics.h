// The router's counters and their Prometheus text (GET /metrics of `tpserve router`). Every name starts with
// "tpserve_router_"; formulas:
//   requests_total{status}      finished client requests by the HTTP status sent (streams: 200 once started)
//   routed_total{replica}       requests sent to each replica (replays included)
//   replays_total{kind}         requests moved to another replica after theirs failed: kind = plain | stream
//   replay_failures_total       requests that could not be replayed (no replica left, or not replayable)
//   prompt_blocks_total         full prompt blocks of routed requests (sum over requests)
//   prefix_hit_blocks_total     of those, blocks the chosen replica held per the prefix index (stored, or
//                               expected: the prompt of a request in flight there, PrefixIndex::expect)
//                               (prefix hit rate = prefix_hit_blocks_total / prompt_blocks_total)
//   kv_fetch_hints_total        requests forwarded with kv_transfer_params.fetch_from
//   kv_event_batches_total      KV event batches received; kv_event_gaps_total: batches after a lost one;
//   kv_event_malformed_total    messages that did not decode
//   replicas_up, replicas       gauges: replicas up now, replicas joined
// Thread-safe (atomics).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/router_replicas.h"

namespace tp {

class RouterMetrics {
 public:
  void request_done(int status);
  void routed(int replica, int64_t prompt_blocks, int64_t hit_blocks, bool fetch_hint);
  void replayed(bool stream) { (stream ? replays_stream_ : replays_plain_)++; }
  void replay_failed() { ++replay_failures_; }
  void kv_batches(int64_t n, int64_t gaps, int64_t malformed_total) {
    kv_batches_ += n;
    kv_gaps_ += gaps;
    kv_malformed_ = malformed_total;
  }
  int64_t n_replays() const { return replays_plain_ + replays_stream_; }
  // Prometheus text exposition, the replica gauges from `replicas`.
  std::string text(const std::vector<ReplicaView>& replicas) const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> by_status_, by_replica_;
  std::atomic<int64_t> replays_plain_{0}, replays_stream_{0}, replay_failures_{0}, prompt_blocks_{0}, hit_blocks_{0},
      fetch_hints_{0}, kv_batches_{0}, kv_gaps_{0}, kv_malformed_{0};
};

}  // namespace tp
