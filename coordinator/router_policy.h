// The router's choice of a replica for one request: the policies `round_robin`, `least_load` and
// `prefix_aware` (the default) as a pure function of the replicas' state. Costs, in tokens (lowest wins, ties
// to the lowest replica index, but prefix_aware first to the replica whose cache holds fewer blocks — the room a
// new conversation needs, as SGLang's router sends a request nobody caches to the worker with the smallest tree;
// replicas down are never chosen; none up gives -1):
//   load(r)          = waiting_tokens(r) + running_tokens(r) + kv_usage_tokens x kv_usage(r)
//   least_load:   cost(r) = load(r)
//   prefix_aware: cost(r) = load(r) + uncached(r) + duplicated(r)
//     uncached(r)   = prompt_tokens - block_size x overlap_blocks(r): the prefill r would do after its prefix
//                     cache hit (the work ahead of it is load(r))
//     duplicated(r) = block_size x (overlap_blocks(best) - overlap_blocks(r)), best = the replica up holding the
//                     longest prefix of the prompt: the tokens another replica already caches that r would compute
//                     and cache a second time. Moving a conversation off the replica holding its history costs the
//                     recompute (in uncached) and the room of the copy it leaves behind, which under KV pressure
//                     is as many cached tokens evicted (recomputed later by whoever wanted them) — so a
//                     conversation stays with its history unless the holder's load exceeds another's by twice the
//                     history it holds more (the stickiness cache-aware routers give a conversation: SGLang routes
//                     by cache unless the load is clearly imbalanced). Prompts nobody holds: 0 everywhere.
//   round_robin:  the first replica up after the previous choice (cyclic).
// kv_usage in [0, 1] (blocks in use / blocks); kv_usage_tokens converts a full cache into tokens of load.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

enum class RoutePolicy { RoundRobin, LeastLoad, PrefixAware };

// "round_robin" | "least_load" | "prefix_aware"; throws InputError naming `where` for anything else.
RoutePolicy parse_route_policy(const std::string& name, const std::string& where);

struct ReplicaState {
  bool up = true;
  int64_t waiting_tokens = 0;  // prompt + max_tokens of its waiting requests, less their prefix-cache hits
  int64_t running_tokens = 0;  // tokens still to compute for its running requests
  double kv_usage = 0;
  int64_t overlap_blocks = 0;  // leading blocks of this request's prompt it holds (PrefixIndex::overlap)
  int64_t cached_blocks = 0;   // blocks its cache holds or is computing (PrefixIndex::n_held_or_expected): ties
};

struct RouteCostParams {
  int64_t block_size = 16;            // tokens per KV block
  double kv_usage_tokens = 0;         // tokens of load a full KV cache counts as (router.kv_usage_tokens: 0, off)
};

class RoutePolicyState {
 public:
  explicit RoutePolicyState(RoutePolicy p, RouteCostParams c = {}) : policy_(p), cost_(c) {}
  // The replica index for a request of `prompt_tokens` tokens, or -1 when no replica is up. round_robin
  // advances its cursor.
  int choose(const std::vector<ReplicaState>& replicas, int64_t prompt_tokens);
  // The stated cost of replica `r` (tokens) under this policy when the replica up holding the longest prefix of
  // the prompt holds `best_overlap_blocks` of it (< r.overlap_blocks counts as r's: r is the best); round_robin: 0.
  double cost(const ReplicaState& r, int64_t prompt_tokens, int64_t best_overlap_blocks = 0) const;

 private:
  RoutePolicy policy_;
  RouteCostParams cost_;
  int last_ = -1;  // round_robin's previous choice
};

}  // namespace tp
