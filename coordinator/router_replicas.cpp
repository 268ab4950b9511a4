#include "coordinator/router_replicas.h"

#include <algorithm>

namespace tp {

int RouterReplicas::join(const std::string& url) {
  std::lock_guard lk(mu_);
  for (Replica& r : replicas_)
    if (r.v.url == url) {
      r.v.joined = true;
      return r.v.id;
    }
  Replica r;
  r.v.id = int(replicas_.size());
  r.v.url = url;
  r.v.down_reason = "not checked yet";
  replicas_.push_back(r);
  return r.v.id;
}

bool RouterReplicas::leave(const std::string& url) {
  std::lock_guard lk(mu_);
  for (Replica& r : replicas_)
    if (r.v.url == url && r.v.joined) {
      r.v.joined = false;
      r.v.up = false;
      r.v.down_reason = "left";
      index_.cleared(r.v.id);
      return true;
    }
  return false;
}

std::vector<ReplicaView> RouterReplicas::snapshot() const {
  std::lock_guard lk(mu_);
  std::vector<ReplicaView> out;
  for (const Replica& r : replicas_) {
    out.push_back(r.v);
    out.back().n_blocks = index_.n_blocks(r.v.id);
  }
  return out;
}

int RouterReplicas::n_up() const {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const Replica& r : replicas_) n += r.v.joined && r.v.up;
  return n;
}

int RouterReplicas::n_joined() const {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const Replica& r : replicas_) n += r.v.joined;
  return n;
}

void RouterReplicas::health(int id, bool ok, const std::string& reason, const std::string& events_endpoint,
                            double kv_usage, int64_t unhealthy_after) {
  std::lock_guard lk(mu_);
  if (id < 0 || id >= int(replicas_.size()) || !replicas_[size_t(id)].v.joined) return;
  Replica& r = replicas_[size_t(id)];
  if (ok) {
    r.failures = 0;
    r.v.kv_usage = kv_usage;
    if (!r.v.up) {
      index_.cleared(id);
      r.v.up = true;
      r.v.down_reason.clear();
      ++r.v.generation;
      r.v.events_endpoint = events_endpoint;
    }
    return;
  }
  ++r.failures;
  if (r.v.up && r.failures >= unhealthy_after) {
    r.v.up = false;
    index_.cleared(id);
  }
  if (!r.v.up) r.v.down_reason = reason;
}

void RouterReplicas::mark_down(int id, const std::string& reason) {
  std::lock_guard lk(mu_);
  if (id < 0 || id >= int(replicas_.size())) return;
  Replica& r = replicas_[size_t(id)];
  if (r.v.up) index_.cleared(id);
  r.v.up = false;
  r.v.down_reason = reason;
}

RouteChoice RouterReplicas::choose(const std::vector<uint64_t>& chain, int64_t prompt_tokens, int64_t load_tokens,
                                   const std::set<int>& exclude) {
  std::lock_guard lk(mu_);
  std::vector<ReplicaState> states;
  RouteChoice c;
  c.n_prompt_blocks = int64_t(chain.size());
  for (const Replica& r : replicas_) {
    ReplicaState s;
    s.up = r.v.joined && r.v.up && !exclude.count(r.v.id);
    s.waiting_tokens = r.v.prefill_tokens;
    s.running_tokens = r.v.in_flight_tokens - r.v.prefill_tokens;
    s.kv_usage = r.v.kv_usage;
    s.overlap_blocks = index_.overlap(r.v.id, chain);
    s.cached_blocks = index_.n_held_or_expected(r.v.id);
    // A KV fetch reads blocks the holder has stored, not ones it is still computing.
    const int64_t stored = index_.overlap(r.v.id, chain, false);
    if (s.up && stored > c.holder_overlap) {
      c.holder = r.v.id;
      c.holder_url = r.v.url;
      c.holder_overlap = stored;
    }
    states.push_back(s);
  }
  c.replica = policy_.choose(states, prompt_tokens);
  if (c.replica < 0) return c;
  Replica& r = replicas_[size_t(c.replica)];
  c.url = r.v.url;
  c.overlap_blocks = states[size_t(c.replica)].overlap_blocks;
  const int64_t cached = block_size_ * c.overlap_blocks;
  c.load_tokens = std::max<int64_t>(0, load_tokens - cached);
  c.prefill_tokens = std::min(c.load_tokens, std::max<int64_t>(0, prompt_tokens - cached));
  c.ticket = next_ticket_++;
  ++r.v.in_flight;
  ++r.v.n_routed;
  r.v.in_flight_tokens += c.load_tokens;
  r.v.prefill_tokens += c.prefill_tokens;
  index_.expect(c.replica, chain);
  tickets_[c.ticket] = Ticket{c.replica, c.load_tokens, c.prefill_tokens, false, chain};
  return c;
}

void RouterReplicas::prefilled(int64_t ticket) {
  std::lock_guard lk(mu_);
  const auto it = tickets_.find(ticket);
  if (it == tickets_.end() || it->second.prefilled) return;
  Ticket& t = it->second;
  Replica& r = replicas_[size_t(t.replica)];
  t.prefilled = true;
  r.v.in_flight_tokens -= t.prefill;
  r.v.prefill_tokens -= t.prefill;
  t.load_left -= t.prefill;
}

void RouterReplicas::release(int64_t ticket) {
  std::lock_guard lk(mu_);
  const auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;
  const Ticket& t = it->second;
  Replica& r = replicas_[size_t(t.replica)];
  --r.v.in_flight;
  r.v.in_flight_tokens -= t.load_left;
  if (!t.prefilled) r.v.prefill_tokens -= t.prefill;
  index_.unexpect(t.replica, t.chain);
  tickets_.erase(it);
}

void RouterReplicas::apply(int id, int64_t generation, const KvEventBatch& batch) {
  std::lock_guard lk(mu_);
  if (id < 0 || id >= int(replicas_.size())) return;
  const Replica& r = replicas_[size_t(id)];
  if (!r.v.up || !r.v.joined || r.v.generation != generation) return;
  for (const KvEvent& e : batch.events) {
    switch (e.kind) {
      case KvEventKind::BlockStored: index_.stored(id, e.block_hashes); break;
      case KvEventKind::BlockRemoved: index_.removed(id, e.block_hashes); break;
      case KvEventKind::AllBlocksCleared: index_.cleared(id); break;
    }
  }
}

}  // namespace tp
