#include "coordinator/router_metrics.h"

namespace tp {

void RouterMetrics::request_done(int status) {
  std::lock_guard lk(mu_);
  ++by_status_[status];
}

void RouterMetrics::routed(int replica, int64_t prompt_blocks, int64_t hit_blocks, bool fetch_hint) {
  {
    std::lock_guard lk(mu_);
    ++by_replica_[replica];
  }
  prompt_blocks_ += prompt_blocks;
  hit_blocks_ += hit_blocks;
  if (fetch_hint) ++fetch_hints_;
}

std::string RouterMetrics::text(const std::vector<ReplicaView>& replicas) const {
  std::string s;
  auto counter = [&s](const std::string& name, const std::string& help) {
    s += "# HELP tpserve_router_" + name + " " + help + "\n# TYPE tpserve_router_" + name + " counter\n";
  };
  auto gauge = [&s](const std::string& name, const std::string& help) {
    s += "# HELP tpserve_router_" + name + " " + help + "\n# TYPE tpserve_router_" + name + " gauge\n";
  };
  std::lock_guard lk(mu_);
  counter("requests_total", "Finished client requests by the HTTP status sent.");
  for (const auto& [st, n] : by_status_)
    s += "tpserve_router_requests_total{status=\"" + std::to_string(st) + "\"} " + std::to_string(n) + "\n";
  counter("routed_total", "Requests sent to each replica, replays included.");
  for (const ReplicaView& r : replicas) {
    const auto it = by_replica_.find(r.id);
    s += "tpserve_router_routed_total{replica=\"" + r.url + "\"} " +
         std::to_string(it == by_replica_.end() ? 0 : it->second) + "\n";
  }
  counter("replays_total", "Requests moved to another replica after theirs failed.");
  s += "tpserve_router_replays_total{kind=\"plain\"} " + std::to_string(replays_plain_.load()) + "\n";
  s += "tpserve_router_replays_total{kind=\"stream\"} " + std::to_string(replays_stream_.load()) + "\n";
  counter("replay_failures_total", "Requests that failed and could not be replayed.");
  s += "tpserve_router_replay_failures_total " + std::to_string(replay_failures_.load()) + "\n";
  counter("prompt_blocks_total", "Full prompt blocks of routed requests.");
  s += "tpserve_router_prompt_blocks_total " + std::to_string(prompt_blocks_.load()) + "\n";
  counter("prefix_hit_blocks_total", "Prompt blocks the chosen replica held or was computing (prefix index).");
  s += "tpserve_router_prefix_hit_blocks_total " + std::to_string(hit_blocks_.load()) + "\n";
  counter("kv_fetch_hints_total", "Requests forwarded with kv_transfer_params.fetch_from.");
  s += "tpserve_router_kv_fetch_hints_total " + std::to_string(fetch_hints_.load()) + "\n";
  counter("kv_event_batches_total", "KV event batches received from the replicas.");
  s += "tpserve_router_kv_event_batches_total " + std::to_string(kv_batches_.load()) + "\n";
  counter("kv_event_gaps_total", "KV event batches that followed a lost one.");
  s += "tpserve_router_kv_event_gaps_total " + std::to_string(kv_gaps_.load()) + "\n";
  counter("kv_event_malformed_total", "KV event messages that did not decode.");
  s += "tpserve_router_kv_event_malformed_total " + std::to_string(kv_malformed_.load()) + "\n";
  int up = 0, joined = 0;
  for (const ReplicaView& r : replicas) up += r.joined && r.up, joined += r.joined;
  gauge("replicas_up", "Replicas up now.");
  s += "tpserve_router_replicas_up " + std::to_string(up) + "\n";
  gauge("replicas", "Replicas joined.");
  s += "tpserve_router_replicas " + std::to_string(joined) + "\n";
  gauge("replica_prefix_blocks", "Blocks the prefix index holds for each replica.");
  for (const ReplicaView& r : replicas)
    s += "tpserve_router_replica_prefix_blocks{replica=\"" + r.url + "\"} " + std::to_string(r.n_blocks) + "\n";
  return s;
}

}  // namespace tp
