#include "coordinator/engine.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "common/token_ids.h"

namespace tp {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

EngineConfig make_engine_config(const Config& cfg, const KvFootprint& fp, int64_t model_max_context, int64_t vocab) {
  EngineConfig e;
  SchedulerConfig& s = e.scheduler;
  s.block_size = int32_t(cfg.cache.block_size);
  e.kv_budget_bytes = cfg.cache.memory_mb * kMiB;
  const KvPoolPlan pool = kv_pool_plan(fp, e.kv_budget_bytes, cfg.cache.block_size);
  if (pool.n_blocks > std::numeric_limits<int32_t>::max())
    throw InputError(cfg.source + ": cache.memory_mb: " + num(pool.n_blocks) + " blocks exceed the int32 block ids");
  s.n_blocks = int32_t(pool.n_blocks);
  s.max_context = cfg.cache.max_context > 0 ? cfg.cache.max_context : model_max_context;
  s.max_num_seqs = cfg.scheduler.max_num_seqs;
  s.max_num_batched_tokens = cfg.scheduler.max_num_batched_tokens;
  s.prefix_caching = cfg.cache.prefix_caching;
  s.reservation = cfg.scheduler.kv_reservation == "static" ? KvReservation::Static : KvReservation::Paged;
  e.max_queued_requests = cfg.scheduler.max_queued_requests;
  e.vocab = vocab;
  e.kv_footprint = fp;
  return e;
}

Engine::Engine(EngineConfig cfg, StepExecutor& executor, BlockManagerOptions bm_options)
    : cfg_(std::move(cfg)), executor_(executor), scheduler_(cfg_.scheduler, std::move(bm_options)) {
  if (cfg_.max_queued_requests < 1)
    throw InputError("engine config: max_queued_requests must be >= 1, got " + num(cfg_.max_queued_requests));
  std::vector<Delivery> none;
  publish(none);
}

void Engine::validate(const Request& req) const {
  const SchedulerConfig& sc = cfg_.scheduler;
  const int64_t n_prompt = int64_t(req.prompt.size());
  if (n_prompt == 0) throw FieldError("prompt", "the prompt is empty: a request needs at least one token");
  check_token_ids(req.prompt, cfg_.vocab, "prompt");
  if (req.max_tokens < 0) throw FieldError("max_tokens", "max_tokens must be >= 0, got " + num(req.max_tokens));
  if (n_prompt > sc.max_context || req.max_tokens > sc.max_context - n_prompt)
    throw FieldError("max_tokens",
                     "prompt (" + num(n_prompt) + " tokens) + max_tokens (" + num(req.max_tokens) +
                         ") exceeds the max context of " + num(sc.max_context) + " tokens",
                     "context_length_exceeded");
  const int64_t n_blocks = sc.blocks_for(SchedulerConfig::max_positions(n_prompt, req.max_tokens));
  if (sc.reservation == KvReservation::Paged && n_blocks > sc.n_blocks)
    throw FieldError("max_tokens",
                     "prompt (" + num(n_prompt) + " tokens) + max_tokens (" + num(req.max_tokens) + ") needs " +
                         num(n_blocks) + " KV blocks of " + num(sc.block_size) + " tokens, but the whole pool has " +
                         num(sc.n_blocks),
                     "context_length_exceeded");
  validate_sampling(req.sampling);
  if (req.n_resumed_output < 0 || req.n_resumed_output > n_prompt)
    throw FieldError("resumed_output_tokens", "resumed_output_tokens must be in [0, " + num(n_prompt) +
                                                  "] (the prompt's tokens), got " + num(req.n_resumed_output));
  if (req.n < 1 || req.n > sc.max_num_seqs)
    throw FieldError("n", "n must be in [1, " + num(sc.max_num_seqs) + "] (scheduler.max_num_seqs), got " + num(req.n));
  if (req.prompt_logprobs < -1 || req.prompt_logprobs > kMaxLogprobs)
    throw FieldError("prompt_logprobs", "prompt_logprobs must be -1 (off) or between 0 and " + num(kMaxLogprobs) +
                                            ", got " + num(req.prompt_logprobs));
  std::vector<int32_t> bias_ids;
  for (const LogitBias& b : req.logit_bias) {
    bias_ids.push_back(b.token);
    if (auto bad = check_sampling_value(kLogitBiasRange, b.bias)) throw FieldError("logit_bias", bad->message);
  }
  check_token_ids(bias_ids, cfg_.vocab, "logit_bias");
}

int64_t Engine::submit(Request req) {
  validate(req);
  auto s = std::make_unique<Sequence>();
  s->n_prompt = int64_t(req.prompt.size());
  s->tokens = std::move(req.prompt);
  s->sampling = req.sampling;
  s->max_tokens = req.max_tokens;
  s->ignore_eos = req.ignore_eos;
  s->n_resumed_output = req.n_resumed_output;
  s->eos_ids = std::move(req.eos_ids);
  s->logit_bias = std::move(req.logit_bias);
  s->grammar = std::move(req.grammar);
  if (s->grammar) s->matcher = std::make_shared<ConstraintMatcher>(s->grammar);
  s->prompt_logprobs = req.prompt_logprobs;
  if (req.prompt_logprobs >= 0) s->prompt_lp = std::make_shared<std::vector<TokenLogprobs>>(size_t(s->n_prompt));
  s->on_output = std::move(req.on_output);
  s->kv_import = std::move(req.kv_import);
  s->times.arrival = std::chrono::steady_clock::now();
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n_waiting_published_ + int64_t(inbox_.size()) >= cfg_.max_queued_requests)
      throw QueueFullError("the server is busy: " + num(cfg_.max_queued_requests) +
                           " requests are already waiting (scheduler.max_queued_requests)");
    id = next_id_++;
    s->request_id = id;
    s->id = next_seq_id_;
    for (int32_t i = 1; i < req.n; ++i) s->pending_forks.push_back({next_seq_id_ + i, i});
    next_seq_id_ += req.n;
    inbox_.push_back(std::move(s));
    ++n_unfinished_;
    ++metrics_.n_submitted;
    ++metrics_.n_waiting;
  }
  work_cv_.notify_all();
  return id;
}

void Engine::abort(int64_t request_id, int32_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_inbox_.emplace_back(request_id, index);
  }
  work_cv_.notify_all();
}

bool Engine::has_work() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_unfinished_ > 0 || !export_inbox_.empty() || !release_inbox_.empty();
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return work_cv_.wait_for(lock, timeout, [this] {
    return n_unfinished_ > 0 || !abort_inbox_.empty() || !export_inbox_.empty() || !release_inbox_.empty();
  });
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

bool Engine::step() {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::vector<Delivery> deliveries;
  last_step_ = {};
  const auto t0 = Clock::now();
  const bool applied = apply_inbox(deliveries);
  ScheduledStep s = schedule();
  {  // the queue length submit() checks against max_queued_requests: exact again before the forward runs
    std::lock_guard<std::mutex> lock(mu_);
    n_waiting_published_ = scheduler_.n_waiting();
  }
  schedule_s_ += seconds(Clock::now() - t0);
  if (!s.empty()) {
    const StepResult result = run(s, deliveries);
    const auto t1 = Clock::now();
    postprocess(s, result, deliveries);
    publish(deliveries);  // the callbacks run here: part of postprocessing
    postprocess_s_ += seconds(Clock::now() - t1);
  } else {
    publish(deliveries);
  }
  return applied || !s.empty() || !s.preempted.empty();
}

void Engine::run_until_idle() {
  while (has_work())
    if (!step() && has_work())
      throw Error("engine stalled: " + num(scheduler_.n_waiting()) + " waiting and " + num(scheduler_.n_running()) +
                  " running requests, but nothing could be scheduled");
}

void Engine::shutdown() {
  std::vector<Delivery> deliveries;
  apply_inbox(deliveries);
  for (int64_t id : scheduler_.running_ids()) finish(id, FinishReason::Abort, "", deliveries);
  for (int64_t id : scheduler_.waiting_ids()) finish(id, FinishReason::Abort, "", deliveries);
  publish(deliveries);
  executor_.shutdown();
}

bool Engine::apply_inbox(std::vector<Delivery>& deliveries) {
  std::vector<std::unique_ptr<Sequence>> submits;
  std::vector<std::pair<int64_t, int32_t>> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submits.swap(inbox_);
    aborts.swap(abort_inbox_);
    // They leave the inbox for the scheduler's queue: count them as waiting until step() recounts after
    // scheduling, so submit() cannot overfill the queue in between.
    n_waiting_published_ += int64_t(submits.size());
  }
  const bool kv = apply_kv_inbox();
  for (auto& s : submits) {
    requests_[s->request_id] = {s->id, int32_t(1 + s->pending_forks.size()), int32_t(1 + s->pending_forks.size())};
    if (s->kv_import) import_kv(*s, deliveries);
    scheduler_.add(std::move(s));
  }
  for (const auto& [request_id, index] : aborts) abort_now(request_id, index, deliveries);
  return kv || !submits.empty() || !aborts.empty();
}

void Engine::abort_now(int64_t request_id, int32_t index, std::vector<Delivery>& deliveries) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end() || index >= it->second.n) return;
  const RequestState r = it->second;
  for (int32_t i = 0; i < r.n; ++i) {
    if (index >= 0 && i != index) continue;
    if (scheduler_.find(r.seq_base + i)) {
      finish(r.seq_base + i, FinishReason::Abort, "", deliveries);
      continue;
    }
    // Not a sequence yet: still pending in choice 0, which keeps running.
    Sequence* parent = scheduler_.find(r.seq_base);
    if (!parent) continue;
    auto& pf = parent->pending_forks;
    const auto f = std::find_if(pf.begin(), pf.end(), [&](const PendingFork& p) { return p.index == i; });
    if (f == pf.end()) continue;
    pf.erase(f);
    RequestOutput out;
    out.request_id = request_id;
    out.index = i;
    out.finished = true;
    out.finish_reason = FinishReason::Abort;
    out.n_prompt_tokens = parent->n_prompt;
    out.times = parent->times;
    choice_finished(request_id, FinishReason::Abort);
    deliveries.push_back({parent->on_output, std::move(out)});
  }
}

void Engine::choice_finished(int64_t request_id, FinishReason reason) {
  ++n_finished_;
  if (reason == FinishReason::Abort) ++n_aborted_;
  const auto it = requests_.find(request_id);
  if (it != requests_.end() && --it->second.n_open <= 0) requests_.erase(it);
}

ScheduledStep Engine::schedule() {
  ScheduledStep s = scheduler_.schedule();
  const auto now = std::chrono::steady_clock::now();
  for (const int64_t id : s.admitted)
    if (Sequence* q = scheduler_.find(id); q && q->times.scheduled == SteadyTime{}) q->times.scheduled = now;
  for (const SeqPlan& sp : s.plan.seqs) last_step_.scheduled.emplace_back(sp.seq_id, int64_t(sp.tokens.size()));
  last_step_.preempted = s.preempted;
  last_step_.admitted = s.admitted;
  fill_token_masks(s.plan);
  return s;
}

void Engine::fill_token_masks(StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  bool any = false;
  for (SeqPlan& sp : plan.seqs) {
    if (!sp.want_logits) continue;
    const Sequence* q = scheduler_.find(sp.seq_id);
    if (!q || !q->matcher) continue;
    sp.token_bitmask.resize(size_t(q->matcher->n_mask_words()));
    q->matcher->fill_next_mask(sp.token_bitmask.data());
    any = true;
  }
  if (any) mask_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::chrono::steady_clock::duration Engine::step_running_for() const {
  const int64_t t0 = step_started_ns_.load();
  if (t0 == 0) return {};
  return std::chrono::steady_clock::now().time_since_epoch() - std::chrono::nanoseconds(t0);
}

std::chrono::steady_clock::duration Engine::step_stalled_for() const {
  const int64_t t0 = step_started_ns_.load();
  if (t0 == 0) return {};
  const int64_t last = std::max(t0, executor_.progress_ns());
  return std::chrono::steady_clock::now().time_since_epoch() - std::chrono::nanoseconds(last);
}

StepResult Engine::run(ScheduledStep& s, std::vector<Delivery>& deliveries) {
  StepResult result;
  struct Running {  // step_running_for() sees this step while the executor runs it
    std::atomic<int64_t>& t;
    explicit Running(std::atomic<int64_t>& t0) : t(t0) {
      t.store(std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch()).count()));
    }
    ~Running() { t.store(0); }
  };
  try {
    Running running(step_started_ns_);
    const double forward0 = executor_.times().forward_s;
    executor_.execute(s.plan, result);
    kv_policy_.observe_prefill(s.plan.n_tokens(), executor_.times().forward_s - forward0);
    size_t k = 0;
    for (const SeqPlan& sp : s.plan.seqs) {
      if (!sp.want_logits) continue;
      if (k >= result.seq_ids.size() || result.seq_ids[k] != sp.seq_id || result.tokens.size() != result.seq_ids.size())
        throw Error("step " + num(int64_t(s.plan.step_id)) + ": the executor's result does not match the plan");
      ++k;
    }
    if (k != result.seq_ids.size())
      throw Error("step " + num(int64_t(s.plan.step_id)) + ": the executor returned extra tokens");
  } catch (const std::exception& e) {
    fail_all(e.what(), deliveries);
    publish(deliveries);
    throw;
  }
  ++n_steps_;
  return result;
}

FinishReason Engine::stop_reason(const Sequence& s, int32_t token) const {
  if (!s.ignore_eos && ((cfg_.is_eog && cfg_.is_eog(token)) ||
                        std::find(s.eos_ids.begin(), s.eos_ids.end(), token) != s.eos_ids.end()))
    return FinishReason::Stop;
  if (s.n_generated() >= s.max_tokens) return FinishReason::Length;
  return FinishReason::None;
}

void Engine::collect_prompt_logprobs(const StepResult& result) {
  for (const PromptLogprobs& p : result.prompt_logprobs) {
    Sequence* q = scheduler_.find(p.seq_id);
    if (!q || !q->prompt_lp) throw Error("step result: prompt logprobs for sequence " + num(p.seq_id) + ", which asked none");
    for (size_t j = 0; j < p.entries.size(); ++j) {
      const int64_t pos = p.first_position + int64_t(j);
      if (pos < q->prompt_lp_end) continue;  // recomputed after a preemption: kept from the first time
      if (pos != q->prompt_lp_end || pos >= q->n_prompt)
        throw Error("step result: prompt logprob of position " + num(pos) + " for sequence " + num(q->id) +
                    ", expected " + num(q->prompt_lp_end));
      (*q->prompt_lp)[size_t(pos)] = p.entries[j];
      ++q->prompt_lp_end;
    }
  }
}

void Engine::attach_prompt_logprobs(Sequence& q, RequestOutput& out) {
  if (!q.prompt_lp || q.prompt_lp_sent) return;
  out.prompt_logprobs = q.prompt_lp;
  q.prompt_lp_sent = true;
}

void Engine::postprocess(const ScheduledStep& s, const StepResult& result, std::vector<Delivery>& deliveries) {
  last_step_.forked = scheduler_.commit(s);
  collect_prompt_logprobs(result);
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < result.seq_ids.size(); ++i) {
    Sequence& q = *scheduler_.find(result.seq_ids[i]);
    const int32_t token = result.tokens[i];
    q.tokens.push_back(token);
    if (q.n_generated() == 1) q.times.first_token = now;
    q.times.last_token = now;
    ++n_generation_tokens_;
    FinishReason reason = stop_reason(q, token);
    std::string error;
    if (q.matcher) {
      // The mask allowed only what the grammar accepts; a refusal means the ranks ignored the mask.
      if (!q.matcher->accept(token)) {
        reason = FinishReason::Error;
        error = "sampled token " + num(token) + " which the output grammar does not allow";
      } else if (q.matcher->is_terminated()) {
        reason = FinishReason::Stop;  // the grammar is complete and its end-of-generation token was sampled
      }
    }
    RequestOutput out;
    out.request_id = q.request_id;
    out.index = q.index;
    out.new_tokens = {token};
    if (!result.logprobs.empty() && result.logprobs[i]) out.logprobs = {*result.logprobs[i]};
    attach_prompt_logprobs(q, out);
    out.finished = reason != FinishReason::None;
    out.finish_reason = reason;
    out.error = std::move(error);
    out.n_prompt_tokens = q.n_prompt;
    out.n_generated = q.n_generated();
    out.times = q.times;
    if (!out.finished) {
      deliveries.push_back({q.on_output, std::move(out)});
      continue;
    }
    if (!q.pending_forks.empty()) throw Error("sequence " + num(q.id) + " sampled before forking its choices");
    std::unique_ptr<Sequence> done = scheduler_.remove(q.id);
    last_step_.finished.push_back(done->id);
    choice_finished(done->request_id, reason);
    deliveries.push_back({std::move(done->on_output), std::move(out)});
  }
  // max_tokens == 0: a sequence whose prompt is now computed is done (its planned chunk wanted no logits).
  for (const SeqPlan& sp : s.plan.seqs) {
    const Sequence* q = scheduler_.find(sp.seq_id);
    if (q && q->max_tokens == 0 && q->pending_forks.empty() &&
        scheduler_.block_manager().n_computed(q->id) == int64_t(q->tokens.size()))
      finish(q->id, FinishReason::Length, "", deliveries);
  }
}

void Engine::finish(int64_t seq_id, FinishReason reason, const std::string& error, std::vector<Delivery>& deliveries) {
  std::unique_ptr<Sequence> done = scheduler_.remove(seq_id);
  if (!done) return;
  last_step_.finished.push_back(seq_id);
  RequestOutput out;
  out.request_id = done->request_id;
  out.finished = true;
  out.finish_reason = reason;
  out.error = error;
  out.n_prompt_tokens = done->n_prompt;
  out.times = done->times;
  if (reason == FinishReason::Length) attach_prompt_logprobs(*done, out);  // max_tokens == 0
  for (const PendingFork& f : done->pending_forks) {  // choices never forked end with it, with nothing generated
    RequestOutput o = out;
    o.index = f.index;
    choice_finished(done->request_id, reason);
    deliveries.push_back({done->on_output, std::move(o)});
  }
  out.index = done->index;
  out.n_generated = done->n_generated();
  choice_finished(done->request_id, reason);
  deliveries.push_back({std::move(done->on_output), std::move(out)});
}

void Engine::fail_all(const std::string& error, std::vector<Delivery>& deliveries) {
  apply_inbox(deliveries);
  for (int64_t id : scheduler_.running_ids()) finish(id, FinishReason::Error, error, deliveries);
  for (int64_t id : scheduler_.waiting_ids()) finish(id, FinishReason::Error, error, deliveries);
}

void Engine::publish(std::vector<Delivery>& deliveries) {
  const BlockManager& bm = scheduler_.block_manager();
  {
    std::lock_guard<std::mutex> lock(mu_);
    n_unfinished_ = scheduler_.n_running() + scheduler_.n_waiting() + int64_t(inbox_.size());
    n_waiting_published_ = scheduler_.n_waiting();
    EngineMetrics& m = metrics_;
    m.n_running = scheduler_.n_running();
    m.n_waiting = scheduler_.n_waiting() + int64_t(inbox_.size());
    m.n_blocks = bm.n_blocks();
    m.n_blocks_in_use = bm.n_in_use();
    m.kv_usage = bm.usage();
    m.prefix_query_tokens = bm.prefix_stats().n_query_tokens;
    m.prefix_hit_tokens = bm.prefix_stats().n_hit_tokens;
    m.n_held_blocks = bm.n_held_blocks();
    m.n_held_evicted = bm.n_held_evicted();
    m.n_prompt_tokens = scheduler_.n_prompt_tokens();
    m.n_generation_tokens = n_generation_tokens_;
    m.n_computed_tokens = scheduler_.n_computed_tokens();
    m.n_preemptions = scheduler_.n_preemptions();
    m.n_steps = n_steps_;
    m.n_finished = n_finished_;
    m.n_aborted = n_aborted_;
    m.executor_times = executor_.times();
    m.schedule_s = schedule_s_;
    m.postprocess_s = postprocess_s_;
    const EngineMetrics& k = kv_counts_;
    m.kv_fetch_requests = k.kv_fetch_requests;
    m.kv_fetches = k.kv_fetches;
    m.kv_fetch_failures = k.kv_fetch_failures;
    m.kv_fetch_recompute_by_cost = k.kv_fetch_recompute_by_cost;
    m.kv_fetched_blocks = k.kv_fetched_blocks;
    m.kv_fetched_tokens = k.kv_fetched_tokens;
    m.kv_fetched_bytes = k.kv_fetched_bytes;
    m.kv_fetch_seconds = k.kv_fetch_seconds;
    m.kv_exports = k.kv_exports;
    m.kv_exported_blocks = k.kv_exported_blocks;
    m.kv_pins = int64_t(kv_pins_.size());
  }
  for (Delivery& d : deliveries)
    if (d.callback) d.callback(d.output);
  deliveries.clear();
}

std::string Engine::startup_report() const {
  const SchedulerConfig& sc = cfg_.scheduler;
  const KvFootprint& fp = cfg_.kv_footprint;
  std::string r;
  if (fp.bytes_per_token > 0) {
    const int64_t budget =
        cfg_.kv_budget_bytes > 0 ? cfg_.kv_budget_bytes : int64_t(sc.n_blocks) * sc.block_size * fp.bytes_per_token;
    r = capacity_report(fp, budget, sc.block_size, sc.max_context);
  } else {
    r = "KV pool: " + num(sc.n_blocks) + " blocks of " + num(sc.block_size) + " tokens = " +
        num(int64_t(sc.n_blocks) * sc.block_size) + " tokens\n";
  }
  if (sc.reservation == KvReservation::Static)
    r += "scheduler: static reservation of " + num(sc.max_context) + " tokens per request: at most " +
         num(sc.n_blocks / sc.blocks_for(sc.max_context)) + " running";
  else
    r += "scheduler: paged KV (blocks on demand, preemption by recompute)";
  r += ", max_num_seqs " + num(sc.max_num_seqs) + ", max_num_batched_tokens " + num(sc.max_num_batched_tokens) +
       ", prefix caching " + (sc.prefix_caching ? "on" : "off") + "\n";
  return r;
}

}  // namespace tp
