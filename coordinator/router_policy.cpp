#include "coordinator/router_policy.h"

#include <algorithm>

#include "common/error.h"

namespace tp {

RoutePolicy parse_route_policy(const std::string& name, const std::string& where) {
  if (name == "round_robin") return RoutePolicy::RoundRobin;
  if (name == "least_load") return RoutePolicy::LeastLoad;
  if (name == "prefix_aware") return RoutePolicy::PrefixAware;
  throw InputError(where + ": unknown routing policy '" + name + "' (round_robin, least_load, prefix_aware)");
}

double RoutePolicyState::cost(const ReplicaState& r, int64_t prompt_tokens, int64_t best_overlap_blocks) const {
  if (policy_ == RoutePolicy::RoundRobin) return 0;
  const double load = double(r.waiting_tokens + r.running_tokens) + cost_.kv_usage_tokens * r.kv_usage;
  if (policy_ == RoutePolicy::LeastLoad) return load;
  const int64_t cached = std::min(prompt_tokens, cost_.block_size * r.overlap_blocks);
  const int64_t best = std::max(cached, std::min(prompt_tokens, cost_.block_size * best_overlap_blocks));
  return load + double(prompt_tokens - cached) + double(best - cached);
}

int RoutePolicyState::choose(const std::vector<ReplicaState>& replicas, int64_t prompt_tokens) {
  const int n = int(replicas.size());
  if (policy_ == RoutePolicy::RoundRobin) {
    for (int k = 1; k <= n; ++k) {
      const int i = (last_ + k) % n;
      if (replicas[size_t(i)].up) return last_ = i;
    }
    return -1;
  }
  int64_t best_overlap = 0;
  for (const ReplicaState& r : replicas)
    if (r.up) best_overlap = std::max(best_overlap, r.overlap_blocks);
  int best = -1;
  double best_cost = 0;
  for (int i = 0; i < n; ++i) {
    if (!replicas[size_t(i)].up) continue;
    const double c = cost(replicas[size_t(i)], prompt_tokens, best_overlap);
    const bool smaller_cache = policy_ == RoutePolicy::PrefixAware &&
                               replicas[size_t(i)].cached_blocks < replicas[size_t(best < 0 ? i : best)].cached_blocks;
    if (best < 0 || c < best_cost || (c == best_cost && smaller_cache)) best = i, best_cost = c;
  }
  return best;
}

}  // namespace tp
