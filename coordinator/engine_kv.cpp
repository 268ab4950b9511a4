// Engine: the KV block exchange between replicas (issue 15, deliverable 3) — the holder's pins and exports, the
// receiver's fetch-or-recompute decision and import. Engine thread unless said otherwise. See engine.h.
//
// Import of a request whose prompt has n leading blocks on the holder (KvImport):
//   1. verify: the holder's chained hashes must equal the chain over this request's own token ids (default_block_hash);
//      only the matching leading blocks count, and never the whole prompt (one token is left to compute);
//   2. blocks already cached here are not fetched (BlockManager::match_prefix);
//   3. cost: fetch only when KvFetchPolicy::should_fetch(bytes per rank, tokens) — else recompute;
//   4. allocate the missing blocks under a temporary sequence, order the ranks to pull them (StepExecutor::fetch_kv);
//   5. ok: commit their tokens, so they enter the prefix index; free the sequence (the blocks stay cached, and the
//      request's admission finds them as a prefix hit). Failure: free the sequence uncommitted (the blocks go back
//      to the free list) — the request recomputes.
#include <algorithm>
#include <cstdio>

#include "coordinator/engine.h"

namespace tp {
namespace {

std::string fmt(const char* f, double a, double b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

KvExport Engine::export_kv(std::vector<int32_t> tokens, std::chrono::milliseconds pin_for,
                           std::chrono::milliseconds wait) {
  auto job = std::make_shared<ExportJob>();
  job->tokens = std::move(tokens);
  job->pin_for = pin_for;
  std::future<KvExport> answer = job->answer.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    export_inbox_.push_back(job);
  }
  work_cv_.notify_all();
  if (answer.wait_for(wait) != std::future_status::ready)
    throw Error("KV export: the engine did not answer within " + std::to_string(wait.count()) + " ms");
  return answer.get();
}

void Engine::release_kv_pin(uint64_t pin_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    release_inbox_.push_back(pin_id);
  }
  work_cv_.notify_all();
}

bool Engine::apply_kv_inbox() {
  std::vector<std::shared_ptr<ExportJob>> exports;
  std::vector<uint64_t> releases;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exports.swap(export_inbox_);
    releases.swap(release_inbox_);
  }
  BlockManager& bm = scheduler_.kv_block_manager();
  const auto now = std::chrono::steady_clock::now();
  bool did = !exports.empty() || !releases.empty();
  for (uint64_t id : releases) {
    const auto it = kv_pins_.find(id);
    if (it == kv_pins_.end()) continue;
    bm.free(it->second.seq_id);
    kv_pins_.erase(it);
  }
  for (auto it = kv_pins_.begin(); it != kv_pins_.end();) {
    if (it->second.expires <= now) {
      bm.free(it->second.seq_id);
      it = kv_pins_.erase(it);
      did = true;
    } else {
      ++it;
    }
  }
  for (const auto& job : exports) {
    KvExport out;
    out.block_size = bm.block_size();
    try {
      const int64_t seq_id = next_kv_seq_++;
      const PrefixMatch m = bm.pin_prefix(seq_id, job->tokens);
      if (!m.blocks.empty()) {
        out.pin_id = next_pin_id_++;
        kv_pins_[out.pin_id] = {seq_id, now + job->pin_for};
        out.blocks = m.blocks;
        uint64_t h = kRootHash;
        for (size_t i = 0; i < m.blocks.size(); ++i) {
          h = default_block_hash(h, std::span<const int32_t>(job->tokens).subspan(i * size_t(bm.block_size()),
                                                                                   size_t(bm.block_size())));
          out.block_hashes.push_back(h);
        }
        ++kv_counts_.kv_exports;
        kv_counts_.kv_exported_blocks += int64_t(m.blocks.size());
      }
      job->answer.set_value(std::move(out));
    } catch (...) {
      job->answer.set_exception(std::current_exception());
    }
  }
  return did;
}

void Engine::import_kv(Sequence& s, std::vector<Delivery>& deliveries) {
  const std::shared_ptr<const KvImport> im = std::move(s.kv_import);
  ++kv_counts_.kv_fetch_requests;
  bool ok = false;
  std::string what;
  const auto done = [&] {
    if (!ok && what.rfind("recompute:", 0) != 0) ++kv_counts_.kv_fetch_failures;
    if (im->on_done) im->on_done(ok, what);
  };
  if (!im->error.empty()) {
    what = im->error;
    return done();
  }
  BlockManager& bm = scheduler_.kv_block_manager();
  const int64_t bs = bm.block_size();
  if (im->block_size != bs) {
    what = "the holder's block size " + std::to_string(im->block_size) + " differs from ours " + std::to_string(bs);
    return done();
  }
  if (im->holder_blocks.size() != im->block_hashes.size()) {
    what = "the holder's answer lists " + std::to_string(im->holder_blocks.size()) + " blocks and " +
           std::to_string(im->block_hashes.size()) + " hashes";
    return done();
  }
  // 1. The leading blocks whose chain matches our tokens; at most (n_prompt - 1) / bs of them.
  const std::span<const int32_t> prompt(s.tokens.data(), size_t(s.n_prompt));
  const int64_t cap = std::min<int64_t>(int64_t(im->holder_blocks.size()), (s.n_prompt - 1) / bs);
  int64_t n = 0;
  uint64_t h = kRootHash;
  while (n < cap) {
    h = default_block_hash(h, prompt.subspan(size_t(n * bs), size_t(bs)));
    if (h != im->block_hashes[size_t(n)]) break;
    ++n;
  }
  if (n == 0) {
    what = im->holder_blocks.empty() ? "recompute: the holder holds no block of this prompt"
                                     : "the holder's block 0 does not match this prompt's tokens (chain hash)";
    if (im->holder_blocks.empty()) ++kv_counts_.kv_fetch_recompute_by_cost;  // nothing to fetch: not a failure
    return done();
  }
  // 2. What is already here.
  const std::span<const int32_t> prefix = prompt.subspan(0, size_t(n * bs));
  const int64_t k = int64_t(bm.match_prefix(prefix, n - 1).blocks.size());
  const int64_t n_fetch = n - k;
  // 3. Cost.
  const int64_t bytes = n_fetch * cfg_.kv_footprint.block_bytes(int32_t(bs));
  const int64_t tokens = n_fetch * bs;
  const double t_fetch = kv_policy_.fetch_seconds(bytes), t_compute = kv_policy_.recompute_seconds(tokens);
  if (!kv_policy_.should_fetch(bytes, tokens)) {
    ++kv_counts_.kv_fetch_recompute_by_cost;
    what = "recompute: " + std::to_string(tokens) + " tokens" + fmt(" in %.4f s < fetch %.4f s", t_compute, t_fetch);
    return done();
  }
  // 4. Allocate and fetch — only while the holder's pin surely outlasts the fetch (1 s margin).
  if (std::chrono::steady_clock::now() + std::chrono::milliseconds(im->timeout_ms + 1000) > im->pinned_until) {
    what = "the holder's pin would expire before the fetch could end (the request waited too long)";
    return done();
  }
  const int64_t seq_id = next_kv_seq_++;
  const AllocPlan plan = bm.can_allocate(seq_id, prefix);
  if (!plan.fits || int64_t(plan.hit_blocks.size()) != k) {
    what = plan.fits ? "the local prefix cache changed while planning" : "no free KV blocks for the fetch";
    return done();
  }
  bm.allocate(plan);
  const std::vector<int32_t>& table = bm.block_table(seq_id);
  KvFetchOrder order;
  order.fetch_id = uint64_t(seq_id);
  order.timeout_ms = im->timeout_ms;
  order.holder_addresses = im->holder_addresses;
  order.holder_blocks.assign(im->holder_blocks.begin() + k, im->holder_blocks.begin() + n);
  order.local_blocks.assign(table.begin() + k, table.begin() + n);
  order.chain_hashes.assign(im->block_hashes.begin() + k, im->block_hashes.begin() + n);
  KvFetchOutcome outcome;
  try {
    outcome = executor_.fetch_kv(order);
  } catch (const std::exception& e) {
    bm.free(seq_id);
    fail_all(e.what(), deliveries);
    publish(deliveries);
    throw;
  }
  ++kv_counts_.kv_fetches;
  // 5. Commit (the blocks enter the prefix index) or drop.
  if (outcome.ok) {
    bm.commit_tokens(seq_id, prefix.subspan(size_t(k * bs)));
    ok = true;
    kv_counts_.kv_fetched_blocks += n_fetch;
    kv_counts_.kv_fetched_tokens += tokens;
    kv_counts_.kv_fetched_bytes += outcome.bytes_per_rank;
    kv_counts_.kv_fetch_seconds += outcome.seconds;
    kv_policy_.observe_fetch(outcome.bytes_per_rank, outcome.seconds);
    what = "fetched " + std::to_string(n_fetch) + " blocks (" + std::to_string(tokens) + " tokens, " +
           std::to_string(outcome.bytes_per_rank) + " bytes per rank)" +
           fmt(" in %.4f s; recompute estimate %.4f s", outcome.seconds, t_compute);
  } else {
    what = outcome.error;
  }
  bm.free(seq_id);
  done();
}

}  // namespace tp
