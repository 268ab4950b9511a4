// Engine side of the KV exchange between replicas (engine_kv.cpp), over executors that simulate the KV cache:
// every planned token id is written into its slot, the "model" samples a hash of what the block table reads back,
// and fetch_kv copies the holder executor's slots — so a receiver that imported the wrong blocks, or skipped a
// block it did not import, samples different tokens. Plus the fetch-or-recompute cost (kv_fetch_policy.h).
#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include "coordinator/engine.h"

namespace tp {
namespace {

constexpr int32_t kBs = 4;

class SlotExecutor final : public StepExecutor {
 public:
  explicit SlotExecutor(int32_t n_blocks) : slots_(size_t(n_blocks) * kBs, -1) {}

  void execute(StepPlan& plan, StepResult& result) override {
    result = {};
    for (const SeqPlan& sp : plan.seqs) {
      n_tokens += int64_t(sp.tokens.size());
      for (size_t i = 0; i < sp.tokens.size(); ++i) slot(sp, sp.start_pos + int64_t(i)) = sp.tokens[i];
      if (!sp.want_logits) continue;
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (int64_t p = 0; p < sp.start_pos + int64_t(sp.tokens.size()); ++p)
        h = (h ^ uint64_t(slot(sp, p) + 7)) * 0x100000001b3ull;
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(int32_t(h % 40));
    }
  }
  void shutdown() override {}
  KvFetchOutcome fetch_kv(KvFetchOrder& order) override {
    ++n_fetches;
    KvFetchOutcome o;
    if (!holder || fail) {
      o.error = "simulated failure";
      return o;
    }
    for (size_t i = 0; i < order.holder_blocks.size(); ++i)
      for (int32_t t = 0; t < kBs; ++t)
        slots_.at(size_t(order.local_blocks[i]) * kBs + size_t(t)) =
            holder->slots_.at(size_t(order.holder_blocks[i]) * kBs + size_t(t));
    o.ok = true;
    o.bytes_per_rank = int64_t(order.holder_blocks.size()) * 1000;
    o.seconds = 1e-4;
    return o;
  }

  SlotExecutor* holder = nullptr;
  bool fail = false;
  int64_t n_tokens = 0, n_fetches = 0;

 private:
  int32_t& slot(const SeqPlan& sp, int64_t pos) {
    return slots_.at(size_t(sp.block_table.at(size_t(pos / kBs))) * kBs + size_t(pos % kBs));
  }
  std::vector<int32_t> slots_;
};

EngineConfig config() {
  EngineConfig e;
  e.scheduler.n_blocks = 64;
  e.scheduler.block_size = kBs;
  e.scheduler.max_context = 128;
  e.scheduler.max_num_seqs = 4;
  e.scheduler.max_num_batched_tokens = 128;
  e.vocab = 100;
  e.kv_footprint.bytes_per_token = 10;  // 40 bytes a block: the cost always says fetch
  return e;
}

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(50 + (i * 7 + salt) % 40);
  return p;
}

// Runs one greedy request to the end; returns its tokens.
std::vector<int32_t> run(Engine& e, std::vector<int32_t> tokens, std::shared_ptr<KvImport> im = nullptr) {
  std::vector<int32_t> out;
  Request r;
  r.prompt = std::move(tokens);
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.kv_import = im;
  r.on_output = [&out](const RequestOutput& o) { out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end()); };
  e.submit(std::move(r));
  e.run_until_idle();
  return out;
}

// The holder's export, answered by stepping its engine on this thread.
KvExport export_from(Engine& holder, const std::vector<int32_t>& tokens) {
  auto f = std::async(std::launch::async, [&] {
    return holder.export_kv(tokens, std::chrono::milliseconds(60000), std::chrono::milliseconds(10000));
  });
  while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) holder.step();
  return f.get();
}

std::shared_ptr<KvImport> import_of(const KvExport& e, bool* done_ok = nullptr) {
  auto im = std::make_shared<KvImport>();
  im->block_size = e.block_size;
  im->holder_addresses = {"sim"};
  im->holder_blocks = e.blocks;
  im->block_hashes = e.block_hashes;
  im->pinned_until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  im->on_done = [done_ok](bool ok, const std::string&) {
    if (done_ok) *done_ok = ok;
  };
  return im;
}

TEST(EngineKv, FetchedBlocksGiveTheHoldersTokensWithoutRecompute) {
  SlotExecutor hx(64), rx(64);
  rx.holder = &hx;
  Engine holder(config(), hx), receiver(config(), rx);
  const std::vector<int32_t> p = prompt(30, 1);  // 7 whole blocks + 2 tokens
  const std::vector<int32_t> want = run(holder, p);

  const KvExport e = export_from(holder, p);
  ASSERT_NE(e.pin_id, 0u);
  ASSERT_EQ(e.blocks.size(), 7u);
  EXPECT_EQ(holder.metrics().kv_pins, 1);
  // Pinned blocks are in use: evicting everything cached leaves them.
  EXPECT_EQ(holder.scheduler().block_manager().n_in_use(), 7);

  bool ok = false;
  const int64_t before = rx.n_tokens;
  EXPECT_EQ(run(receiver, p, import_of(e, &ok)), want);
  EXPECT_TRUE(ok);
  const EngineMetrics m = receiver.metrics();
  EXPECT_EQ(m.kv_fetches, 1);
  EXPECT_EQ(m.kv_fetched_blocks, 7);
  EXPECT_EQ(m.kv_fetch_failures, 0);
  EXPECT_EQ(m.prefix_hit_tokens, 28);
  // Computed: the 2 uncached prompt tokens + 5 decode tokens (the 6th token is never computed).
  EXPECT_EQ(rx.n_tokens - before, 2 + 5);

  holder.release_kv_pin(e.pin_id);
  holder.step();
  EXPECT_EQ(holder.metrics().kv_pins, 0);
  EXPECT_EQ(holder.scheduler().block_manager().n_in_use(), 0);
  receiver.scheduler().block_manager().check_invariants();
  EXPECT_EQ(receiver.scheduler().block_manager().n_in_use(), 0);
}

TEST(EngineKv, FailedFetchRecomputesWithTheSameTokens) {
  SlotExecutor hx(64), rx(64);
  rx.holder = &hx;
  rx.fail = true;
  Engine holder(config(), hx), receiver(config(), rx);
  const std::vector<int32_t> p = prompt(30, 2);
  const std::vector<int32_t> want = run(holder, p);
  const KvExport e = export_from(holder, p);
  bool ok = true;
  EXPECT_EQ(run(receiver, p, import_of(e, &ok)), want);
  EXPECT_FALSE(ok);
  EXPECT_EQ(receiver.metrics().kv_fetch_failures, 1);
  EXPECT_EQ(receiver.metrics().prefix_hit_tokens, 0);
  EXPECT_EQ(receiver.scheduler().block_manager().n_in_use(), 0);
  receiver.scheduler().block_manager().check_invariants();
}

TEST(EngineKv, WrongChainHashesAreNotFetched) {
  SlotExecutor hx(64), rx(64);
  rx.holder = &hx;
  Engine holder(config(), hx), receiver(config(), rx);
  const std::vector<int32_t> p = prompt(30, 3);
  const std::vector<int32_t> want = run(holder, p);
  KvExport e = export_from(holder, p);
  e.block_hashes[3] ^= 1;  // blocks 3.. no longer match this prompt: only 0..2 may be fetched
  EXPECT_EQ(run(receiver, p, import_of(e)), want);
  EXPECT_EQ(receiver.metrics().kv_fetched_blocks, 3);
  // Another prompt's blocks: block 0 already mismatches, nothing fetched, a failure.
  SlotExecutor rx2(64);
  rx2.holder = &hx;
  Engine receiver2(config(), rx2);
  const std::vector<int32_t> other = prompt(30, 4);
  EXPECT_EQ(run(receiver2, other, import_of(export_from(holder, p))), run(holder, other));
  EXPECT_EQ(rx2.n_fetches, 0);
  EXPECT_EQ(receiver2.metrics().kv_fetch_failures, 1);
}

TEST(EngineKv, AnErrorFromTheHolderIsCountedAndRecomputed) {
  SlotExecutor rx(64);
  Engine receiver(config(), rx);
  auto im = std::make_shared<KvImport>();
  im->error = "asking the holder failed";
  const std::vector<int32_t> p = prompt(20, 5);
  run(receiver, p, im);
  EXPECT_EQ(receiver.metrics().kv_fetch_failures, 1);
  EXPECT_EQ(receiver.metrics().kv_fetch_requests, 1);
  EXPECT_EQ(rx.n_fetches, 0);
}

TEST(EngineKv, NoFetchThatCouldOutlastTheHoldersPin) {
  SlotExecutor hx(64), rx(64);
  rx.holder = &hx;
  Engine holder(config(), hx), receiver(config(), rx);
  const std::vector<int32_t> p = prompt(30, 7);
  const std::vector<int32_t> want = run(holder, p);
  auto im = import_of(export_from(holder, p));
  im->pinned_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);  // < timeout + 1 s
  EXPECT_EQ(run(receiver, p, im), want);
  EXPECT_EQ(rx.n_fetches, 0);
  EXPECT_EQ(receiver.metrics().kv_fetch_failures, 1);
}

TEST(EngineKv, PinsExpire) {
  SlotExecutor hx(64);
  Engine holder(config(), hx);
  const std::vector<int32_t> p = prompt(20, 6);
  run(holder, p);
  auto f = std::async(std::launch::async, [&] {
    return holder.export_kv(p, std::chrono::milliseconds(1), std::chrono::milliseconds(10000));
  });
  while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) holder.step();
  EXPECT_NE(f.get().pin_id, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  holder.step();
  EXPECT_EQ(holder.metrics().kv_pins, 0);
  EXPECT_EQ(holder.scheduler().block_manager().n_in_use(), 0);
}

TEST(KvFetchPolicy, FetchWhenBytesOverLinkBeatTokensOverPrefill) {
  KvFetchPolicy p;
  p.set_link(1'000'000, 0.001);  // 1 GB/s
  p.observe_prefill(1000, 1.0);  // 1000 tok/s
  EXPECT_DOUBLE_EQ(p.prefill_tokens_per_s(), 1000.0);
  // 2048 tokens: 2.048 s to recompute; 64 MB over 1 GB/s = 0.064 s (+ latency): fetch.
  EXPECT_TRUE(p.should_fetch(64'000'000, 2048));
  // 16 tokens: 0.016 s; 64 MB: 0.066 s: recompute.
  EXPECT_FALSE(p.should_fetch(64'000'000, 16));
  // Small steps do not move the prefill estimate; later ones are averaged in.
  p.observe_prefill(8, 1.0);
  EXPECT_DOUBLE_EQ(p.prefill_tokens_per_s(), 1000.0);
  p.observe_prefill(2000, 1.0);
  EXPECT_NEAR(p.prefill_tokens_per_s(), 0.7 * 1000 + 0.3 * 2000, 1e-9);
}

}  // namespace
}  // namespace tp
