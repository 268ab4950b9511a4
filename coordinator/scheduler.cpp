#include "coordinator/scheduler.h"

#include <algorithm>
#include <span>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

BlockManagerOptions with_caching(BlockManagerOptions o, bool prefix_caching) {
  o.enable_prefix_caching = prefix_caching;
  return o;
}

}  // namespace

void SchedulerConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("scheduler config: " + what);
  };
  need(n_blocks >= 1, "n_blocks must be >= 1, got " + std::to_string(n_blocks));
  need(block_size >= 1, "block_size must be >= 1, got " + std::to_string(block_size));
  need(max_num_seqs >= 1, "max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  need(max_num_batched_tokens >= 1,
       "max_num_batched_tokens must be >= 1, got " + std::to_string(max_num_batched_tokens));
  need(max_context >= 1, "max_context must be >= 1, got " + std::to_string(max_context));
  if (reservation == KvReservation::Static)
    need(blocks_for(max_context) <= n_blocks,
         "static reservation of max_context = " + std::to_string(max_context) + " tokens needs " +
             std::to_string(blocks_for(max_context)) + " blocks of " + std::to_string(block_size) +
             " tokens, but the pool has " + std::to_string(n_blocks));
}

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockManagerOptions bm_options)
    : cfg_((cfg.validate(), cfg)),
      bm_(cfg.n_blocks, cfg.block_size, with_caching(std::move(bm_options), cfg.prefix_caching)) {}

std::unique_ptr<Sequence> Scheduler::make_choice(const Sequence& parent, const PendingFork& f) {
  auto c = std::make_unique<Sequence>();
  c->id = f.seq_id;
  c->request_id = parent.request_id;
  c->index = f.index;
  c->tokens = parent.tokens;
  c->n_prompt = parent.n_prompt;
  c->n_resumed_output = parent.n_resumed_output;
  c->sampling = parent.sampling;
  c->sampling.seed = parent.sampling.seed + uint64_t(f.index);
  c->max_tokens = parent.max_tokens;
  c->ignore_eos = parent.ignore_eos;
  c->eos_ids = parent.eos_ids;
  c->logit_bias = parent.logit_bias;
  c->grammar = parent.grammar;  // a fresh matcher: a choice forks before it samples its first token
  if (c->grammar) c->matcher = std::make_shared<ConstraintMatcher>(c->grammar);
  c->on_output = parent.on_output;
  c->times = parent.times;
  c->prompt_lp = parent.prompt_lp;  // a fork shares the finished prompt logprobs; add() gives a split its own
  return c;
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (!seq || seq->tokens.empty()) throw Error("Scheduler::add: empty sequence");
  std::vector<int64_t> ids{seq->id};
  for (const PendingFork& f : seq->pending_forks) ids.push_back(f.seq_id);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || seqs_.count(ids[i]) || std::count(ids.begin(), ids.end(), ids[i]) > 1)
      throw Error("Scheduler::add: bad or duplicate sequence id " + std::to_string(ids[i]));
  std::vector<std::unique_ptr<Sequence>> split;
  if (!seq->pending_forks.empty() && (seq->tokens.size() == 1 || cfg_.reservation == KvReservation::Static)) {
    for (const PendingFork& f : seq->pending_forks) {
      split.push_back(make_choice(*seq, f));
      if (seq->prompt_lp) {  // computed again by each choice, into a vector of its own
        split.back()->prompt_logprobs = seq->prompt_logprobs;
        split.back()->prompt_lp = std::make_shared<std::vector<TokenLogprobs>>(seq->prompt_lp->size());
      }
    }
    seq->pending_forks.clear();
  }
  split.insert(split.begin(), std::move(seq));
  for (auto& s : split) {
    hold(*s);
    waiting_.push_back(s.get());
    const int64_t id = s->id;
    seqs_.emplace(id, std::move(s));
  }
}

std::unique_ptr<Sequence> Scheduler::remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return nullptr;
  Sequence* s = it->second.get();
  if (auto r = std::find(running_.begin(), running_.end(), s); r != running_.end()) {
    bm_.free(id);
    running_.erase(r);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    bm_.release_hold(id);
  }
  std::unique_ptr<Sequence> out = std::move(it->second);
  seqs_.erase(it);
  return out;
}

Sequence* Scheduler::find(int64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<int64_t> Scheduler::running_ids() const {
  std::vector<int64_t> ids;
  for (const Sequence* s : running_) ids.push_back(s->id);
  return ids;
}

std::vector<int64_t> Scheduler::waiting_ids() const {
  std::vector<int64_t> ids;
  for (const Sequence* s : waiting_) ids.push_back(s->id);
  return ids;
}

std::vector<Sequence*> Scheduler::running_in_plan_order() const {
  std::vector<Sequence*> order;
  order.reserve(running_.size());
  auto remaining = [this](const Sequence* s) { return s->n_schedulable() - bm_.n_computed(s->id); };
  for (Sequence* s : running_)
    if (remaining(s) == 1) order.push_back(s);
  for (Sequence* s : running_)
    if (remaining(s) > 1) order.push_back(s);
  return order;
}

Sequence* Scheduler::pick_victim(const std::unordered_set<int64_t>& planned) const {
  Sequence* victim = nullptr;
  for (Sequence* s : running_)
    if (!planned.count(s->id) && (!victim || s->admit_order > victim->admit_order)) victim = s;
  return victim;
}

void Scheduler::hold(const Sequence& s) {
  if (s.needs_prompt_logprobs()) return;  // computes its whole prompt: no prefix to keep
  // What admission can hit: whole blocks, leaving >= 1 token to compute (BlockManager::can_allocate).
  bm_.hold_prefix(s.id, std::span<const int32_t>(s.tokens.data(), size_t(s.n_schedulable())),
                  (s.n_schedulable() - 1) / cfg_.block_size);
}

void Scheduler::preempt(Sequence& s, ScheduledStep& out) {
  bm_.free(s.id);
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  hold(s);  // its blocks just became evictable; it is the next to be admitted
  waiting_.push_front(&s);
  ++s.n_preemptions;
  ++n_preemptions_;
  out.preempted.push_back(s.id);
}

bool Scheduler::reserve_slots(Sequence& s, int64_t n_slots, const std::unordered_set<int64_t>& planned,
                              ScheduledStep& out) {
  for (;;) {
    const int64_t need = n_slots - bm_.n_slots(s.id);
    if (need <= 0) return true;
    if (bm_.can_append(s.id, need)) {
      AppendResult r = bm_.append_slots(s.id, need);
      out.plan.block_copies.insert(out.plan.block_copies.end(), r.copies.begin(), r.copies.end());
      return true;
    }
    Sequence* victim = pick_victim(planned);  // never null: s itself is running and not planned
    preempt(*victim, out);
    if (victim == &s) return false;
  }
}

void Scheduler::plan_tokens(const Sequence& s, int64_t start, int64_t n, ScheduledStep& out) const {
  SeqPlan sp;
  sp.seq_id = s.id;
  sp.tokens.assign(s.tokens.begin() + start, s.tokens.begin() + start + n);
  sp.start_pos = start;
  const std::vector<int32_t>& table = bm_.block_table(s.id);
  sp.block_table.assign(table.begin(), table.begin() + cfg_.blocks_for(start + n));
  sp.want_logits = start + n == int64_t(s.tokens.size()) && s.max_tokens > 0;
  sp.sampling = s.sampling;
  if (sp.want_logits && s.sampling.has_penalties()) {
    sp.history = s.tokens;
    sp.n_history_prompt = s.n_prompt - s.n_resumed_output;
  }
  if (sp.want_logits) sp.logit_bias = s.logit_bias;
  if (s.needs_prompt_logprobs() && start < s.n_prompt - 1) {  // row i predicts the prompt token at start + i + 1
    const int64_t m = std::min(n, s.n_prompt - 1 - start);
    sp.prompt_logprobs = s.prompt_logprobs;
    sp.prompt_targets.assign(s.tokens.begin() + start + 1, s.tokens.begin() + start + 1 + m);
  }
  out.plan.seqs.push_back(std::move(sp));
}

int64_t Scheduler::chunk(const Sequence& s, int64_t computed, int64_t budget) {
  const int64_t n = std::min<int64_t>(s.n_schedulable() - computed, budget);
  return s.needs_prompt_logprobs() ? std::min(n, kMaxPromptLogprobRows) : n;
}

void Scheduler::admit(int64_t& budget, ScheduledStep& out) {
  const bool is_static = cfg_.reservation == KvReservation::Static;
  while (!waiting_.empty() && budget > 0 && int64_t(running_.size()) < cfg_.max_num_seqs) {
    Sequence& s = *waiting_.front();
    if (int64_t(running_.size() + 1 + s.pending_forks.size()) > cfg_.max_num_seqs) break;  // room for every choice
    const std::span<const int32_t> prefill(s.tokens.data(), size_t(s.n_schedulable()));
    const int64_t max_new = s.needs_prompt_logprobs() ? std::min(budget, kMaxPromptLogprobRows) : budget;
    const AllocPlan p = bm_.can_allocate(s.id, prefill, is_static ? kAllTokens : max_new,
                                         s.needs_prompt_logprobs() ? PrefixLookup::Skip : PrefixLookup::Use);
    // Static: the rest of the max_context reservation comes from the blocks the plan leaves available.
    const int64_t extra_blocks = is_static ? cfg_.blocks_for(cfg_.max_context) - cfg_.blocks_for(p.n_slot_tokens) : 0;
    if (!p.fits || p.n_new_blocks + extra_blocks > p.n_available) break;
    const int64_t cached = bm_.allocate(p);
    bm_.release_hold(s.id);  // its hits are in use now
    if (is_static && cfg_.max_context > p.n_slot_tokens) {
      const AppendResult r = bm_.append_slots(s.id, cfg_.max_context - p.n_slot_tokens);
      out.plan.block_copies.insert(out.plan.block_copies.end(), r.copies.begin(), r.copies.end());
    }
    const int64_t n = chunk(s, cached, budget);
    waiting_.pop_front();
    running_.push_back(&s);
    s.admit_order = next_admit_order_++;
    if (!s.ever_admitted) {
      s.ever_admitted = true;
      s.times.scheduled = std::chrono::steady_clock::now();
      if (s.index == 0) {  // a request's prompt is counted once, whatever its number of choices
        ++n_first_admissions_;
        n_prompt_tokens_ += s.n_prompt;
      }
    }
    out.admitted.push_back(s.id);
    plan_tokens(s, cached, n, out);
    budget -= n;
  }
}

void Scheduler::refresh_holds() {
  if (bm_.cache_version() == held_version_) return;  // nothing was cached or evicted since the last refresh
  // Back to front: the front of the queue is admitted first, so its blocks end the most recently held.
  for (auto it = waiting_.rbegin(); it != waiting_.rend(); ++it) hold(**it);
  held_version_ = bm_.cache_version();
}

ScheduledStep Scheduler::schedule() {
  refresh_holds();
  ScheduledStep out;
  int64_t budget = cfg_.max_num_batched_tokens;
  std::unordered_set<int64_t> planned;
  for (Sequence* s : running_in_plan_order()) {
    if (budget == 0) break;
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;  // preempted just now
    const int64_t computed = bm_.n_computed(s->id);
    const int64_t n = chunk(*s, computed, budget);
    if (!reserve_slots(*s, computed + n, planned, out)) continue;
    plan_tokens(*s, computed, n, out);
    planned.insert(s->id);
    budget -= n;
  }
  if (out.preempted.empty()) admit(budget, out);
  return out;
}

std::vector<int64_t> Scheduler::commit(const ScheduledStep& step) {
  std::vector<int64_t> forked;
  for (const SeqPlan& sp : step.plan.seqs) {
    bm_.commit_tokens(sp.seq_id, sp.tokens);
    n_computed_tokens_ += int64_t(sp.tokens.size());
    Sequence& s = *find(sp.seq_id);
    if (s.pending_forks.empty() || bm_.n_computed(s.id) != s.n_schedulable()) continue;
    std::vector<PendingFork> forks;
    forks.swap(s.pending_forks);
    for (const PendingFork& f : forks) {
      std::unique_ptr<Sequence> c = make_choice(s, f);
      bm_.fork(s.id, c->id);
      c->ever_admitted = true;
      c->admit_order = next_admit_order_++;
      running_.push_back(c.get());
      forked.push_back(c->id);
      seqs_.emplace(c->id, std::move(c));
    }
  }
  return forked;
}

}  // namespace tp
