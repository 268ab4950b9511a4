// Engine: the coordinator's serving loop over one TP group. Requests come in (submit, from any thread),
// the Scheduler batches them, the StepExecutor runs each StepPlan on the ranks, and every request gets its
// tokens back through its callback as they are sampled.
//
//   bool Engine::step():  schedule → run → postprocess      (nano-vllm's three lines)
//
// Postprocess: record the planned tokens as computed (BlockManager::commit_tokens, so full blocks enter
// the prefix index; pending choices are forked), append the sampled tokens, check stops (max_tokens →
// "length"; an eos id or is_eog unless ignore_eos → "stop"; the stop token is delivered), deliver outputs,
// free finished sequences.
//
// Ids. A request (id 0, 1, 2, ... in submit order) with n choices owns n consecutive sequence ids; choice i
// is sequence seq_base + i (coordinator/sequence.h). Plans, StepRecord and the scheduler use sequence ids.
//
// Threads. submit(), abort(), has_work(), wait_for_work() and metrics() may be called from any thread.
// step(), run_until_idle() and shutdown() run on the engine thread — the only thread that calls the
// executor (and so the only one making MPI calls). Submits and aborts are queued and take effect at the
// start of the next step(); callbacks run on the engine thread with no engine lock held.
//
// Failure: when the executor throws (a rank died or timed out), every request — running and waiting —
// is finished with FinishReason::Error and the message, and step() rethrows.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "coordinator/kv_fetch_policy.h"
#include "coordinator/kv_import.h"
#include "coordinator/request.h"
#include "coordinator/scheduler.h"
#include "coordinator/step_executor.h"
#include "kvstore/capacity.h"

namespace tp {

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t max_queued_requests = 1024;  // waiting (not yet running) requests before QueueFullError, >= 1
  int64_t vocab = 0;                   // > 0: prompt token ids are checked against [0, vocab)
  std::function<bool(int32_t)> is_eog; // end-of-generation tokens (Tokenizer::is_eog); empty: none
  // For the start-up report (per rank). kv_budget_bytes 0: n_blocks x block bytes.
  KvFootprint kv_footprint;
  int64_t kv_budget_bytes = 0;
};

// The engine config of a served model: the scheduler and cache sections of `cfg`; n_blocks =
// kv_pool_plan(fp, cache.memory_mb MiB, block_size).n_blocks — the same count ModelGroup gives its KvPool
// (fp: the per-rank footprint of the pool in its cache.dtype); max_context = cache.max_context, or the model's.
EngineConfig make_engine_config(const Config& cfg, const KvFootprint& fp, int64_t model_max_context, int64_t vocab);

// Counters for /metrics, snapshot after the latest step. Formulas:
//   kv_usage             = n_blocks_in_use / n_blocks (blocks held by running sequences)
//   prefix_hit_rate      = prefix_hit_tokens / prefix_query_tokens (per allocation, readmissions included)
//   n_prompt_tokens      = sum of prompt lengths over requests admitted (counted once per request)
//   n_generation_tokens  = tokens delivered to requests
//   n_computed_tokens    = tokens run through the model (prefill + decode, recomputation included)
struct EngineMetrics {
  int64_t n_running = 0;
  int64_t n_waiting = 0;             // in the scheduler's queue plus submitted but not yet seen by a step
  int64_t n_blocks = 0;
  int64_t n_blocks_in_use = 0;
  double kv_usage = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t n_held_blocks = 0;         // cached blocks a waiting request holds (BlockManager::hold_prefix)
  int64_t n_held_evicted = 0;        // held blocks evicted anyway (nothing else was evictable), since start
  int64_t n_prompt_tokens = 0;
  int64_t n_generation_tokens = 0;
  int64_t n_computed_tokens = 0;
  int64_t n_preemptions = 0;
  int64_t n_steps = 0;               // forwards run
  int64_t n_submitted = 0;
  int64_t n_finished = 0;            // choices finished, every reason
  int64_t n_aborted = 0;             // choices aborted
  // Where the steps' time went (seconds, cumulative): the executor's parts (ExecutorTimes) and the engine's
  // own — schedule (admission, block allocation, plan building) and postprocess (tokens appended, stops,
  // deliveries to the requests' callbacks).
  ExecutorTimes executor_times;
  double schedule_s = 0;
  double postprocess_s = 0;
  // KV blocks between replicas (coordinator/engine_kv.cpp). Receiver: requests that named a holder; fetches the
  // ranks ran; failures (holder unreachable, refused, timeout, checksum) — each one recomputed its prompt; prompts
  // the cost said to recompute (kv_fetch_policy.h); blocks, tokens and bytes (per rank) fetched; seconds spent
  // fetching. Holder: exports answered, blocks offered, pins held now.
  int64_t kv_fetch_requests = 0;
  int64_t kv_fetches = 0;
  int64_t kv_fetch_failures = 0;
  int64_t kv_fetch_recompute_by_cost = 0;
  int64_t kv_fetched_blocks = 0;
  int64_t kv_fetched_tokens = 0;
  int64_t kv_fetched_bytes = 0;
  double kv_fetch_seconds = 0;
  int64_t kv_exports = 0;
  int64_t kv_exported_blocks = 0;
  int64_t kv_pins = 0;
};

// What the latest step did (tests, debugging).
struct StepRecord {
  std::vector<std::pair<int64_t, int64_t>> scheduled;  // (sequence id, tokens planned), plan order
  std::vector<int64_t> preempted;                      // sequence ids
  std::vector<int64_t> admitted;                       // sequence ids
  std::vector<int64_t> forked;                         // sequence ids of choices forked after this step
  std::vector<int64_t> finished;                       // sequence ids finished in this step, aborts included
};

class Engine {
 public:
  // Throws InputError for an invalid config. The executor must outlive the engine.
  Engine(EngineConfig cfg, StepExecutor& executor, BlockManagerOptions bm_options = {});
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; returns its id (0, 1, 2, ... in submit order). Throws FieldError naming
  // the field: empty prompt, bad token id, sampling value, logit_bias or prompt_logprobs, n outside
  // [1, max_num_seqs], max_tokens < 0, prompt + max_tokens > max_context, or (paged) more tokens than the
  // whole pool holds — such a request could never finish (code "context_length_exceeded" for the last two).
  // QueueFullError when max_queued_requests are waiting. Nothing is queued when it throws.
  int64_t submit(Request req);
  // Aborts a waiting or running request at the next step — every choice, or only choice `index` (>= 0):
  // its blocks are freed and each aborted choice gets a finished output with FinishReason::Abort. Unknown
  // or finished ids are ignored.
  void abort(int64_t request_id, int32_t index = -1);

  // One engine iteration. Returns true when it did anything (a forward ran, or a submit/abort was applied).
  bool step();
  // Steps until no request is left. Throws Error if the engine cannot make progress (a bug).
  void run_until_idle();
  // Aborts every request and shuts the executor down. Engine thread.
  void shutdown();

  // Any unfinished request (submitted, waiting or running)?
  bool has_work() const;
  // Blocks until has_work() or the timeout; returns has_work(). For an idle engine thread.
  bool wait_for_work(std::chrono::milliseconds timeout);

  EngineMetrics metrics() const;

  // ---- KV blocks between replicas (coordinator/engine_kv.cpp; kv_import.h) ----------------------------------
  // Holder, any thread: pins the longest cached prefix of `tokens` (whole blocks) until release_kv_pin(pin_id) or
  // `pin_for` passes, so a fetcher can read them; the engine thread answers at its next step. Throws Error when
  // the engine thread does not answer within `wait`. pin_id 0 and no blocks when nothing is cached.
  KvExport export_kv(std::vector<int32_t> tokens, std::chrono::milliseconds pin_for, std::chrono::milliseconds wait);
  // Any thread: releases a pin (unknown or expired ids are ignored).
  void release_kv_pin(uint64_t pin_id);
  // The fetch-or-recompute policy (start-up link measurement before serving; engine thread afterwards).
  KvFetchPolicy& kv_policy() { return kv_policy_; }
  // How long the executor has been running the current step; zero when no step is running. Any thread
  // (the server's watchdog: a rank that stopped responding while alive leaves a step running forever).
  std::chrono::steady_clock::duration step_running_for() const;
  // How long the running step has made no progress: since it began, or since the executor's latest progress
  // (StepExecutor::progress_ns) within it, whichever is later; zero when no step is running. Any thread (the
  // watchdog: a long step that keeps progressing is healthy; a rank that stopped leaves this growing).
  std::chrono::steady_clock::duration step_stalled_for() const;
  // The KV capacity lines (kvstore/capacity.h capacity_report) and the scheduler's limits.
  std::string startup_report() const;

  // Engine thread only.
  const Scheduler& scheduler() const { return scheduler_; }
  // KV events recorded since the previous call (empty unless BlockManagerOptions::record_events), to publish.
  std::vector<KvEvent> take_kv_events() { return scheduler_.take_kv_events(); }
  const StepRecord& last_step() const { return last_step_; }
  const EngineConfig& config() const { return cfg_; }
  // Seconds spent filling structured-output token masks (fill_token_masks) since start; engine thread.
  double token_mask_seconds() const { return mask_s_; }

 private:
  struct Delivery {
    OutputCallback callback;
    RequestOutput output;
  };

  void validate(const Request& req) const;
  bool apply_inbox(std::vector<Delivery>& deliveries);  // true when it applied anything
  ScheduledStep schedule();                             // Scheduler::schedule, recorded in last_step_
  StepResult run(ScheduledStep& s, std::vector<Delivery>& deliveries);
  void postprocess(const ScheduledStep& s, const StepResult& result, std::vector<Delivery>& deliveries);
  // Stores the step's prompt logprobs into their sequences (position order; recomputed ones are skipped).
  void collect_prompt_logprobs(const StepResult& result);
  // Puts q's prompt logprobs on `out` the first time q delivers (when the request asked for them).
  static void attach_prompt_logprobs(Sequence& q, RequestOutput& out);
  // Finishes sequence `seq_id` (and the choices still pending in it) with `reason`.
  void finish(int64_t seq_id, FinishReason reason, const std::string& error, std::vector<Delivery>& deliveries);
  void abort_now(int64_t request_id, int32_t index, std::vector<Delivery>& deliveries);
  // One finished choice of a request: request bookkeeping and the counters.
  void choice_finished(int64_t request_id, FinishReason reason);
  void fail_all(const std::string& error, std::vector<Delivery>& deliveries);
  // Engine thread, in apply_inbox: answers exports, applies releases, drops expired pins. True when it did any.
  bool apply_kv_inbox();
  // Engine thread, before `s` is scheduled: fetches the blocks its KvImport offers (or decides not to) and enters
  // them in the prefix cache; any failure leaves the prompt to be recomputed. Throws only when the executor
  // failed (a rank died).
  void import_kv(Sequence& s, std::vector<Delivery>& deliveries);
  void publish(std::vector<Delivery>& deliveries);
  FinishReason stop_reason(const Sequence& s, int32_t token) const;
  // For every sequence of `plan` that samples under a grammar: its matcher's next-token bitmask into
  // SeqPlan::token_bitmask.
  void fill_token_masks(StepPlan& plan);

  const EngineConfig cfg_;
  StepExecutor& executor_;
  Scheduler scheduler_;
  StepRecord last_step_;
  std::atomic<int64_t> step_started_ns_{0};  // steady clock ns when the running step began; 0: none
  int64_t n_generation_tokens_ = 0, n_steps_ = 0, n_finished_ = 0, n_aborted_ = 0;
  double schedule_s_ = 0, postprocess_s_ = 0, mask_s_ = 0;
  struct RequestState {
    int64_t seq_base = 0;  // choice i is sequence seq_base + i
    int32_t n = 1;
    int32_t n_open = 1;    // choices not finished yet
  };
  std::unordered_map<int64_t, RequestState> requests_;  // engine thread: requests the scheduler has

  struct ExportJob {
    std::vector<int32_t> tokens;
    std::chrono::milliseconds pin_for{0};
    std::promise<KvExport> answer;
  };
  struct KvPin {
    int64_t seq_id = 0;  // the BlockManager sequence holding the blocks
    std::chrono::steady_clock::time_point expires;
  };
  static constexpr int64_t kKvSeqBase = int64_t(1) << 60;  // BlockManager ids of pins and imports
  std::unordered_map<uint64_t, KvPin> kv_pins_;            // engine thread
  uint64_t next_pin_id_ = 1;
  int64_t next_kv_seq_ = kKvSeqBase;
  KvFetchPolicy kv_policy_;
  EngineMetrics kv_counts_;  // engine thread: only the kv_* fields, copied into metrics_ by publish()

  mutable std::mutex mu_;  // guards everything below
  std::vector<std::shared_ptr<ExportJob>> export_inbox_;
  std::vector<uint64_t> release_inbox_;
  std::condition_variable work_cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<std::pair<int64_t, int32_t>> abort_inbox_;  // (request id, choice index or -1)
  int64_t next_id_ = 0;
  int64_t next_seq_id_ = 0;
  int64_t n_unfinished_ = 0;       // submitted and not yet finished
  int64_t n_waiting_published_ = 0;
  EngineMetrics metrics_;
};

}  // namespace tp
