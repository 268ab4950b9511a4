// What the engine needs from the ranks: run one StepPlan on the whole TP group and return the token sampled
// for every sequence that wanted logits. The coordinator never touches tensors (DESIGN.md §1): launch/
// adapts a rank's Worker to this interface; tests use a fake.
#pragma once
#include <cstdint>

#include "parallel/step_plan.h"

namespace tp {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Runs the plan (assigning its step_id). result.seq_ids/tokens: one entry per seq with want_logits, in
  // plan order. Throws tp::Error when a rank fails.
  virtual void execute(StepPlan& plan, StepResult& result) = 0;
  // Ends the ranks' serve loops; idempotent.
  virtual void shutdown() = 0;
  // Steady-clock nanoseconds of the latest progress inside the running step (the ranks' forward finished a
  // layer — with tp > 1, a collective every rank took part in); 0 when the executor cannot say. Any thread.
  virtual int64_t progress_ns() const { return 0; }
};

}  // namespace tp
