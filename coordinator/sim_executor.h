// The simulator's StepExecutor: instead of a forward pass it prices the plan with the CostModel and "samples"
// a fixed token (kSimToken) for every sequence that wants logits. last_cost() is the modelled time of the
// latest step; times() sums the parts like the real executor's measurements (forward = linear + lm_head +
// attention + comm + overhead; sample 0).
#pragma once
#include "coordinator/sim_cost_model.h"
#include "coordinator/step_executor.h"

namespace tp {

inline constexpr int32_t kSimToken = 1;

class SimExecutor final : public StepExecutor {
 public:
  explicit SimExecutor(CostModel model) : model_(std::move(model)) {}
  void execute(StepPlan& plan, StepResult& result) override;
  void shutdown() override {}
  ExecutorTimes times() const override { return times_; }
  const StepCost& last_cost() const { return last_; }

 private:
  CostModel model_;
  StepCost last_;
  ExecutorTimes times_;
  uint64_t next_step_ = 0;
};

}  // namespace tp
