// The router's live view of its replicas: the set (joining and leaving while it runs), each one's health (up /
// down, from health checks and from failed proxied calls), the load the router itself put on it (requests in
// flight and their tokens), the global prefix index fed by the replicas' KV events, and the routing choice
// under the configured policy (coordinator/router_policy.h).
// Load, per request in flight (a ticket from choose() until release()): its prompt tokens the chosen replica does
// not hold (prefill, counted as waiting until its first token comes: prefilled()) + its max_tokens (decode,
// counted as running until it ends). The prompt blocks of a request in flight count as held by its replica
// (PrefixIndex::expect) until it ends, by which time the replica's KV events have said what it stored. Replica ids are stable: a replica that leaves
// keeps its id (never chosen again); one that rejoins under the same URL gets its old id back.
// Thread-safe: one mutex; every method may be called from any thread.
#pragma once
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/router_index.h"
#include "coordinator/router_policy.h"
#include "kvstore/kv_event_wire.h"

namespace tp {

struct ReplicaView {
  int id = 0;
  std::string url;             // "http://host:port"
  bool joined = true;          // false: it left (DELETE /router/replicas); never chosen
  bool up = false;             // its last health checks passed (and no proxied call failed since)
  std::string down_reason;     // why it is down ("" while up or never checked)
  int64_t generation = 0;      // times it came up: a new generation is a new process (a fresh KV cache)
  std::string events_endpoint; // its KV-event PUB endpoint ("" when it publishes none)
  int64_t in_flight = 0;       // requests the router has on it now
  int64_t in_flight_tokens = 0;// their prompt + max_tokens, less the prompt tokens it held for each, less the
                               // prompt tokens of those whose first token came (prefilled)
  int64_t prefill_tokens = 0;  // of which: prompt tokens of requests still before their first token
  double kv_usage = 0;         // its vllm:kv_cache_usage_perc at the last health check, [0, 1]
  int64_t n_routed = 0;        // requests sent to it
  int64_t n_blocks = 0;        // blocks the prefix index holds for it
};

// One routing decision.
struct RouteChoice {
  int replica = -1;            // -1: none up
  std::string url;
  int64_t overlap_blocks = 0;  // leading prompt blocks the chosen replica holds
  int64_t n_prompt_blocks = 0; // full blocks of the prompt
  // The replica holding the longest prefix of this prompt (-1: none holds any), and its overlap; with
  // router.kv_fetch, a chosen replica that holds less can fetch the difference from it.
  int holder = -1;
  std::string holder_url;
  int64_t holder_overlap = 0;
  // The load choose() counted on the chosen replica: load_tokens less the prompt tokens its prefix cache holds
  // (block_size x overlap_blocks) — the work it will do, as the policy's cost counts it; prefill_tokens of it are
  // the prompt's (until prefilled()).
  int64_t load_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t ticket = -1;         // give it to prefilled() and release(); -1: none up
};

class RouterReplicas {
 public:
  RouterReplicas(RoutePolicy policy, RouteCostParams cost) : block_size_(cost.block_size), policy_(policy, cost) {}

  // Adds (or re-adds) a replica; returns its id. It starts down until a health check passes.
  int join(const std::string& url);
  // Marks the replica with this URL as gone; false when unknown. Its prefix entries are dropped.
  bool leave(const std::string& url);
  std::vector<ReplicaView> snapshot() const;
  int n_up() const;
  int n_joined() const;

  // A health check's outcome. ok: up (a new generation when it was down: its index entries are dropped, and
  // events_endpoint/kv_usage are taken); !ok: one more failure, down after `unhealthy_after` in a row.
  void health(int id, bool ok, const std::string& reason, const std::string& events_endpoint, double kv_usage,
              int64_t unhealthy_after);
  // Down now (a proxied call found it unreachable or dying); its prefix entries are dropped.
  void mark_down(int id, const std::string& reason);

  // Chooses a replica for a prompt with chained block hashes `chain` (block 0 first) and `prompt_tokens`
  // tokens, never one in `exclude`; counts the request on it (in flight, `load_tokens` less the prompt tokens it
  // holds of load: RouteChoice::load_tokens; its prompt blocks expected there) — call release(ticket) when it
  // ends.
  RouteChoice choose(const std::vector<uint64_t>& chain, int64_t prompt_tokens, int64_t load_tokens,
                     const std::set<int>& exclude = {});
  // The request's first token came: its prompt is computed, its prefill_tokens leave the replica's load. Once per
  // ticket (later calls, or after release, do nothing).
  void prefilled(int64_t ticket);
  // The request ended (however): the rest of its load and its expected blocks go. Unknown tickets are ignored.
  void release(int64_t ticket);

  // KV events from replica `id` (generation `generation`: a batch from an older process is dropped).
  void apply(int id, int64_t generation, const KvEventBatch& batch);

 private:
  struct Replica {
    ReplicaView v;
    int64_t failures = 0;
  };
  struct Ticket {
    int replica = -1;
    int64_t load_left = 0;       // tokens it still counts in the replica's in_flight_tokens
    int64_t prefill = 0;         // of which prompt tokens, until prefilled
    bool prefilled = false;
    std::vector<uint64_t> chain; // expected on the replica
  };
  mutable std::mutex mu_;
  std::vector<Replica> replicas_;
  PrefixIndex index_;
  std::unordered_map<int64_t, Ticket> tickets_;
  int64_t next_ticket_ = 0;
  const int64_t block_size_;
  RoutePolicyState policy_;
};

}  // namespace tp
