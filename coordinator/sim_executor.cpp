#include "coordinator/sim_executor.h"

namespace tp {

void SimExecutor::execute(StepPlan& plan, StepResult& result) {
  plan.step_id = next_step_++;
  last_ = model_.step(plan);
  result = StepResult{};
  result.step_id = plan.step_id;
  for (const SeqPlan& s : plan.seqs)
    if (s.want_logits) {
      result.seq_ids.push_back(s.seq_id);
      result.tokens.push_back(kSimToken);
    }
  times_.forward_s += last_.total_s();
  times_.linear_s += last_.linear_s + last_.lm_head_s;
  times_.attention_s += last_.attention_s;
  times_.comm_s += last_.comm_s;
}

}  // namespace tp
