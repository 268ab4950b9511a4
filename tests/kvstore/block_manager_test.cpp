#include "kvstore/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "common/error.h"

namespace tp {
namespace {

using Tokens = std::vector<int32_t>;

// n distinct-looking tokens starting at `base`.
Tokens iota_tokens(int64_t n, int32_t base) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), base);
  return t;
}

Tokens concat(std::initializer_list<Tokens> parts) {
  Tokens out;
  for (const Tokens& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Plans, checks it fits, allocates, commits the whole prompt; returns the cached token count.
int64_t admit_and_compute(BlockManager& bm, int64_t seq_id, const Tokens& prompt) {
  AllocPlan plan = bm.can_allocate(seq_id, prompt);
  EXPECT_TRUE(plan.fits);
  const int64_t cached = bm.allocate(plan);
  bm.check_invariants();
  bm.commit_tokens(seq_id, std::span<const int32_t>(prompt).subspan(size_t(cached)));
  bm.check_invariants();
  return cached;
}

// Everything observable, for "a call that throws leaves the state unchanged".
struct Snapshot {
  int32_t n_free, n_evictable, n_in_use;
  std::vector<int32_t> eviction_order;
  std::map<int64_t, std::vector<int32_t>> tables;
  std::map<int64_t, std::pair<int64_t, int64_t>> slots_computed;
  int64_t n_hit_tokens;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const BlockManager& bm, const std::vector<int64_t>& seq_ids) {
  Snapshot s{bm.n_free(), bm.n_evictable(), bm.n_in_use(), bm.eviction_order(), {}, {}, bm.prefix_stats().n_hit_tokens};
  for (int64_t id : seq_ids) {
    if (!bm.has_seq(id)) continue;
    s.tables[id] = bm.block_table(id);
    s.slots_computed[id] = {bm.n_slots(id), bm.n_computed(id)};
  }
  return s;
}

TEST(BlockManager, AllocateFreeRoundTripLeavesNothingInUse) {
  BlockManager bm(10);  // simulated: a block count is all it needs; block size 16
  bm.check_invariants();
  EXPECT_EQ(bm.block_size(), kDefaultBlockSize);
  EXPECT_EQ(bm.n_free(), 10);
  const Tokens prompt = iota_tokens(40, 100);
  AllocPlan plan = bm.can_allocate(1, prompt);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.n_cached_tokens, 0);
  EXPECT_EQ(plan.n_new_blocks, 3);
  EXPECT_EQ(plan.n_slot_tokens, 40);
  EXPECT_EQ(bm.n_free(), 10);  // planning changes nothing
  EXPECT_EQ(bm.allocate(plan), 0);
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 3);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.3);
  const auto& table = bm.block_table(1);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(bm.slot(1, 0), int64_t(table[0]) * 16);
  EXPECT_EQ(bm.slot(1, 37), int64_t(table[2]) * 16 + 5);
  EXPECT_THROW(bm.slot(1, 40), Error);
  bm.free(1);
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 0);
  EXPECT_EQ(bm.n_free(), 10);  // nothing committed, nothing cached
  EXPECT_EQ(bm.n_seqs(), 0);

  for (int round = 0; round < 5; ++round) {  // with commits: blocks end up evictable, never leaked
    admit_and_compute(bm, 7, concat({iota_tokens(33, 0), {round}}));
    bm.free(7);
    bm.check_invariants();
    EXPECT_EQ(bm.n_in_use(), 0);
    EXPECT_EQ(bm.n_free() + bm.n_evictable(), 10);
  }
}

TEST(BlockManager, SharedPrefixOfThreeBlocksHits48Tokens) {
  BlockManager bm(20);
  const Tokens shared = iota_tokens(48, 1000);
  const Tokens a = concat({shared, iota_tokens(5, 1)});
  const Tokens b = concat({shared, iota_tokens(7, 50)});
  EXPECT_EQ(admit_and_compute(bm, 1, a), 0);
  AllocPlan plan = bm.can_allocate(2, b);
  EXPECT_EQ(plan.n_cached_tokens, 48);
  EXPECT_EQ(plan.n_new_blocks, 1);
  const std::vector<int32_t> a_head(bm.block_table(1).begin(), bm.block_table(1).begin() + 3);
  EXPECT_EQ(plan.hit_blocks, a_head);
  EXPECT_EQ(bm.allocate(plan), 48);
  bm.check_invariants();
  EXPECT_EQ(bm.n_computed(2), 48);
  for (int32_t blk : a_head) EXPECT_EQ(bm.ref_count(blk), 2);
  EXPECT_NE(bm.block_table(2)[3], bm.block_table(1)[3]);
  EXPECT_EQ(bm.n_in_use(), 5);
  EXPECT_EQ(bm.prefix_stats().n_queries, 2);
  EXPECT_EQ(bm.prefix_stats().n_query_tokens, 53 + 55);
  EXPECT_EQ(bm.prefix_stats().n_hit_tokens, 48);
  EXPECT_EQ(bm.match_prefix(b).n_cached_tokens, 48);
  bm.free(1);
  bm.check_invariants();
  for (int32_t blk : a_head) EXPECT_EQ(bm.ref_count(blk), 1);
  bm.free(2);
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 0);
  EXPECT_EQ(bm.n_evictable(), 3);  // the three shared full blocks; both partial tails were never cached
  EXPECT_EQ(bm.n_free(), 17);
}

TEST(BlockManager, PartialLastBlockIsNotShared) {
  BlockManager bm(10);
  const Tokens prompt = iota_tokens(40, 7);  // 2 full blocks + 8 tokens
  admit_and_compute(bm, 1, prompt);
  EXPECT_TRUE(bm.is_cached(bm.block_table(1)[1]));
  EXPECT_FALSE(bm.is_cached(bm.block_table(1)[2]));
  AllocPlan plan = bm.can_allocate(2, prompt);
  EXPECT_EQ(plan.n_cached_tokens, 32);
  bm.allocate(plan);
  bm.check_invariants();
  EXPECT_NE(bm.block_table(2)[2], bm.block_table(1)[2]);
  EXPECT_EQ(bm.ref_count(bm.block_table(1)[2]), 1);
}

TEST(BlockManager, FullyCachedPromptLeavesOneTokenToCompute) {
  BlockManager bm(10);
  const Tokens prompt = iota_tokens(48, 3);
  admit_and_compute(bm, 1, prompt);
  bm.free(1);
  bm.check_invariants();
  EXPECT_EQ(bm.n_evictable(), 3);
  EXPECT_EQ(bm.match_prefix(prompt).n_cached_tokens, 48);  // the raw lookup sees all three
  AllocPlan plan = bm.can_allocate(2, prompt);
  EXPECT_EQ(plan.n_cached_tokens, 32);  // but the last block is recomputed: logits need >= 1 token
  EXPECT_EQ(plan.n_new_blocks, 1);
  EXPECT_EQ(bm.allocate(plan), 32);
  bm.check_invariants();
  bm.free(2);
  AllocPlan longer = bm.can_allocate(3, concat({prompt, {99}}));
  EXPECT_EQ(longer.n_cached_tokens, 48);
  // A one-token prompt never hits; a 16-token one neither.
  EXPECT_EQ(bm.can_allocate(4, iota_tokens(16, 3)).n_cached_tokens, 0);
  EXPECT_EQ(bm.can_allocate(4, iota_tokens(17, 3)).n_cached_tokens, 16);
}

// Every hash is the same: the index degenerates to one bucket and only verification keeps hits right.
BlockManagerOptions constant_hash(std::unique_ptr<EvictionPolicy> eviction = nullptr) {
  BlockManagerOptions o;
  o.hash_fn = [](uint64_t, std::span<const int32_t>) -> uint64_t { return 42; };
  o.eviction = std::move(eviction);
  return o;
}

TEST(BlockManager, HashCollisionsAreRejectedByTokenVerification) {
  BlockManager bm(16, 4, constant_hash());
  const Tokens p = {1, 2, 3, 4}, q = {5, 6, 7, 8};
  admit_and_compute(bm, 1, concat({p, q, {9}}));
  EXPECT_EQ(bm.can_allocate(2, concat({{1, 2, 3, 5}, q, {9}})).n_cached_tokens, 0);
  EXPECT_EQ(bm.can_allocate(2, concat({p, {5, 6, 7, 9}, {9}})).n_cached_tokens, 4);
  EXPECT_EQ(bm.can_allocate(2, concat({p, q, {0}})).n_cached_tokens, 8);
  // Same tokens at the same position after a different block: q's block must not match.
  EXPECT_EQ(bm.can_allocate(2, concat({q, q, {9}})).n_cached_tokens, 0);
  bm.check_invariants();
}

// Most recently released first: lets a test evict a parent while keeping its child.
class MruEvictionPolicy final : public EvictionPolicy {
 public:
  void reset(int32_t) override { order_.clear(); }
  void add(int32_t b) override { order_.push_back(b); }
  void remove(int32_t b) override { order_.erase(std::find(order_.begin(), order_.end(), b)); }
  int32_t pop_victim() override {
    const int32_t b = order_.back();
    order_.pop_back();
    return b;
  }
  int64_t size() const override { return int64_t(order_.size()); }
  bool contains(int32_t b) const override { return std::find(order_.begin(), order_.end(), b) != order_.end(); }
  std::vector<int32_t> victim_order() const override { return {order_.rbegin(), order_.rend()}; }

 private:
  std::vector<int32_t> order_;
};

TEST(BlockManager, CollidingChildOfAnEvictedParentNeverMatches) {
  // A = [P Q z]: blocks P (a0) and Q (a1, child of a0) cached. Evict a0 only, then cache P' in C.
  // D = [P' Q ...]: P' hits C's block; Q's stored tokens and its (colliding) hash both match a1, but
  // a1's K/V was computed after P, not P'. Verification of the parent identity must reject it.
  BlockManager bm(4, 4, constant_hash(std::make_unique<MruEvictionPolicy>()));
  const Tokens p = {1, 2, 3, 4}, q = {5, 6, 7, 8}, p2 = {11, 12, 13, 14}, y = {21, 22, 23, 24};
  admit_and_compute(bm, 1, concat({p, q, {9}}));
  const int32_t a0 = bm.block_table(1)[0], a1 = bm.block_table(1)[1];
  bm.free(1);
  bm.check_invariants();
  EXPECT_EQ(bm.eviction_order(), (std::vector<int32_t>{a0, a1}));  // MRU: a0 released last
  EXPECT_EQ(admit_and_compute(bm, 3, concat({p2, y, {9}})), 0);  // takes 2 free blocks, evicts a0
  EXPECT_FALSE(bm.is_cached(a0));
  EXPECT_TRUE(bm.is_cached(a1));
  const PrefixMatch m = bm.match_prefix(concat({p2, q, {9}}));
  EXPECT_EQ(m.n_cached_tokens, 4);
  EXPECT_EQ(m.blocks, (std::vector<int32_t>{bm.block_table(3)[0]}));
  EXPECT_EQ(bm.match_prefix(concat({p, q})).n_cached_tokens, 0);  // a1 is an orphan now
  bm.check_invariants();
}

TEST(BlockManager, LruEvictsLeastRecentlyReleasedAndRehitLeavesLru) {
  BlockManager bm(6, 4);
  const Tokens a = concat({iota_tokens(8, 100), {1}}), b = concat({iota_tokens(8, 200), {2}});
  admit_and_compute(bm, 1, a);
  admit_and_compute(bm, 2, b);
  const auto ta = bm.block_table(1), tb = bm.block_table(2);
  bm.free(1);
  bm.free(2);
  bm.check_invariants();
  // Tail first within a sequence, sequences in release order.
  EXPECT_EQ(bm.eviction_order(), (std::vector<int32_t>{ta[1], ta[0], tb[1], tb[0]}));
  EXPECT_EQ(bm.n_free(), 2);
  // A re-hit on b's prefix takes its blocks out of the LRU.
  AllocPlan hit = bm.can_allocate(3, concat({iota_tokens(8, 200), {7}}));
  EXPECT_EQ(hit.n_cached_tokens, 8);
  EXPECT_EQ(hit.n_available, 4);  // 2 free + 2 evictable not hit here
  bm.allocate(hit);
  bm.check_invariants();
  EXPECT_EQ(bm.eviction_order(), (std::vector<int32_t>{ta[1], ta[0]}));
  // 1 block came from the free list; the next 2 evict a's tail, then a's head.
  AllocPlan big = bm.can_allocate(4, iota_tokens(9, 500));
  EXPECT_TRUE(big.fits);
  bm.allocate(big);
  bm.check_invariants();
  EXPECT_EQ(bm.n_evictable(), 0);
  EXPECT_FALSE(bm.is_cached(ta[0]));
  EXPECT_FALSE(bm.is_cached(ta[1]));
  EXPECT_EQ(bm.match_prefix(a).n_cached_tokens, 0);
  // Released again, b's blocks go to the most recent end.
  bm.free(3);
  bm.check_invariants();
  EXPECT_EQ(bm.eviction_order(), (std::vector<int32_t>{tb[1], tb[0]}));
}

TEST(BlockManager, PlanThatDoesNotFitChangesNothing) {
  BlockManager bm(4, 4);
  admit_and_compute(bm, 1, iota_tokens(9, 0));  // 3 blocks
  const Snapshot before = snapshot(bm, {1, 2});
  AllocPlan plan = bm.can_allocate(2, iota_tokens(9, 50));
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.n_new_blocks, 3);
  EXPECT_EQ(plan.n_available, 1);
  EXPECT_THROW(bm.allocate(plan), Error);
  EXPECT_FALSE(bm.can_append(1, 8));  // 9 -> 17 slots needs 2 more blocks
  EXPECT_THROW(bm.append_slots(1, 8), Error);
  bm.check_invariants();
  EXPECT_EQ(snapshot(bm, {1, 2}), before);
  EXPECT_TRUE(bm.can_append(1, 7));
}

TEST(BlockManager, StalePlansAreRejectedWithoutChanges) {
  BlockManager bm(4, 4);
  const Tokens a = concat({iota_tokens(4, 0), {1}});
  admit_and_compute(bm, 1, a);
  bm.free(1);
  AllocPlan hit = bm.can_allocate(2, concat({iota_tokens(4, 0), {2}}));  // hits the evictable block
  ASSERT_EQ(hit.n_cached_tokens, 4);
  AllocPlan other = bm.can_allocate(3, iota_tokens(16, 100));  // 4 blocks: evicts the cached one
  ASSERT_TRUE(other.fits);
  bm.allocate(other);
  bm.check_invariants();
  const Snapshot before = snapshot(bm, {2, 3});
  EXPECT_THROW(bm.allocate(hit), Error);
  EXPECT_THROW(bm.allocate(other), Error);  // seq 3 exists: double allocate
  EXPECT_THROW(bm.can_allocate(3, a), Error);
  bm.check_invariants();
  EXPECT_EQ(snapshot(bm, {2, 3}), before);
}

TEST(BlockManager, ForkSharesBlocksAndAppendCopiesOnWrite) {
  BlockManager bm(8, 4);
  const Tokens prompt = iota_tokens(6, 10);  // block 0 full, block 1 holds 2 tokens
  admit_and_compute(bm, 1, prompt);
  bm.fork(1, 2);
  bm.check_invariants();
  const auto t = bm.block_table(1);
  EXPECT_EQ(bm.block_table(2), t);
  EXPECT_EQ(bm.ref_count(t[0]), 2);
  EXPECT_EQ(bm.ref_count(t[1]), 2);
  EXPECT_EQ(bm.n_blocks_to_append(2, 1), 1);
  AppendResult r = bm.append_slots(2, 1);  // would write into the shared partial block
  bm.check_invariants();
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, t[1]);
  EXPECT_EQ(r.copies[0].dst, bm.block_table(2)[1]);
  EXPECT_NE(bm.block_table(2)[1], t[1]);
  EXPECT_EQ(bm.block_table(2)[0], t[0]);  // the full block stays shared
  EXPECT_EQ(bm.ref_count(t[1]), 1);
  r = bm.append_slots(1, 1);  // the parent now owns its block alone: no copy
  EXPECT_TRUE(r.copies.empty());
  EXPECT_EQ(r.n_new_blocks, 0);
  bm.commit_tokens(1, Tokens{77});
  bm.commit_tokens(2, Tokens{88});
  bm.check_invariants();
  // Fork at a block boundary: the next token goes into a new block, nothing to copy.
  bm.append_slots(2, 1);
  bm.commit_tokens(2, Tokens{1});
  ASSERT_EQ(bm.n_slots(2), 8);
  bm.fork(2, 3);
  r = bm.append_slots(3, 1);
  EXPECT_TRUE(r.copies.empty());
  EXPECT_EQ(r.n_new_blocks, 1);
  bm.check_invariants();
  EXPECT_THROW(bm.fork(3, 4), Error);  // child 3 has an uncommitted slot
  EXPECT_THROW(bm.fork(1, 2), Error);  // child exists
  EXPECT_THROW(bm.fork(9, 10), Error);  // unknown parent
  for (int64_t id : {1, 2, 3}) bm.free(id);
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 0);
}

TEST(BlockManager, ChunkedPrefillAndDecodeAcrossBlockBoundaries) {
  BlockManager bm(10, 4);
  const Tokens prompt = iota_tokens(10, 0);
  AllocPlan plan = bm.can_allocate(1, prompt, /*max_uncached_tokens=*/3);
  EXPECT_EQ(plan.n_slot_tokens, 3);
  EXPECT_EQ(plan.n_new_blocks, 1);
  bm.allocate(plan);
  bm.commit_tokens(1, std::span(prompt).subspan(0, 3));
  bm.check_invariants();
  EXPECT_THROW(bm.commit_tokens(1, Tokens{3}), Error);  // no slot yet
  EXPECT_EQ(bm.append_slots(1, 5).n_new_blocks, 1);     // [3, 8) -> crosses into block 1
  EXPECT_EQ(bm.block_table(1).size(), 2u);
  bm.commit_tokens(1, std::span(prompt).subspan(3, 5));
  bm.check_invariants();
  EXPECT_TRUE(bm.is_cached(bm.block_table(1)[0]));
  EXPECT_TRUE(bm.is_cached(bm.block_table(1)[1]));
  EXPECT_EQ(bm.append_slots(1, 9).n_new_blocks, 3);  // rest of prompt + 7 decode slots -> 17 slots, 5 blocks
  bm.check_invariants();
  bm.commit_tokens(1, std::span(prompt).subspan(8, 2));
  for (int32_t tok = 0; tok < 7; ++tok) {
    bm.commit_tokens(1, Tokens{500 + tok});
    bm.check_invariants();
  }
  EXPECT_EQ(bm.n_computed(1), 17);
  for (int64_t pos = 0; pos < 17; ++pos)
    EXPECT_EQ(bm.slot(1, pos), int64_t(bm.block_table(1)[size_t(pos / 4)]) * 4 + pos % 4);
  // The decoded tokens are cached too: prompt + 6 decoded tokens = 16 = 4 full blocks.
  const Tokens continued = concat({prompt, {500, 501, 502, 503, 504, 505}, {0}});
  EXPECT_EQ(bm.match_prefix(continued).n_cached_tokens, 16);
}

TEST(BlockManager, ConcurrentIdenticalPrefixesAreAliasedAndKeepChildrenReachable) {
  BlockManager bm(10, 4);
  const Tokens prompt = iota_tokens(9, 40);
  AllocPlan pa = bm.can_allocate(1, prompt), pb = bm.can_allocate(2, prompt);
  bm.allocate(pa);
  bm.allocate(pb);  // both planned before either computed: no hits, separate blocks
  bm.commit_tokens(1, prompt);
  bm.commit_tokens(2, prompt);
  bm.check_invariants();  // checks that aliases hold identical contents
  EXPECT_TRUE(bm.is_cached(bm.block_table(1)[1]));
  EXPECT_TRUE(bm.is_cached(bm.block_table(2)[1]));
  bm.free(1);
  EXPECT_EQ(bm.evict_all_cached(), 2);
  bm.check_invariants();
  AllocPlan pc = bm.can_allocate(3, concat({iota_tokens(8, 40), {1}}));
  EXPECT_EQ(pc.n_cached_tokens, 8);
  EXPECT_EQ(pc.hit_blocks, (std::vector<int32_t>{bm.block_table(2)[0], bm.block_table(2)[1]}));
}

TEST(BlockManager, PinPrefixHoldsCachedBlocksUntilFreed) {
  BlockManager bm(8, 4);
  const std::vector<int32_t> p{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  bm.allocate(bm.can_allocate(1, p));
  bm.commit_tokens(1, p);
  bm.free(1);  // blocks 0, 1 of the prompt cached and evictable
  EXPECT_EQ(bm.n_evictable(), 2);
  const PrefixMatch m = bm.pin_prefix(100, p);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(bm.n_evictable(), 0);
  EXPECT_EQ(bm.ref_count(m.blocks[0]), 1);
  EXPECT_EQ(bm.evict_all_cached(), 0);  // pinned: nothing to evict
  bm.check_invariants();
  const PrefixStats before = bm.prefix_stats();
  EXPECT_EQ(bm.pin_prefix(101, std::vector<int32_t>{9, 9, 9, 9}).blocks.size(), 0u);  // nothing cached: no seq
  EXPECT_FALSE(bm.has_seq(101));
  EXPECT_EQ(bm.prefix_stats().n_queries, before.n_queries);
  EXPECT_THROW(bm.pin_prefix(100, p), Error);
  bm.free(100);
  EXPECT_EQ(bm.n_evictable(), 2);
  bm.check_invariants();
}

// ---- holds: a waiting request's cached prefix under KV pressure ------------------------------------
// A pool of 10 blocks of 4: W (the prefix a waiting request matched at arrival) and O (another conversation) are
// cached and evictable, W released first, so plain LRU evicts W's tail first: w2 w1 w0 o2 o1 o0. Holders take
// holds on W (then `released` of them are dropped), a running sequence takes `pressure` blocks (4 free, the rest
// evicted), the pressure passes, and the waiting request is admitted. Afterwards nothing is held or in use and
// the free count returns to the start.
struct HoldCase {
  const char* name;
  int holders;             // holds taken on W
  int released;            // of which dropped before the pressure
  int32_t pressure;        // blocks the running sequence takes
  int32_t want_w_blocks;   // W's blocks still cached after the pressure (= the admission's hit blocks)
  int32_t want_o_blocks;   // O's blocks still cached
  int64_t want_held_evicted;
};

class BlockManagerHolds : public ::testing::TestWithParam<HoldCase> {};

TEST_P(BlockManagerHolds, WaitingPrefixSurvivesPressure) {
  const HoldCase& c = GetParam();
  const int32_t n_blocks = 10;
  BlockManager bm(n_blocks, 4);
  const Tokens w = iota_tokens(12, 100), o = iota_tokens(12, 200);
  const Tokens waiting = concat({w, {7, 8, 9}});  // W + this turn's new tokens
  admit_and_compute(bm, 1, concat({w, {1}}));
  admit_and_compute(bm, 2, concat({o, {2}}));
  const auto tw = bm.block_table(1), to = bm.block_table(2);
  bm.free(1);
  bm.free(2);
  ASSERT_EQ(bm.eviction_order(), (std::vector<int32_t>{tw[2], tw[1], tw[0], to[2], to[1], to[0]}));
  ASSERT_EQ(bm.n_free(), 4);

  for (int h = 0; h < c.holders; ++h) EXPECT_EQ(bm.hold_prefix(100 + h, waiting), 3);
  bm.check_invariants();
  EXPECT_EQ(bm.n_holds(), c.holders);
  EXPECT_EQ(bm.n_held_blocks(), c.holders > 0 ? 3 : 0);
  if (c.holders > 0) {  // held blocks go after every other evictable one, their head last
    EXPECT_EQ(bm.eviction_order(), (std::vector<int32_t>{to[2], to[1], to[0], tw[2], tw[1], tw[0]}));
  }
  EXPECT_EQ(bm.n_available(), 10);  // a hold takes nothing
  for (int h = 0; h < c.released; ++h) bm.release_hold(100 + h);
  bm.check_invariants();

  const AllocPlan run = bm.can_allocate(3, iota_tokens(4 * int64_t(c.pressure), 5000));
  ASSERT_TRUE(run.fits);
  bm.allocate(run);
  bm.check_invariants();
  EXPECT_EQ(bm.match_prefix(waiting).n_cached_tokens, 4 * c.want_w_blocks);
  EXPECT_EQ(bm.match_prefix(concat({o, {3}})).n_cached_tokens, 4 * c.want_o_blocks);
  EXPECT_EQ(bm.n_held_evicted(), c.want_held_evicted);
  bm.free(3);  // the pressure passes
  bm.check_invariants();

  const AllocPlan admit = bm.can_allocate(100, waiting);
  ASSERT_TRUE(admit.fits);
  EXPECT_EQ(bm.allocate(admit), 4 * c.want_w_blocks);  // the hit: recomputed = 15 - this
  for (int h = 0; h < c.holders; ++h) bm.release_hold(100 + h);
  bm.release_hold(12345);  // no hold: a no-op
  bm.check_invariants();
  EXPECT_EQ(bm.n_holds(), 0);
  EXPECT_EQ(bm.n_held_blocks(), 0);
  bm.commit_tokens(100, std::span<const int32_t>(waiting).subspan(size_t(4 * c.want_w_blocks)));
  bm.free(100);
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 0);
  EXPECT_EQ(bm.n_free() + bm.n_evictable(), n_blocks);
  bm.evict_all_cached();
  bm.check_invariants();
  EXPECT_EQ(bm.n_free(), n_blocks);  // no block leaked
}

INSTANTIATE_TEST_SUITE_P(
    Rows, BlockManagerHolds,
    ::testing::Values(
        // 4 free blocks cover the pressure: nothing is evicted.
        HoldCase{"no_pressure", 1, 0, 4, 3, 3, 0},
        // Plain LRU (the behaviour before holds): W, released first, loses its tail.
        HoldCase{"no_hold_evicts_waiting_prefix", 0, 0, 6, 1, 3, 0},
        HoldCase{"hold_evicts_others_first", 1, 0, 6, 3, 1, 0},
        // Two waiting requests on W; one is admitted or aborted before the pressure: the other still holds it.
        HoldCase{"shared_hold_survives_one_release", 2, 1, 6, 3, 1, 0},
        // A released hold leaves W at the most recent end of the plain LRU (a touch): O goes first.
        HoldCase{"released_hold_is_a_touch", 1, 1, 6, 3, 1, 0},
        // Nothing else left: held blocks are evicted like any other, tail first; the hold never blocks.
        HoldCase{"hold_yields_when_nothing_else_is_left", 1, 0, 8, 2, 0, 1},
        HoldCase{"everything_evicted", 2, 0, 10, 0, 0, 3}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(BlockManager, HoldFollowsTheCacheNotStaleBlockIds) {
  // A held block evicted and cached again for other tokens: the old hold neither protects nor counts it down.
  BlockManager bm(3, 4);
  const Tokens w = concat({iota_tokens(4, 100), {1}});
  admit_and_compute(bm, 1, w);
  const int32_t b = bm.block_table(1)[0];
  bm.free(1);
  EXPECT_EQ(bm.hold_prefix(7, w), 1);
  const Tokens other = iota_tokens(12, 300);
  admit_and_compute(bm, 2, other);  // 3 blocks: the 2 free ones, then evicts b for positions 8..11
  ASSERT_EQ(bm.block_table(2)[2], b);
  EXPECT_TRUE(bm.is_cached(b));  // cached again, for 308..311
  EXPECT_FALSE(bm.is_held(b));
  EXPECT_EQ(bm.n_held_evicted(), 1);
  bm.check_invariants();
  bm.free(2);
  EXPECT_EQ(bm.hold_prefix(8, concat({other, {5}})), 3);
  EXPECT_TRUE(bm.is_held(b));
  bm.check_invariants();
  bm.release_hold(7);  // stale: counts nothing down
  bm.check_invariants();
  EXPECT_EQ(bm.n_held_blocks(), 3);
  EXPECT_TRUE(bm.is_held(b));
  bm.release_hold(8);
  bm.check_invariants();
  EXPECT_EQ(bm.n_held_blocks(), 0);
  // A hold with nothing cached holds nothing; a hold with caching off neither.
  EXPECT_EQ(bm.hold_prefix(9, iota_tokens(9, 900)), 0);
  EXPECT_EQ(bm.n_holds(), 0);
}

TEST(BlockManager, PrefixCachingOff) {
  BlockManagerOptions o;
  o.enable_prefix_caching = false;
  BlockManager bm(6, 4, std::move(o));
  const Tokens prompt = iota_tokens(9, 0);
  admit_and_compute(bm, 1, prompt);
  EXPECT_EQ(bm.can_allocate(2, prompt).n_cached_tokens, 0);
  bm.free(1);
  bm.check_invariants();
  EXPECT_EQ(bm.n_free(), 6);
  EXPECT_EQ(bm.n_evictable(), 0);
}

TEST(BlockManager, ErrorsNameTheProblem) {
  EXPECT_THROW(BlockManager(-1), Error);
  EXPECT_THROW(BlockManager(4, 0), Error);
  BlockManager empty(0);
  empty.check_invariants();
  EXPECT_EQ(empty.usage(), 0.0);
  EXPECT_FALSE(empty.can_allocate(1, Tokens{1}).fits);

  BlockManager bm(4, 4);
  try {
    bm.free(42);
    FAIL() << "free of an unknown seq must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq 42"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bm.block_table(1), Error);
  EXPECT_THROW(bm.append_slots(1, 1), Error);
  EXPECT_THROW(bm.can_append(1, 1), Error);
  EXPECT_THROW(bm.commit_tokens(1, Tokens{1}), Error);
  EXPECT_THROW(bm.can_allocate(1, Tokens{}), Error);
  EXPECT_THROW(bm.can_allocate(1, Tokens{1}, 0), Error);
  EXPECT_THROW(bm.ref_count(4), Error);
  admit_and_compute(bm, 1, Tokens{1, 2});
  EXPECT_THROW(bm.append_slots(1, -1), Error);
  EXPECT_THROW(bm.can_allocate(1, Tokens{1}), Error);
  bm.free(1);
  EXPECT_THROW(bm.free(1), Error);  // double free
  bm.check_invariants();
}

// ---- randomized: many sequences, random ops, checked against a model of the K/V contents ----------
// The model plays the worker: a committed position p of a sequence writes fingerprint(tokens[0..p])
// into its slot, CoW copies blocks. After every op, every computed position of every sequence must
// read back its own fingerprint — so a wrong prefix hit, a missing CoW or a block shared while written
// shows up as a mismatch. A weak hash (3 bits) makes collisions the common case.
struct StressParam {
  int32_t block_size;
  bool weak_hash;
  friend void PrintTo(const StressParam& p, std::ostream* os) {
    *os << "block_size " << p.block_size << (p.weak_hash ? ", 3-bit hash" : "");
  }
};

class BlockManagerStress : public ::testing::TestWithParam<StressParam> {};

TEST_P(BlockManagerStress, RandomOpsKeepInvariantsAndContents) {
  const auto [bs, weak] = GetParam();
  const int32_t n_blocks = 48;
  BlockManagerOptions o;
  if (weak) o.hash_fn = [](uint64_t h, std::span<const int32_t> t) { return default_block_hash(h, t) & 7; };
  BlockManager bm(n_blocks, bs, std::move(o));
  std::mt19937_64 rng(1234 + uint64_t(bs) * 2 + (weak ? 1 : 0));
  auto rnd = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };

  std::vector<Tokens> bases;
  for (int i = 0; i < 4; ++i) {
    Tokens t;
    for (int j = 0; j < 64; ++j) t.push_back(int32_t(rnd(0, 2)));  // tiny vocabulary: equal blocks recur
    bases.push_back(t);
  }
  struct Model {
    Tokens tokens;                  // prompt, then generated tokens (known before their slot is committed)
    std::vector<uint64_t> fp;       // fp[p] = fingerprint of tokens[0..p]
  };
  std::map<int64_t, Model> model;
  std::vector<uint64_t> kv(size_t(n_blocks) * size_t(bs), 0);  // the simulated pool
  auto fingerprint = [](uint64_t prev, int32_t tok) { return default_block_hash(prev, std::span(&tok, 1)) | 1; };
  auto extend_fp = [&](Model& m) {
    while (m.fp.size() < m.tokens.size())
      m.fp.push_back(fingerprint(m.fp.empty() ? 0 : m.fp.back(), m.tokens[m.fp.size()]));
  };
  auto check_contents = [&] {
    for (auto& [id, m] : model) {
      ASSERT_EQ(bm.n_computed(id) <= int64_t(m.tokens.size()), true);
      for (int64_t p = 0; p < bm.n_computed(id); ++p)
        ASSERT_EQ(kv[size_t(bm.slot(id, p))], m.fp[size_t(p)]) << "seq " << id << " position " << p;
    }
  };
  auto ids = [&] {
    std::vector<int64_t> out;
    for (auto& [id, m] : model) out.push_back(id);
    return out;
  };
  auto pick = [&]() -> int64_t {
    auto it = model.begin();
    std::advance(it, rnd(0, int64_t(model.size()) - 1));
    return it->first;
  };

  std::mt19937_64 hold_rng(99 + uint64_t(bs));
  int64_t next_id = 0, n_allocs = 0, n_rejected = 0, n_copies = 0, n_hit_tokens = 0;
  for (int step = 0; step < 4000; ++step) {
    const int64_t op = model.empty() ? 0 : rnd(0, 9);
    if (op <= 2 && model.size() < 14) {  // admit
      Model m;
      const Tokens& base = bases[size_t(rnd(0, 3))];
      m.tokens.assign(base.begin(), base.begin() + rnd(1, 64));
      for (int64_t i = rnd(0, 12); i > 0; --i) m.tokens.push_back(int32_t(rnd(0, 2)));
      extend_fp(m);
      const int64_t id = next_id++;
      const int64_t chunk = rnd(0, 1) ? kAllTokens : rnd(1, 24);
      const Snapshot before = snapshot(bm, ids());
      AllocPlan plan = bm.can_allocate(id, m.tokens, chunk);
      ASSERT_LT(plan.n_cached_tokens, int64_t(m.tokens.size()));
      if (!plan.fits) {
        ++n_rejected;
        ASSERT_THROW(bm.allocate(plan), Error);
        ASSERT_EQ(snapshot(bm, ids()), before);
        continue;
      }
      const int64_t cached = bm.allocate(plan);
      ++n_allocs;
      n_hit_tokens += cached;
      model.emplace(id, std::move(m));
    } else if (op <= 5) {  // commit some of the slotted positions
      const int64_t id = pick();
      Model& m = model[id];
      const int64_t start = bm.n_computed(id), n = rnd(0, bm.n_slots(id) - start);
      for (int64_t p = start; p < start + n; ++p) {
        const int32_t blk = bm.block_table(id)[size_t(p / bs)];
        ASSERT_EQ(bm.ref_count(blk), 1) << "writing into a shared block";
        kv[size_t(bm.slot(id, p))] = m.fp[size_t(p)];
      }
      bm.commit_tokens(id, std::span<const int32_t>(m.tokens).subspan(size_t(start), size_t(n)));
    } else if (op <= 7) {  // more slots: rest of the prompt chunk-wise, then decode tokens
      const int64_t id = pick();
      Model& m = model[id];
      const int64_t n = rnd(1, 2 * bs);
      if (!bm.can_append(id, n)) {
        const Snapshot before = snapshot(bm, ids());
        ASSERT_THROW(bm.append_slots(id, n), Error);
        ASSERT_EQ(snapshot(bm, ids()), before);
        continue;
      }
      AppendResult r = bm.append_slots(id, n);
      for (const BlockCopy& c : r.copies) {
        std::copy_n(kv.begin() + ptrdiff_t(c.src) * bs, bs, kv.begin() + ptrdiff_t(c.dst) * bs);
        ++n_copies;
      }
      while (int64_t(m.tokens.size()) < bm.n_slots(id)) m.tokens.push_back(int32_t(rnd(0, 2)));
      extend_fp(m);
    } else if (op == 8) {  // fork a sequence that is between steps
      const int64_t id = pick();
      if (bm.n_computed(id) != bm.n_slots(id) || model.size() >= 14) continue;
      const int64_t child = next_id++;
      bm.fork(id, child);
      Model m = model[id];
      m.tokens.resize(size_t(bm.n_slots(id)));  // the child samples its own continuation
      m.fp.resize(m.tokens.size());
      model.emplace(child, std::move(m));
    } else {
      const int64_t id = pick();
      bm.free(id);
      model.erase(id);
    }
    // Holds (waiting requests) come and go on their own random stream: they must never change what fits or
    // what is computed, only the eviction order.
    if (const int64_t h = std::uniform_int_distribution<int64_t>(0, 15)(hold_rng); h < 4) {
      const Tokens& base = bases[size_t(h)];
      bm.hold_prefix(std::uniform_int_distribution<int64_t>(0, 7)(hold_rng), base,
                     std::uniform_int_distribution<int64_t>(-1, 16)(hold_rng));
    } else if (h < 7) {
      bm.release_hold(std::uniform_int_distribution<int64_t>(0, 7)(hold_rng));
    }
    bm.check_invariants();
    check_contents();
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(n_allocs, 100);
  EXPECT_GT(n_rejected, 0);
  if (bs > 1) {
    EXPECT_GT(n_copies, 0);  // with 1-token blocks no block is ever partial
  }
  EXPECT_GT(n_hit_tokens, 0);
  EXPECT_EQ(bm.prefix_stats().n_hit_tokens, n_hit_tokens);
  EXPECT_GT(bm.n_holds(), 0);
  for (int64_t id : ids()) bm.free(id);
  for (int64_t h = 0; h < 8; ++h) bm.release_hold(h);
  bm.check_invariants();
  EXPECT_EQ(bm.n_held_blocks(), 0);
  EXPECT_EQ(bm.n_in_use(), 0);
  EXPECT_EQ(bm.n_free() + bm.n_evictable(), n_blocks);
  bm.evict_all_cached();
  bm.check_invariants();
  EXPECT_EQ(bm.n_free(), n_blocks);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockManagerStress,
                         ::testing::Values(StressParam{1, false}, StressParam{4, false}, StressParam{4, true},
                                           StressParam{16, false}, StressParam{16, true}),
                         [](const auto& info) {
                           return "bs" + std::to_string(info.param.block_size) + (info.param.weak_hash ? "_weak" : "");
                         });

}  // namespace
}  // namespace tp
