// KV events recorded by the BlockManager (vLLM's shape, kvstore/kv_events.h): a prompt's full blocks are
// stored with their chained hashes, parents and tokens; a hit stores nothing; eviction removes; a hash held by
// two aliased blocks is removed only when the last one goes; nothing is recorded unless asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <span>
#include <vector>

#include "kvstore/block_manager.h"

namespace tp {
namespace {

using Tokens = std::vector<int32_t>;

Tokens range(int32_t base, int32_t n) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), base);
  return t;
}

void admit_and_compute(BlockManager& bm, int64_t seq_id, const Tokens& prompt) {
  AllocPlan plan = bm.can_allocate(seq_id, prompt);
  ASSERT_TRUE(plan.fits);
  const int64_t cached = bm.allocate(plan);
  bm.commit_tokens(seq_id, std::span<const int32_t>(prompt).subspan(size_t(cached)));
  bm.check_invariants();
}

BlockManagerOptions recording() {
  BlockManagerOptions o;
  o.record_events = true;
  return o;
}

TEST(KvEvents, StoredBlocksCarryChainParentAndTokens) {
  BlockManager bm(8, 4, recording());
  const Tokens p = range(100, 10);  // 2 full blocks + 2 tokens
  admit_and_compute(bm, 1, p);
  const std::vector<KvEvent> ev = bm.take_events();
  ASSERT_EQ(ev.size(), 2u);
  const uint64_t h0 = default_block_hash(kRootHash, std::span<const int32_t>(p).subspan(0, 4));
  const uint64_t h1 = default_block_hash(h0, std::span<const int32_t>(p).subspan(4, 4));
  EXPECT_EQ(ev[0].kind, KvEventKind::BlockStored);
  EXPECT_EQ(ev[0].block_hashes, std::vector<uint64_t>{h0});
  EXPECT_FALSE(ev[0].parent_block_hash.has_value());
  EXPECT_EQ(ev[0].token_ids, range(100, 4));
  EXPECT_EQ(ev[0].block_size, 4);
  EXPECT_FALSE(ev[0].lora_id.has_value());
  EXPECT_EQ(ev[0].medium, "CPU");
  EXPECT_EQ(ev[1].block_hashes, std::vector<uint64_t>{h1});
  EXPECT_EQ(ev[1].parent_block_hash, h0);
  EXPECT_EQ(ev[1].token_ids, range(104, 4));
  EXPECT_TRUE(bm.take_events().empty());  // taken once

  // The same prefix again: a hit, nothing new stored.
  admit_and_compute(bm, 2, p);
  EXPECT_TRUE(bm.take_events().empty());
  bm.free(1);
  bm.free(2);
  // Every cached block evicted: each hash removed once.
  EXPECT_EQ(bm.evict_all_cached(), 2);
  const std::vector<KvEvent> rm = bm.take_events();
  ASSERT_EQ(rm.size(), 2u);
  std::vector<uint64_t> removed;
  for (const KvEvent& e : rm) {
    EXPECT_EQ(e.kind, KvEventKind::BlockRemoved);
    removed.insert(removed.end(), e.block_hashes.begin(), e.block_hashes.end());
  }
  std::sort(removed.begin(), removed.end());
  std::vector<uint64_t> want{h0, h1};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed, want);
}

TEST(KvEvents, EvictionUnderPressureRemovesTheVictim) {
  BlockManager bm(2, 4, recording());
  admit_and_compute(bm, 1, range(0, 4));
  bm.free(1);
  const std::vector<KvEvent> stored = bm.take_events();
  ASSERT_EQ(stored.size(), 1u);
  // Two new full blocks need both blocks: the cached one is evicted.
  admit_and_compute(bm, 2, range(50, 8));
  const std::vector<KvEvent> ev = bm.take_events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, KvEventKind::BlockRemoved);
  EXPECT_EQ(ev[0].block_hashes, stored[0].block_hashes);
  EXPECT_EQ(ev[1].kind, KvEventKind::BlockStored);
  EXPECT_EQ(ev[2].kind, KvEventKind::BlockStored);
}

TEST(KvEvents, NothingRecordedUnlessAsked) {
  BlockManager bm(8, 4);
  admit_and_compute(bm, 1, range(0, 8));
  bm.free(1);
  bm.evict_all_cached();
  EXPECT_TRUE(bm.take_events().empty());
}

}  // namespace
}  // namespace tp
