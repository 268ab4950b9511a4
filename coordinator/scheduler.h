// Scheduler: continuous batching over a paged KV cache (vLLM v1 style). It owns the waiting queue, the
// running set and the BlockManager, and turns them into one StepPlan per engine step. It never touches
// tensors and never calls the executor (the Engine does).
//
// One schedule() (token budget B = max_num_batched_tokens):
//   1. running decodes (remaining == 1), in admission order, one token each;
//   2. running partial prefills, in admission order, min(remaining, budget left) tokens each (chunked
//      prefill: a long prompt takes several steps, mixed with the decodes of others);
//   3. unless a preemption happened in this step: admit from the FRONT of the waiting queue (strict FCFS —
//      a head that does not fit blocks the rest) while the budget and max_num_seqs allow and its blocks
//      fit (BlockManager::can_allocate). Prefix-cache hits are whole blocks whose tokens are not computed.
// Growth: before a running sequence's tokens are planned, its slots are extended (append_slots, with
// copy-on-write copies put into the plan). When the pool cannot supply a block, the most recently admitted
// running sequence not yet planned in this step is preempted (recompute): its blocks are freed and it goes
// to the FRONT of the waiting queue; if that victim is the sequence itself, it is skipped this step.
// On readmission its prompt + generated tokens are computed again (minus prefix hits).
// Waiting sequences hold their cached prefix (BlockManager::hold_prefix: from add() or a preemption, refreshed
// before each schedule() when the cache changed, until admission or remove()): under KV pressure the LRU evicts blocks no waiting sequence wants first, so a request
// does not lose the prefix it matched on arrival while it queues. A hold never blocks an allocation.
// Choices (Sequence::pending_forks, n > 1): admission needs room in max_num_seqs for every choice; the prompt
// minus its last token is prefilled once, then commit() forks the pending choices off it (they join the
// running set sharing its blocks). A one-token prompt has nothing to share, and a static reservation cannot
// be shared: add() splits such a request into independent waiting sequences right away.
//
// Prompt logprobs (Sequence::needs_prompt_logprobs): the prompt is allocated without prefix-cache hits (its
// logprobs need every position's hidden state), each chunk carries the prompt tokens its rows predict
// (SeqPlan::prompt_targets), and chunks are at most kMaxPromptLogprobRows tokens (each row costs a vocab-wide
// logits row). max_tokens == 0: the last chunk wants no logits (nothing is sampled).
//
// Reservation (KvReservation):
//   Paged   blocks are taken as tokens are scheduled (the prefill chunk at admission, then growth).
//   Static  admission reserves slots for max_context tokens at once (the pre-paged baseline): no growth,
//           no preemption, fewer sequences admitted. For the static-vs-paged benchmark.
//
// Not thread-safe: the engine thread only.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coordinator/sequence.h"
#include "kvstore/block_manager.h"
#include "parallel/step_plan.h"

namespace tp {

enum class KvReservation : uint8_t { Paged, Static };

// Prefill tokens per step of a sequence whose prompt logprobs are being computed (a [rows, vocab] float
// logits block each step: 512 x 49,152 x 4 B = 96 MiB for SmolLM2).
inline constexpr int64_t kMaxPromptLogprobRows = 512;

struct SchedulerConfig {
  int32_t n_blocks = 0;                   // KV blocks in the pool (every rank has this many), >= 1
  int32_t block_size = kDefaultBlockSize; // tokens per block, >= 1
  int64_t max_num_seqs = 64;              // running sequences, >= 1
  int64_t max_num_batched_tokens = 2048;  // tokens planned per step, >= 1
  int64_t max_context = 2048;             // tokens per sequence (prompt + generated), >= 1
  bool prefix_caching = true;
  KvReservation reservation = KvReservation::Paged;

  // Throws InputError naming the first bad field (and, for Static, a pool that holds no reservation).
  void validate() const;
  int32_t blocks_for(int64_t n_tokens) const { return int32_t((n_tokens + block_size - 1) / block_size); }
  // KV positions a request of n_prompt + max_tokens holds at most: the last generated token is never computed.
  static int64_t max_positions(int64_t n_prompt, int64_t max_tokens) {
    return max_tokens > 0 ? n_prompt + max_tokens - 1 : n_prompt;
  }
};

// The result of one schedule(): the plan and what the planning did to the queues.
struct ScheduledStep {
  StepPlan plan;                   // seqs: decodes, then prefill chunks, then admissions; CoW block copies
  std::vector<int64_t> preempted;  // preempted while planning, in order (now at the front of waiting)
  std::vector<int64_t> admitted;   // moved from waiting to running while planning, in order
  bool empty() const { return plan.seqs.empty(); }
};

class Scheduler {
 public:
  // Throws InputError when cfg is invalid. bm_options.enable_prefix_caching is taken from cfg.
  explicit Scheduler(const SchedulerConfig& cfg, BlockManagerOptions bm_options = {});

  // Appends a new sequence to the back of the waiting queue (and, when it must be split, its pending
  // choices right behind it). Its id and the ids of its pending forks must be unused.
  void add(std::unique_ptr<Sequence> seq);
  // Removes a waiting or running sequence, freeing its blocks (abort, finish). nullptr when unknown.
  std::unique_ptr<Sequence> remove(int64_t id);

  // Plans one step (allocating and growing block tables, preempting as needed). Empty when nothing runs.
  ScheduledStep schedule();
  // After the step ran: records every planned token as computed (full blocks enter the prefix index), then
  // forks the pending choices of every sequence whose shared part is now computed. Returns the forked
  // sequence ids (now running), in order.
  std::vector<int64_t> commit(const ScheduledStep& step);

  // A waiting or running sequence; nullptr when unknown.
  Sequence* find(int64_t id);
  std::vector<int64_t> running_ids() const;  // admission order
  std::vector<int64_t> waiting_ids() const;  // queue order (front first)
  int64_t n_running() const { return int64_t(running_.size()); }
  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }

  const SchedulerConfig& config() const { return cfg_; }
  const BlockManager& block_manager() const { return bm_; }
  // For the KV transfer between replicas (Engine, engine_kv.cpp): pins and imports are BlockManager sequences
  // outside the scheduler's queues (ids >= 2^60), created and freed between steps.
  BlockManager& kv_block_manager() { return bm_; }
  // The KV events the block manager recorded since the previous call (BlockManager::take_events).
  std::vector<KvEvent> take_kv_events() { return bm_.take_events(); }

  // Counters since construction.
  int64_t n_preemptions() const { return n_preemptions_; }
  int64_t n_first_admissions() const { return n_first_admissions_; }
  int64_t n_prompt_tokens() const { return n_prompt_tokens_; }      // sum of n_prompt over first admissions
  int64_t n_computed_tokens() const { return n_computed_tokens_; }  // tokens committed, recompute included

 private:
  std::vector<Sequence*> running_in_plan_order() const;
  // Grows s's slots to n_slots, preempting as needed. False when s itself was preempted.
  bool reserve_slots(Sequence& s, int64_t n_slots, const std::unordered_set<int64_t>& planned, ScheduledStep& out);
  Sequence* pick_victim(const std::unordered_set<int64_t>& planned) const;
  // Holds the cached prefix waiting sequence s will hit (BlockManager::hold_prefix, hold id = s.id), so the
  // LRU evicts other blocks first while it waits; admission and remove() release it.
  void hold(const Sequence& s);
  // Before planning: every waiting sequence holds its longest cached prefix now (blocks cached since it arrived,
  // e.g. a shared prefix another request computed meanwhile, join its hold).
  void refresh_holds();
  void preempt(Sequence& s, ScheduledStep& out);
  void admit(int64_t& budget, ScheduledStep& out);
  void plan_tokens(const Sequence& s, int64_t start, int64_t n, ScheduledStep& out) const;
  // Tokens s may compute this step: what it has left, within the budget (and kMaxPromptLogprobRows).
  static int64_t chunk(const Sequence& s, int64_t computed, int64_t budget);
  // Choice `f` of `parent` as its own sequence: the parent's tokens, seed + index.
  static std::unique_ptr<Sequence> make_choice(const Sequence& parent, const PendingFork& f);

  SchedulerConfig cfg_;
  BlockManager bm_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;  // waiting and running
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;                                // admission order
  int64_t next_admit_order_ = 0;
  uint64_t held_version_ = 0;  // bm_.cache_version() at the last refresh_holds()
  int64_t n_preemptions_ = 0, n_first_admissions_ = 0, n_prompt_tokens_ = 0, n_computed_tokens_ = 0;
};

}  // namespace tp
