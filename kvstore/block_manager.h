// BlockManager: the metadata of a paged KV cache — which physical block holds which tokens of which
// sequence. Pure data structure: no tensors, no pointers into the pool (kvstore/kv_pool.h owns memory),
// no MPI. It lives on the coordinator; ranks only ever see block tables inside a StepPlan.
//
// Units. A block holds `block_size` token positions (default 16). Block ids are int32 in [0, n_blocks).
// A sequence (int64 id) owns a block table: block_table[i] holds its positions [i*bs, (i+1)*bs); the slot
// of position p is block_table[p / bs] * bs + p % bs (slot(), the StepPlan's slot_mapping).
// Per sequence:  n_slots     = positions that have a slot (table.size() == ceil(n_slots / bs));
//                n_computed  = positions whose K/V is written and committed (n_computed <= n_slots).
//
// Prefix cache. A block becomes cached when all its positions are committed: it is entered in the
// prefix index under the chained hash h_i = H(h_{i-1}, tokens of block i) (h_{-1} = kRootHash). Every
// hit is verified: the stored tokens must equal the query's, and the block's parent identity must be
// the block matched just before it (identities, "prefix ids", are never reused, so a stale child of an
// evicted parent can never match). A hash collision therefore costs a lookup, never wrong K/V — the
// hash function is injectable so tests force collisions.
// A newly full block whose prefix is already cached in another block is registered as an alias under
// the same prefix id (no table rewrite, no dedup copy): both blocks hold identical K/V, either can
// serve a hit, and the children of either stay reachable when one of them is evicted.
//
// Block states (a partition, checked by check_invariants()):
//   in use     ref_count > 0 (held by >= 1 table; shared blocks are read-only until copy-on-write)
//   evictable  ref_count == 0 and cached: reusable by a prefix hit until the EvictionPolicy picks it
//   free       ref_count == 0 and not cached
// free() releases a table tail-first, so with LRU the tail of a prompt is evicted before its head.
// Holds (hold_prefix): a waiting request marks the cached prefix it matched at arrival, so that the LRU evicts
// those blocks only after every block no waiting request wants — without a hold, KV pressure from the running
// requests could evict a waiting request's prefix before it is scheduled, and it would recompute it.
//
// Contract (llama.cpp find_slot/apply style): every can_* / lookup is const and returns a plan;
// allocate() applies a plan; a call that throws leaves the state unchanged. Errors are tp::Error
// (unknown or duplicate seq id, stale or non-fitting plan, commit past the slots, ...).
//
// Copy-on-write: fork() shares all of a parent's blocks. append_slots() copies the last block first
// when it is partial and shared (ref_count > 1) and new positions would be written into it; the caller
// copies K/V src -> dst (StepPlan block copy list) before the step writes into dst.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include "common/block_copy.h"
#include "kvstore/kv_events.h"

namespace tp {

inline constexpr int32_t kDefaultBlockSize = 16;
inline constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ULL;  // h_{-1}, the parent of a prompt's block 0
inline constexpr int64_t kAllTokens = -1;
// can_allocate: Use looks the prompt up in the prefix index; Skip computes it all (a prompt whose every
// position's output is wanted, e.g. prompt logprobs). Its full blocks still enter the index as they fill.
enum class PrefixLookup : uint8_t { Use, Skip };                     // can_allocate: give the whole prompt slots

// H(parent_hash, tokens of one full block) -> hash. Must be deterministic.
using BlockHashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> tokens)>;
uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens);

// Chooses which evictable block (ref_count 0, cached) to reuse when the free list is empty.
// The BlockManager tells it every transition; it owns only the order.
// Protection: the BlockManager marks the blocks a waiting request matched (hold_prefix) as protected, member
// or not (a block in use can be protected before it becomes evictable); a policy should evict a protected member
// only when no unprotected one is left. A policy that ignores set_protected (the default) stays correct, only
// without that preference.
class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual void reset(int32_t n_blocks) = 0;       // called once by the BlockManager; empties the set
  virtual void add(int32_t block) = 0;            // block became evictable
  virtual void remove(int32_t block) = 0;         // block was hit again (precondition: contains)
  virtual int32_t pop_victim() = 0;               // choose and remove one (precondition: size() > 0)
  virtual int64_t size() const = 0;
  virtual bool contains(int32_t block) const = 0;
  virtual std::vector<int32_t> victim_order() const = 0;  // every member, next victim first
  virtual void set_protected(int32_t /*block*/, bool /*on*/) {}  // any block id in [0, n_blocks)
};

// Least recently released (or protected) first, every unprotected member before any protected one; O(1) per
// operation (two intrusive lists over block ids). Protecting or unprotecting a member moves it to the most
// recent end of its new list.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  void reset(int32_t n_blocks) override;
  void add(int32_t block) override;
  void remove(int32_t block) override;
  int32_t pop_victim() override;
  int64_t size() const override { return size_; }
  bool contains(int32_t block) const override;
  std::vector<int32_t> victim_order() const override;
  void set_protected(int32_t block, bool on) override;

 private:
  int32_t sentinel(bool prot) const { return int32_t(prev_.size()) - (prot ? 1 : 2); }
  void link_last(int32_t block);  // at the most recent end of its list (by protected_)
  void unlink(int32_t block);
  std::vector<int32_t> prev_, next_;  // [n_blocks + 2]; the last two entries: unprotected, protected sentinel
  std::vector<uint8_t> member_;       // [n_blocks]
  std::vector<uint8_t> protected_;    // [n_blocks]
  int64_t size_ = 0;
};

struct BlockManagerOptions {
  bool enable_prefix_caching = true;
  BlockHashFn hash_fn;                       // empty: default_block_hash
  std::unique_ptr<EvictionPolicy> eviction;  // null: LruEvictionPolicy
  bool record_events = false;                // record KV events (kvstore/kv_events.h) for take_events()
  std::string events_medium = "CPU";         // KvEvent::medium of the recorded events
};

// The result of can_allocate(): what allocate() will do. A plain value; stale plans are rejected.
struct AllocPlan {
  int64_t seq_id = -1;
  bool fits = false;               // n_new_blocks <= n_available (free + evictable not hit here)
  int64_t n_prompt_tokens = 0;
  int64_t n_cached_tokens = 0;     // == hit_blocks.size() * block_size; always < n_prompt_tokens
  int64_t n_slot_tokens = 0;       // positions that get a slot: n_cached + uncached tokens given now
  std::vector<int32_t> hit_blocks;        // cached blocks reused as table[0 .. n_hits)
  std::vector<uint64_t> hit_prefix_ids;   // their identities when planned (staleness check)
  int32_t n_new_blocks = 0;        // fresh blocks taken (free list first, then eviction)
  int32_t n_available = 0;         // blocks that could be taken when planned
  uint64_t chain_hash = kRootHash; // hash of the last hit block (kRootHash if none)
};

struct AppendResult {
  std::vector<BlockCopy> copies;  // copy-on-write: copy K/V of src into dst before writing dst
  int32_t n_new_blocks = 0;       // blocks taken, including copy destinations
};

struct PrefixMatch {
  int64_t n_cached_tokens = 0;    // whole blocks only
  std::vector<int32_t> blocks;
  std::vector<uint64_t> prefix_ids;
  uint64_t chain_hash = kRootHash;
};

// Prefix-cache counters. Counted when a plan is applied (allocate), not when planned: a waiting
// request planned many times counts once. hit rate = n_hit_tokens / n_query_tokens.
struct PrefixStats {
  int64_t n_queries = 0;       // allocations
  int64_t n_query_tokens = 0;  // prompt tokens of those allocations
  int64_t n_hit_tokens = 0;    // of which served from the cache
};

class BlockManager {
 public:
  // Simulated constructor: metadata only, so a block count and a block size are all it needs.
  explicit BlockManager(int32_t n_blocks, int32_t block_size = kDefaultBlockSize,
                        BlockManagerOptions options = {});
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;
  BlockManager(BlockManager&&) = default;
  BlockManager& operator=(BlockManager&&) = default;

  // ---- admission --------------------------------------------------------------------------------
  // Plans a new sequence for `tokens` (the full prompt, non-empty). Prefix hits are whole blocks and
  // never the entire prompt (at least one token is left to compute, so there are logits).
  // max_uncached_tokens: how many uncached prompt tokens get slots now (>= 1, or kAllTokens); the rest
  // are added later with append_slots (chunked prefill). Throws if seq_id already exists.
  AllocPlan can_allocate(int64_t seq_id, std::span<const int32_t> tokens,
                         int64_t max_uncached_tokens = kAllTokens, PrefixLookup lookup = PrefixLookup::Use) const;
  // Applies a plan: hit blocks ref_count++ (leaving the evictable set), new blocks taken, the table
  // created; n_computed = n_cached_tokens. Returns n_cached_tokens (positions the caller skips).
  // Throws, changing nothing, if the plan does not fit, is stale, or the seq already exists.
  int64_t allocate(const AllocPlan& plan);

  // ---- growth -----------------------------------------------------------------------------------
  // Blocks append_slots(seq_id, n) would take (new blocks + a copy-on-write copy).
  int32_t n_blocks_to_append(int64_t seq_id, int64_t n_new_tokens) const;
  bool can_append(int64_t seq_id, int64_t n_new_tokens) const;
  // Gives n_new_tokens more positions slots. Throws, changing nothing, when it does not fit.
  AppendResult append_slots(int64_t seq_id, int64_t n_new_tokens);

  // Records that the next tokens.size() positions [n_computed, n_computed + n) now hold computed K/V
  // for these token ids (requires n_computed + n <= n_slots). Each block that becomes full is entered
  // in the prefix index (or aliased, see above).
  void commit_tokens(int64_t seq_id, std::span<const int32_t> tokens);

  // ---- release / sharing ------------------------------------------------------------------------
  // Releases the table tail-first: ref_count--; a block reaching 0 becomes evictable if cached, else
  // free. Used for finish, abort and preemption alike.
  void free(int64_t seq_id);
  // child shares all of parent's blocks (n > 1 sampling). Requires parent n_computed == n_slots (fork
  // between steps) and child unknown. Takes no block; divergence is paid by append_slots' CoW.
  void fork(int64_t parent_seq_id, int64_t child_seq_id);
  // Holds the longest verified cached prefix of `tokens` (whole blocks, at most max_blocks; -1: no cap) under a
  // new sequence seq_id, so those blocks are neither evicted nor written until free(seq_id) — what a KV transfer
  // to another replica reads. Returns the match; when nothing is cached no sequence is created. Not counted in
  // prefix_stats(). Throws if seq_id already exists.
  PrefixMatch pin_prefix(int64_t seq_id, std::span<const int32_t> tokens, int64_t max_blocks = -1);
  // ---- holds: the cached prefix a waiting request will reuse ------------------------------------
  // Marks the longest verified cached prefix of `tokens` (whole blocks, at most max_blocks; -1: no cap) as
  // wanted by hold_id (a waiting request; its own id space, apart from sequences): those blocks are evicted
  // only after every evictable block no hold wants (EvictionPolicy::set_protected), the prefix's tail before
  // its head. A hold takes no block and changes no availability or plan: when nothing else is left, held
  // blocks are evicted like any other (the hold then silently loses them). Replaces hold_id's previous hold.
  // Returns the number of blocks held.
  int32_t hold_prefix(int64_t hold_id, std::span<const int32_t> tokens, int64_t max_blocks = -1);
  // Drops hold_id's hold (no-op when it has none): its blocks that no other hold wants go back to plain LRU
  // order, at the most recent end.
  void release_hold(int64_t hold_id);
  int64_t n_holds() const { return int64_t(holds_.size()); }
  // Blocks at least one hold wants (cached, in use or evictable).
  int32_t n_held_blocks() const { return n_held_blocks_; }
  bool is_held(int32_t block) const { return meta(block, "is_held").n_holds > 0; }
  // Changes whenever a block is cached or leaves the cache: a prefix match made at one version holds until it changes.
  uint64_t cache_version() const { return next_stamp_ + n_uncached_; }
  // Held blocks evicted anyway since construction (the pool had nothing else left).
  int64_t n_held_evicted() const { return n_held_evicted_; }

  // Evicts every evictable block now (they become free). Returns how many. In-use blocks stay cached.
  int32_t evict_all_cached();
  // The KV events recorded since the previous call, in order (empty unless options.record_events).
  std::vector<KvEvent> take_events();

  // ---- lookup -----------------------------------------------------------------------------------
  // The longest verified cached prefix of tokens, whole blocks, at most max_blocks (-1: no cap).
  PrefixMatch match_prefix(std::span<const int32_t> tokens, int64_t max_blocks = -1) const;

  // ---- introspection ----------------------------------------------------------------------------
  int32_t n_blocks() const { return int32_t(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t n_evictable() const { return int32_t(eviction_->size()); }
  int32_t n_in_use() const { return n_in_use_; }
  int32_t n_available() const { return n_free() + n_evictable(); }
  // kv_cache_usage_perc = n_in_use / n_blocks (0 when there are no blocks).
  double usage() const { return blocks_.empty() ? 0.0 : double(n_in_use_) / double(blocks_.size()); }
  bool prefix_caching() const { return prefix_caching_; }
  const PrefixStats& prefix_stats() const { return stats_; }
  int32_t n_blocks_for(int64_t n_tokens) const { return int32_t((n_tokens + block_size_ - 1) / block_size_); }

  int64_t n_seqs() const { return int64_t(seqs_.size()); }
  bool has_seq(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }
  const std::vector<int32_t>& block_table(int64_t seq_id) const { return seq(seq_id, "block_table").table; }
  int64_t n_slots(int64_t seq_id) const { return seq(seq_id, "n_slots").n_slots; }
  int64_t n_computed(int64_t seq_id) const { return seq(seq_id, "n_computed").n_computed; }
  int64_t slot(int64_t seq_id, int64_t position) const;  // block * block_size + offset

  int32_t ref_count(int32_t block) const { return meta(block, "ref_count").ref_count; }
  bool is_cached(int32_t block) const { return meta(block, "is_cached").prefix_id != 0; }
  std::vector<int32_t> eviction_order() const { return eviction_->victim_order(); }

  // Throws tp::Error naming the first inconsistency: ref counts vs tables, the free / evictable /
  // in-use partition and its counters, index <-> block metadata, per-sequence slot arithmetic.
  // O(n_blocks + total table length); meant for tests, after every operation.
  void check_invariants() const;

 private:
  struct BlockMeta {  // metadata, no pointers (TensorRT-LLM KVCacheBlock)
    int32_t ref_count = 0;
    uint64_t prefix_id = 0;         // identity of the token prefix ending here; 0 = not cached
    uint64_t parent_prefix_id = 0;  // prefix_id of the previous block's prefix; 0 for block 0
    uint64_t hash = 0;              // chained hash it is indexed under (valid when cached)
    uint64_t stamp = 0;             // unique per caching (register_full_block); 0 when not cached
    int32_t n_holds = 0;            // holds that want this block (0 when not cached)
  };
  struct HeldBlock {
    int32_t block;
    uint64_t stamp;  // the block's stamp when held: a block evicted (and maybe cached again) since is not counted down
  };
  struct SeqState {
    std::vector<int32_t> table;
    int64_t n_slots = 0;
    int64_t n_computed = 0;
    uint64_t chain_hash = kRootHash;  // hash of the last full computed block
    uint64_t chain_prefix_id = 0;     // its prefix id (0: none, or caching off)
    std::vector<int32_t> partial;     // committed tokens of the current partial block
  };

  const SeqState& seq(int64_t seq_id, const char* op) const;
  SeqState& seq(int64_t seq_id, const char* op);
  const BlockMeta& meta(int32_t block, const char* op) const;
  std::span<const int32_t> stored_tokens(int32_t block) const;
  int32_t find_cached(uint64_t hash, uint64_t parent_prefix_id, std::span<const int32_t> tokens) const;
  int32_t take_block();            // free list first, else evict; returns with ref_count 1
  void retain(int32_t block);      // ref_count++ (leaves the evictable set at 0 -> 1)
  void release(int32_t block);     // ref_count--; at 0 -> evictable or free
  void uncache(int32_t block);     // drop from the prefix index
  void register_full_block(SeqState& s, int32_t block);

  int32_t block_size_;
  bool record_events_ = false;
  std::string events_medium_;
  std::vector<KvEvent> events_;
  bool prefix_caching_;
  BlockHashFn hash_fn_;
  std::unique_ptr<EvictionPolicy> eviction_;
  std::vector<BlockMeta> blocks_;                    // [n_blocks]
  std::vector<int32_t> block_tokens_;                // [n_blocks, block_size], valid when cached
  std::vector<int32_t> free_;                        // stack; back() is taken next
  std::unordered_multimap<uint64_t, int32_t> index_; // chained hash -> cached block
  std::unordered_map<int64_t, SeqState> seqs_;
  std::unordered_map<int64_t, std::vector<HeldBlock>> holds_;  // hold id -> its blocks, head first
  int32_t n_held_blocks_ = 0;
  int64_t n_held_evicted_ = 0;
  uint64_t next_prefix_id_ = 1;
  uint64_t next_stamp_ = 1;
  uint64_t n_uncached_ = 0;                          // blocks that left the cache, since construction
  int32_t n_in_use_ = 0;
  PrefixStats stats_;
};

}  // namespace tp
