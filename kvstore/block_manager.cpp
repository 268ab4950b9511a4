#include "kvstore/block_manager.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "common/error.h"

namespace tp {
namespace {

std::string seq_str(int64_t seq_id) { return "seq " + std::to_string(seq_id); }

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(std::string("BlockManager::") + op + ": " + what);
}

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent_hash ^ (uint64_t(tokens.size()) * 0x9e3779b97f4a7c15ULL));
  for (int32_t t : tokens) h = mix64(h ^ (uint64_t(uint32_t(t)) + 0x632be59bd9b4e019ULL));
  return h;
}

// ---- LruEvictionPolicy ---------------------------------------------------------------------------

void LruEvictionPolicy::reset(int32_t n_blocks) {
  prev_.assign(size_t(n_blocks) + 2, 0);
  next_.assign(size_t(n_blocks) + 2, 0);
  for (const bool prot : {false, true}) prev_[size_t(sentinel(prot))] = next_[size_t(sentinel(prot))] = sentinel(prot);
  member_.assign(size_t(n_blocks), 0);
  protected_.assign(size_t(n_blocks), 0);
  size_ = 0;
}

bool LruEvictionPolicy::contains(int32_t block) const {
  return block >= 0 && size_t(block) < member_.size() && member_[size_t(block)] != 0;
}

void LruEvictionPolicy::link_last(int32_t block) {
  const int32_t s = sentinel(protected_[size_t(block)] != 0), last = prev_[size_t(s)];
  prev_[size_t(block)] = last;
  next_[size_t(block)] = s;
  next_[size_t(last)] = block;
  prev_[size_t(s)] = block;
}

void LruEvictionPolicy::unlink(int32_t block) {
  const int32_t p = prev_[size_t(block)], n = next_[size_t(block)];
  next_[size_t(p)] = n;
  prev_[size_t(n)] = p;
}

void LruEvictionPolicy::add(int32_t block) {
  if (block < 0 || size_t(block) >= member_.size() || member_[size_t(block)]) fail("lru.add", "bad block");
  link_last(block);
  member_[size_t(block)] = 1;
  ++size_;
}

void LruEvictionPolicy::remove(int32_t block) {
  if (!contains(block)) fail("lru.remove", "block " + std::to_string(block) + " is not a member");
  unlink(block);
  member_[size_t(block)] = 0;
  --size_;
}

int32_t LruEvictionPolicy::pop_victim() {
  if (size_ == 0) fail("lru.pop_victim", "empty");
  const int32_t plain = sentinel(false);
  const int32_t victim = next_[size_t(plain)] != plain ? next_[size_t(plain)] : next_[size_t(sentinel(true))];
  remove(victim);
  return victim;
}

std::vector<int32_t> LruEvictionPolicy::victim_order() const {
  std::vector<int32_t> out;
  out.reserve(size_t(size_));
  for (const bool prot : {false, true})
    for (int32_t b = next_[size_t(sentinel(prot))]; b != sentinel(prot); b = next_[size_t(b)]) out.push_back(b);
  return out;
}

void LruEvictionPolicy::set_protected(int32_t block, bool on) {
  if (block < 0 || size_t(block) >= protected_.size()) fail("lru.set_protected", "bad block");
  if ((protected_[size_t(block)] != 0) == on) return;
  const bool member = member_[size_t(block)] != 0;
  if (member) unlink(block);
  protected_[size_t(block)] = on ? 1 : 0;
  if (member) link_last(block);
}

// ---- BlockManager: helpers -----------------------------------------------------------------------

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, BlockManagerOptions options)
    : block_size_(block_size),
      prefix_caching_(options.enable_prefix_caching),
      hash_fn_(options.hash_fn ? std::move(options.hash_fn) : BlockHashFn(default_block_hash)),
      eviction_(options.eviction ? std::move(options.eviction) : std::make_unique<LruEvictionPolicy>()) {
  record_events_ = options.record_events;
  events_medium_ = options.events_medium;
  if (n_blocks < 0) fail("BlockManager", "n_blocks must be >= 0, got " + std::to_string(n_blocks));
  if (block_size <= 0) fail("BlockManager", "block_size must be > 0, got " + std::to_string(block_size));
  blocks_.resize(size_t(n_blocks));
  block_tokens_.assign(size_t(n_blocks) * size_t(block_size), 0);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is taken first
  eviction_->reset(n_blocks);
}

const BlockManager::SeqState& BlockManager::seq(int64_t seq_id, const char* op) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) fail(op, "unknown " + seq_str(seq_id));
  return it->second;
}

BlockManager::SeqState& BlockManager::seq(int64_t seq_id, const char* op) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) fail(op, "unknown " + seq_str(seq_id));
  return it->second;
}

const BlockManager::BlockMeta& BlockManager::meta(int32_t block, const char* op) const {
  if (block < 0 || block >= n_blocks())
    fail(op, "block " + std::to_string(block) + " out of range [0, " + std::to_string(n_blocks()) + ")");
  return blocks_[size_t(block)];
}

std::span<const int32_t> BlockManager::stored_tokens(int32_t block) const {
  return {block_tokens_.data() + size_t(block) * size_t(block_size_), size_t(block_size_)};
}

int32_t BlockManager::find_cached(uint64_t hash, uint64_t parent_prefix_id,
                                  std::span<const int32_t> tokens) const {
  auto [lo, hi] = index_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const int32_t b = it->second;
    const BlockMeta& m = blocks_[size_t(b)];
    if (m.prefix_id != 0 && m.parent_prefix_id == parent_prefix_id &&
        std::equal(tokens.begin(), tokens.end(), stored_tokens(b).begin()))
      return b;
  }
  return -1;
}

void BlockManager::retain(int32_t block) {
  BlockMeta& m = blocks_[size_t(block)];
  if (m.ref_count == 0) {
    if (m.prefix_id != 0) eviction_->remove(block);
    ++n_in_use_;
  }
  ++m.ref_count;
}

void BlockManager::release(int32_t block) {
  BlockMeta& m = blocks_[size_t(block)];
  if (--m.ref_count > 0) return;
  --n_in_use_;
  if (m.prefix_id != 0) {
    eviction_->add(block);
  } else {
    free_.push_back(block);
  }
}

void BlockManager::uncache(int32_t block) {
  BlockMeta& m = blocks_[size_t(block)];
  auto [lo, hi] = index_.equal_range(m.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == block) {
      index_.erase(it);
      break;
    }
  }
  if (record_events_ && index_.count(m.hash) == 0) {  // the last block under this hash left
    KvEvent e;
    e.kind = KvEventKind::BlockRemoved;
    e.block_hashes = {m.hash};
    e.medium = events_medium_;
    events_.push_back(std::move(e));
  }
  if (m.n_holds > 0) {  // evicted although a waiting request wanted it: nothing else was left
    m.n_holds = 0;
    --n_held_blocks_;
    ++n_held_evicted_;
    eviction_->set_protected(block, false);
  }
  m.prefix_id = m.parent_prefix_id = m.hash = m.stamp = 0;
  ++n_uncached_;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = eviction_->pop_victim();
    uncache(b);
  }
  blocks_[size_t(b)].ref_count = 1;
  ++n_in_use_;
  return b;
}

// ---- lookup / admission --------------------------------------------------------------------------

PrefixMatch BlockManager::match_prefix(std::span<const int32_t> tokens, int64_t max_blocks) const {
  PrefixMatch out;
  if (!prefix_caching_) return out;
  int64_t n_full = int64_t(tokens.size()) / block_size_;
  if (max_blocks >= 0) n_full = std::min(n_full, max_blocks);
  uint64_t parent_id = 0;
  for (int64_t i = 0; i < n_full; ++i) {
    auto block_tokens = tokens.subspan(size_t(i * block_size_), size_t(block_size_));
    const uint64_t h = hash_fn_(out.chain_hash, block_tokens);
    const int32_t b = find_cached(h, parent_id, block_tokens);
    if (b < 0) break;
    parent_id = blocks_[size_t(b)].prefix_id;
    out.blocks.push_back(b);
    out.prefix_ids.push_back(parent_id);
    out.chain_hash = h;
  }
  out.n_cached_tokens = int64_t(out.blocks.size()) * block_size_;
  return out;
}

PrefixMatch BlockManager::pin_prefix(int64_t seq_id, std::span<const int32_t> tokens, int64_t max_blocks) {
  if (seqs_.count(seq_id)) fail("pin_prefix", seq_str(seq_id) + " already has blocks");
  PrefixMatch match = match_prefix(tokens, max_blocks);
  if (match.blocks.empty()) return match;
  SeqState s;
  for (int32_t b : match.blocks) {
    retain(b);
    s.table.push_back(b);
  }
  s.n_slots = s.n_computed = match.n_cached_tokens;
  s.chain_hash = match.chain_hash;
  s.chain_prefix_id = match.prefix_ids.back();
  seqs_.emplace(seq_id, std::move(s));
  return match;
}

AllocPlan BlockManager::can_allocate(int64_t seq_id, std::span<const int32_t> tokens,
                                     int64_t max_uncached_tokens, PrefixLookup lookup) const {
  if (seqs_.count(seq_id)) fail("can_allocate", seq_str(seq_id) + " already has blocks");
  if (tokens.empty()) fail("can_allocate", seq_str(seq_id) + ": empty prompt");
  if (max_uncached_tokens != kAllTokens && max_uncached_tokens < 1)
    fail("can_allocate", "max_uncached_tokens must be >= 1 or kAllTokens, got " +
                             std::to_string(max_uncached_tokens));
  const int64_t n = int64_t(tokens.size());
  // Leave >= 1 token to compute: at most floor((n - 1) / bs) whole blocks can hit.
  PrefixMatch match = match_prefix(tokens, lookup == PrefixLookup::Use ? (n - 1) / block_size_ : 0);

  AllocPlan plan;
  plan.seq_id = seq_id;
  plan.n_prompt_tokens = n;
  plan.n_cached_tokens = match.n_cached_tokens;
  const int64_t n_uncached = n - match.n_cached_tokens;
  plan.n_slot_tokens = match.n_cached_tokens +
                       (max_uncached_tokens == kAllTokens ? n_uncached : std::min(n_uncached, max_uncached_tokens));
  plan.n_new_blocks = n_blocks_for(plan.n_slot_tokens) - int32_t(match.blocks.size());
  int32_t n_hit_evictable = 0;
  for (int32_t b : match.blocks) n_hit_evictable += blocks_[size_t(b)].ref_count == 0 ? 1 : 0;
  plan.n_available = n_available() - n_hit_evictable;
  plan.fits = plan.n_new_blocks <= plan.n_available;
  plan.hit_blocks = std::move(match.blocks);
  plan.hit_prefix_ids = std::move(match.prefix_ids);
  plan.chain_hash = match.chain_hash;
  return plan;
}

int64_t BlockManager::allocate(const AllocPlan& plan) {
  const std::string who = seq_str(plan.seq_id);
  if (seqs_.count(plan.seq_id)) fail("allocate", who + " already has blocks");
  if (!plan.fits) fail("allocate", who + ": plan does not fit (" + std::to_string(plan.n_new_blocks) +
                                       " blocks needed, " + std::to_string(plan.n_available) + " available)");
  const size_t n_hits = plan.hit_blocks.size();
  if (plan.hit_prefix_ids.size() != n_hits || plan.n_cached_tokens != int64_t(n_hits) * block_size_ ||
      plan.n_slot_tokens <= plan.n_cached_tokens ||
      plan.n_new_blocks != n_blocks_for(plan.n_slot_tokens) - int32_t(n_hits))
    fail("allocate", who + ": malformed plan");
  // Staleness: every hit block must still hold the prefix it was planned with, and the blocks taken
  // must still be there (the hits that are evictable now cannot also be evicted for new blocks).
  int32_t n_hit_evictable = 0;
  for (size_t i = 0; i < n_hits; ++i) {
    const int32_t b = plan.hit_blocks[i];
    if (meta(b, "allocate").prefix_id != plan.hit_prefix_ids[i] || plan.hit_prefix_ids[i] == 0)
      fail("allocate", who + ": stale plan (block " + std::to_string(b) + " was evicted); plan again");
    n_hit_evictable += blocks_[size_t(b)].ref_count == 0 ? 1 : 0;
  }
  if (plan.n_new_blocks > n_available() - n_hit_evictable)
    fail("allocate", who + ": stale plan (blocks were taken since it was made); plan again");

  SeqState s;
  s.table.reserve(size_t(n_blocks_for(plan.n_slot_tokens)));
  for (int32_t b : plan.hit_blocks) {  // hits leave the evictable set before any eviction below
    retain(b);
    s.table.push_back(b);
  }
  for (int32_t i = 0; i < plan.n_new_blocks; ++i) s.table.push_back(take_block());
  s.n_slots = plan.n_slot_tokens;
  s.n_computed = plan.n_cached_tokens;
  if (n_hits > 0) {
    s.chain_hash = plan.chain_hash;
    s.chain_prefix_id = plan.hit_prefix_ids.back();
  }
  seqs_.emplace(plan.seq_id, std::move(s));
  ++stats_.n_queries;
  stats_.n_query_tokens += plan.n_prompt_tokens;
  stats_.n_hit_tokens += plan.n_cached_tokens;
  return plan.n_cached_tokens;
}

// ---- growth --------------------------------------------------------------------------------------

int32_t BlockManager::n_blocks_to_append(int64_t seq_id, int64_t n_new_tokens) const {
  const SeqState& s = seq(seq_id, "append");
  if (n_new_tokens < 0) fail("append", seq_str(seq_id) + ": negative token count");
  if (n_new_tokens == 0) return 0;
  const bool cow = s.n_slots % block_size_ != 0 && blocks_[size_t(s.table.back())].ref_count > 1;
  return n_blocks_for(s.n_slots + n_new_tokens) - int32_t(s.table.size()) + (cow ? 1 : 0);
}

bool BlockManager::can_append(int64_t seq_id, int64_t n_new_tokens) const {
  return n_blocks_to_append(seq_id, n_new_tokens) <= n_available();
}

AppendResult BlockManager::append_slots(int64_t seq_id, int64_t n_new_tokens) {
  const int32_t need = n_blocks_to_append(seq_id, n_new_tokens);
  if (need > n_available())
    fail("append_slots", seq_str(seq_id) + ": needs " + std::to_string(need) + " blocks, " +
                             std::to_string(n_available()) + " available");
  SeqState& s = seq(seq_id, "append_slots");
  AppendResult out;
  if (n_new_tokens == 0) return out;
  if (s.n_slots % block_size_ != 0 && blocks_[size_t(s.table.back())].ref_count > 1) {
    const int32_t src = s.table.back();
    const int32_t dst = take_block();
    release(src);  // stays >= 1: it was shared
    s.table.back() = dst;
    out.copies.push_back({src, dst});
  }
  const int32_t n_grow = n_blocks_for(s.n_slots + n_new_tokens) - int32_t(s.table.size());
  for (int32_t i = 0; i < n_grow; ++i) s.table.push_back(take_block());
  s.n_slots += n_new_tokens;
  out.n_new_blocks = need;
  return out;
}

void BlockManager::register_full_block(SeqState& s, int32_t block) {
  const uint64_t h = hash_fn_(s.chain_hash, s.partial);
  // Already cached under the same verified prefix elsewhere: register as an alias (same prefix id).
  const int32_t twin = find_cached(h, s.chain_prefix_id, s.partial);
  const uint64_t id = twin >= 0 ? blocks_[size_t(twin)].prefix_id : next_prefix_id_++;
  BlockMeta& m = blocks_[size_t(block)];
  m.prefix_id = id;
  m.parent_prefix_id = s.chain_prefix_id;
  m.hash = h;
  m.stamp = next_stamp_++;
  std::copy(s.partial.begin(), s.partial.end(), block_tokens_.begin() + ptrdiff_t(block) * block_size_);
  if (record_events_ && index_.count(h) == 0) {  // the first block under this hash
    KvEvent e;
    e.kind = KvEventKind::BlockStored;
    e.block_hashes = {h};
    if (s.chain_hash != kRootHash) e.parent_block_hash = s.chain_hash;
    e.token_ids.assign(s.partial.begin(), s.partial.end());
    e.block_size = block_size_;
    e.medium = events_medium_;
    events_.push_back(std::move(e));
  }
  index_.emplace(h, block);
  s.chain_hash = h;
  s.chain_prefix_id = id;
}

void BlockManager::commit_tokens(int64_t seq_id, std::span<const int32_t> tokens) {
  SeqState& s = seq(seq_id, "commit_tokens");
  const int64_t n = int64_t(tokens.size());
  if (s.n_computed + n > s.n_slots)
    fail("commit_tokens", seq_str(seq_id) + ": commits " + std::to_string(n) + " tokens at position " +
                              std::to_string(s.n_computed) + " but only " + std::to_string(s.n_slots) +
                              " positions have slots");
  // Every block this call fills must be exclusively ours and not yet cached (CoW and the fork rule
  // guarantee it); check before changing anything.
  if (prefix_caching_) {
    for (int64_t end = (s.n_computed / block_size_ + 1) * block_size_; end <= s.n_computed + n; end += block_size_) {
      const int32_t b = s.table[size_t(end / block_size_ - 1)];
      if (blocks_[size_t(b)].ref_count != 1 || blocks_[size_t(b)].prefix_id != 0)
        fail("commit_tokens", seq_str(seq_id) + ": block " + std::to_string(b) + " is shared or cached");
    }
  }
  for (int32_t t : tokens) {
    s.partial.push_back(t);
    ++s.n_computed;
    if (int32_t(s.partial.size()) == block_size_) {
      if (prefix_caching_) register_full_block(s, s.table[size_t(s.n_computed / block_size_ - 1)]);
      s.partial.clear();
    }
  }
}

// ---- holds ---------------------------------------------------------------------------------------

int32_t BlockManager::hold_prefix(int64_t hold_id, std::span<const int32_t> tokens, int64_t max_blocks) {
  const PrefixMatch match = match_prefix(tokens, max_blocks);  // before the release: it changes no cache state
  release_hold(hold_id);
  if (match.blocks.empty()) return 0;
  std::vector<HeldBlock> held(match.blocks.size());
  // Tail first, so that among held blocks the head is the most recent (evicted last).
  for (size_t i = match.blocks.size(); i-- > 0;) {
    const int32_t b = match.blocks[i];
    BlockMeta& m = blocks_[size_t(b)];
    if (m.n_holds++ == 0) {
      ++n_held_blocks_;
      eviction_->set_protected(b, true);  // an evictable member moves to the protected most recent end
    } else if (eviction_->contains(b)) {  // already protected: touch it
      eviction_->remove(b);
      eviction_->add(b);
    }
    held[i] = {b, m.stamp};
  }
  const int32_t n = int32_t(held.size());
  holds_.emplace(hold_id, std::move(held));
  return n;
}

void BlockManager::release_hold(int64_t hold_id) {
  const auto it = holds_.find(hold_id);
  if (it == holds_.end()) return;
  for (auto h = it->second.rbegin(); h != it->second.rend(); ++h) {  // tail first: the head ends most recent
    BlockMeta& m = blocks_[size_t(h->block)];
    if (m.stamp != h->stamp || m.n_holds == 0) continue;  // evicted since the hold was made
    if (--m.n_holds == 0) {
      --n_held_blocks_;
      eviction_->set_protected(h->block, false);
    }
  }
  holds_.erase(it);
}

// ---- release / sharing ---------------------------------------------------------------------------

void BlockManager::free(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) fail("free", "unknown " + seq_str(seq_id));
  const std::vector<int32_t>& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) release(*b);  // tail first: evicted first
  seqs_.erase(it);
}

void BlockManager::fork(int64_t parent_seq_id, int64_t child_seq_id) {
  const SeqState& p = seq(parent_seq_id, "fork");
  if (seqs_.count(child_seq_id)) fail("fork", "child " + seq_str(child_seq_id) + " already has blocks");
  if (p.n_computed != p.n_slots)
    fail("fork", "parent " + seq_str(parent_seq_id) + " has " + std::to_string(p.n_slots - p.n_computed) +
                     " uncommitted slots; fork between steps");
  SeqState child = p;
  for (int32_t b : child.table) retain(b);
  seqs_.emplace(child_seq_id, std::move(child));
}

int32_t BlockManager::evict_all_cached() {
  int32_t n = 0;
  while (eviction_->size() > 0) {
    const int32_t b = eviction_->pop_victim();
    uncache(b);
    free_.push_back(b);
    ++n;
  }
  return n;
}

std::vector<KvEvent> BlockManager::take_events() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

int64_t BlockManager::slot(int64_t seq_id, int64_t position) const {
  const SeqState& s = seq(seq_id, "slot");
  if (position < 0 || position >= s.n_slots)
    fail("slot", seq_str(seq_id) + ": position " + std::to_string(position) + " outside [0, " +
                     std::to_string(s.n_slots) + ")");
  return int64_t(s.table[size_t(position / block_size_)]) * block_size_ + position % block_size_;
}

// ---- invariants ----------------------------------------------------------------------------------

void BlockManager::check_invariants() const {
  const char* op = "check_invariants";
  const size_t nb = blocks_.size();
  std::vector<int32_t> refs(nb, 0);
  for (const auto& [id, s] : seqs_) {
    const std::string who = seq_str(id);
    if (int64_t(s.table.size()) != n_blocks_for(s.n_slots))
      fail(op, who + ": table has " + std::to_string(s.table.size()) + " blocks for " +
                   std::to_string(s.n_slots) + " slots");
    if (s.n_computed < 0 || s.n_computed > s.n_slots) fail(op, who + ": n_computed outside [0, n_slots]");
    if (int64_t(s.partial.size()) != s.n_computed % block_size_) fail(op, who + ": partial block size");
    for (int32_t b : s.table) {
      if (b < 0 || size_t(b) >= nb) fail(op, who + ": block id " + std::to_string(b) + " out of range");
      ++refs[size_t(b)];
    }
    if (prefix_caching_ && s.n_computed >= block_size_) {  // the last full computed block
      const BlockMeta& m = blocks_[size_t(s.table[size_t(s.n_computed / block_size_ - 1)])];
      if (m.prefix_id == 0) fail(op, who + ": its last full computed block is not cached");
      if (s.chain_prefix_id != m.prefix_id || s.chain_hash != m.hash) fail(op, who + ": chain state mismatch");
    }
  }
  std::vector<uint8_t> in_free(nb, 0);
  for (int32_t b : free_) {
    if (b < 0 || size_t(b) >= nb || in_free[size_t(b)]) fail(op, "free list: bad or duplicate block");
    in_free[size_t(b)] = 1;
  }
  const std::vector<int32_t> order = eviction_->victim_order();
  if (int64_t(order.size()) != eviction_->size()) fail(op, "eviction policy size mismatch");
  std::vector<uint8_t> in_evict(nb, 0);
  for (int32_t b : order) {
    if (b < 0 || size_t(b) >= nb || in_evict[size_t(b)]) fail(op, "eviction set: bad or duplicate block");
    in_evict[size_t(b)] = 1;
  }
  int32_t n_used = 0;
  size_t n_cached = 0;
  std::unordered_map<uint64_t, int32_t> by_id;  // prefix id -> one block holding it
  for (size_t b = 0; b < nb; ++b) {
    const BlockMeta& m = blocks_[b];
    const std::string blk = "block " + std::to_string(b);
    if (m.ref_count != refs[b])
      fail(op, blk + ": ref_count " + std::to_string(m.ref_count) + " but in " + std::to_string(refs[b]) +
                   " tables");
    const bool used = m.ref_count > 0, cached = m.prefix_id != 0;
    n_used += used ? 1 : 0;
    if (int(used) + int(in_free[b]) + int(in_evict[b]) != 1)
      fail(op, blk + ": not in exactly one of in-use / free / evictable");
    if (in_evict[b] && !cached) fail(op, blk + ": evictable but not cached");
    if (in_free[b] && cached) fail(op, blk + ": free but cached");
    if (!cached) continue;
    ++n_cached;
    if (!prefix_caching_) fail(op, blk + ": cached with prefix caching off");
    if (m.prefix_id >= next_prefix_id_ || m.parent_prefix_id >= m.prefix_id)
      fail(op, blk + ": prefix id not after its parent's");
    auto [lo, hi] = index_.equal_range(m.hash);
    if (std::count_if(lo, hi, [&](const auto& e) { return e.second == int32_t(b); }) != 1)
      fail(op, blk + ": cached but not indexed exactly once under its hash");
    auto [it, inserted] = by_id.emplace(m.prefix_id, int32_t(b));
    if (!inserted) {  // aliases: same prefix => same hash, parent and tokens
      const BlockMeta& o = blocks_[size_t(it->second)];
      const auto mine = stored_tokens(int32_t(b)), theirs = stored_tokens(it->second);
      if (o.hash != m.hash || o.parent_prefix_id != m.parent_prefix_id ||
          !std::equal(mine.begin(), mine.end(), theirs.begin()))
        fail(op, blk + ": alias of block " + std::to_string(it->second) + " with different contents");
    }
  }
  if (index_.size() != n_cached) fail(op, "prefix index has entries for uncached blocks");
  std::vector<int32_t> wants(nb, 0);
  for (const auto& [id, held] : holds_)
    for (const HeldBlock& h : held)
      if (h.block < 0 || size_t(h.block) >= nb) fail(op, "hold " + std::to_string(id) + ": block out of range");
      else if (h.stamp != 0 && blocks_[size_t(h.block)].stamp == h.stamp) ++wants[size_t(h.block)];
  int32_t n_held = 0;
  for (size_t b = 0; b < nb; ++b) {
    if (blocks_[b].n_holds != wants[b])
      fail(op, "block " + std::to_string(b) + ": n_holds " + std::to_string(blocks_[b].n_holds) + " but " +
                   std::to_string(wants[b]) + " holds want it");
    n_held += wants[b] > 0 ? 1 : 0;
  }
  if (n_held != n_held_blocks_) fail(op, "n_held_blocks counter " + std::to_string(n_held_blocks_) + " != " + std::to_string(n_held));
  if (n_used != n_in_use_) fail(op, "n_in_use counter " + std::to_string(n_in_use_) + " != " + std::to_string(n_used));
  if (size_t(n_used) + free_.size() + order.size() != nb) fail(op, "partition does not cover every block");
}

}  // namespace tp
