// What the engine needs from the ranks: run one StepPlan on the whole TP group and return the token sampled
// for every sequence that wanted logits. The coordinator never touches tensors (DESIGN.md §1): launch/
// adapts a rank's Worker to this interface; tests use a fake.
#pragma once
#include <cstdint>

#include "parallel/kv_fetch_order.h"
#include "parallel/step_plan.h"

namespace tp {

// Seconds the ranks' side of the steps took so far (cumulative, as measured on the leader), by part:
//   forward = linear + attention + communication + the rest (norms, rope, embedding, KV writes);
//   linear: the matrix products (communication excluded); communication: all-reduce + all-gather waits;
//   sample: sampling and logprobs on the leader after the forward.
struct ExecutorTimes {
  double forward_s = 0, linear_s = 0, attention_s = 0, comm_s = 0, sample_s = 0;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Runs the plan (assigning its step_id). result.seq_ids/tokens: one entry per seq with want_logits, in
  // plan order. Throws tp::Error when a rank fails.
  virtual void execute(StepPlan& plan, StepResult& result) = 0;
  // Every rank pulls its partition of KV blocks from another replica (parallel/kv_fetch_order.h). A failed
  // transfer is an outcome (ok false), not an exception; throws tp::Error only when a rank fails. The default:
  // this executor cannot fetch.
  virtual KvFetchOutcome fetch_kv(KvFetchOrder&) {
    KvFetchOutcome o;
    o.error = "this executor does not move KV blocks between replicas";
    return o;
  }
  // Ends the ranks' serve loops; idempotent.
  virtual void shutdown() = 0;
  // Steady-clock nanoseconds of the latest progress inside the running step (the ranks' forward finished a
  // layer — with tp > 1, a collective every rank took part in); 0 when the executor cannot say. Any thread.
  virtual int64_t progress_ns() const { return 0; }
  // The cumulative ExecutorTimes; zeros when the executor does not measure them. Engine thread.
  virtual ExecutorTimes times() const { return {}; }
};

}  // namespace tp
