// The Worker of one rank: executes StepPlans on its model shard and KV pool (DESIGN.md §1, §3).
// TP rank 0 leads: lead() broadcasts the plan to the group, then runs it; the other ranks sit in serve(),
// receiving and running plans until the leader's shutdown(). Logits come back complete on the leader.
#pragma once
#include <cstdint>
#include <vector>

#include "kvstore/kv_pool.h"
#include "parallel/communicator.h"
#include "parallel/step_plan.h"
#include "rank/llama_model.h"
#include "rank/sampler.h"

namespace tp {

class Worker {
 public:
  // comm: the TP group (nullptr: a group of one). The model must have been built on the same group.
  Worker(LlamaModel& model, KvPool& pool, Communicator* comm);

  // Leader only: runs `plan` on every rank; logits [seqs with want_logits, vocab].
  void lead(StepPlan& plan, std::vector<float>& logits);
  // Leader only: runs `plan` and samples the next token of every sequence with want_logits, with its own
  // SamplingParams, at position start_pos + tokens.size(). result: step_id, seq_ids and tokens in plan order.
  void lead(StepPlan& plan, StepResult& result);
  // Leader only: releases the other ranks from serve(). Idempotent.
  void shutdown();
  // Followers: runs plans from the leader until shutdown.
  void serve();

  LlamaModel& model() { return model_; }
  KvPool& pool() { return pool_; }
  bool is_leader() const { return !comm_ || comm_->rank() == 0; }

 private:
  void execute(const StepPlan& plan, std::vector<float>& logits);

  LlamaModel& model_;
  KvPool& pool_;
  Communicator* comm_;
  Sampler sampler_;
  std::vector<float> logits_;
  uint64_t next_step_ = 0;
  bool shut_down_ = false;
};

}  // namespace tp
