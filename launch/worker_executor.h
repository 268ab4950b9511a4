// Adapts the leader rank's Worker to the coordinator's StepExecutor.
#pragma once
#include "coordinator/step_executor.h"
#include "rank/worker.h"

namespace tp {

class WorkerExecutor final : public StepExecutor {
 public:
  explicit WorkerExecutor(Worker& w) : worker_(w) {}
  void execute(StepPlan& plan, StepResult& result) override { worker_.lead(plan, result); }
  void shutdown() override { worker_.shutdown(); }
  KvFetchOutcome fetch_kv(KvFetchOrder& order) override { return worker_.fetch_kv(order); }
  int64_t progress_ns() const override { return worker_.model().progress_ns(); }
  ExecutorTimes times() const override {
    const ForwardTimes& f = worker_.model().times();
    return {f.total_s, f.linear_s, f.attention_s, f.comm_s, worker_.sample_seconds()};
  }

 private:
  Worker& worker_;
};

}  // namespace tp
