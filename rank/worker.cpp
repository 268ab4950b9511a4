#include "rank/worker.h"

#include <cstring>

#include "common/error.h"

namespace tp {

Worker::Worker(LlamaModel& model, KvPool& pool, Communicator* comm)
    : model_(model), pool_(pool), comm_(comm && comm->size() > 1 ? comm : nullptr) {}

void Worker::execute(const StepPlan& plan, std::vector<float>& logits) {
  const KvPoolShape& s = pool_.shape();
  const size_t block_floats = size_t(s.floats_per_block());
  for (const BlockCopy& c : plan.block_copies) {
    if (c.src >= s.n_blocks || c.dst >= s.n_blocks) throw Error("step plan copies a block outside the pool");
    for (int64_t l = 0; l < s.n_layers; ++l) {
      std::memcpy(pool_.k(l) + c.dst * block_floats, pool_.k(l) + c.src * block_floats, block_floats * sizeof(float));
      std::memcpy(pool_.v(l) + c.dst * block_floats, pool_.v(l) + c.src * block_floats, block_floats * sizeof(float));
    }
  }
  for (const SeqPlan& sp : plan.seqs)
    for (int32_t b : sp.block_table)
      if (b >= s.n_blocks) throw Error("step plan names block " + std::to_string(b) + " of a pool of " + std::to_string(s.n_blocks));
  model_.forward(plan.seqs, pool_, logits);
}

void Worker::lead(StepPlan& plan, std::vector<float>& logits) {
  if (!is_leader()) throw Error("Worker::lead called on a follower rank");
  if (shut_down_) throw Error("Worker::lead after shutdown");
  plan.kind = StepKind::Run;
  plan.step_id = next_step_++;
  if (comm_) broadcast_plan(*comm_, plan, 0);
  execute(plan, logits);
}

void Worker::lead(StepPlan& plan, StepResult& result) {
  lead(plan, logits_);
  result.step_id = plan.step_id;
  result.seq_ids.clear();
  result.tokens.clear();
  const int64_t vocab = model_.config().vocab;
  int64_t row = 0;
  for (const SeqPlan& s : plan.seqs) {
    if (!s.want_logits) continue;
    const uint64_t position = uint64_t(s.start_pos) + s.tokens.size();
    result.seq_ids.push_back(s.seq_id);
    result.tokens.push_back(sampler_.sample(logits_.data() + row * vocab, vocab, s.sampling, position));
    ++row;
  }
}

void Worker::shutdown() {
  if (shut_down_ || !is_leader()) return;
  shut_down_ = true;
  if (!comm_) return;
  StepPlan bye;
  bye.kind = StepKind::Shutdown;
  bye.step_id = next_step_++;
  broadcast_plan(*comm_, bye, 0);
}

void Worker::serve() {
  if (!comm_) return;
  std::vector<float> logits;
  for (;;) {
    StepPlan plan;
    broadcast_plan(*comm_, plan, 0);
    if (plan.kind == StepKind::Shutdown) return;
    execute(plan, logits);
  }
}

}  // namespace tp
