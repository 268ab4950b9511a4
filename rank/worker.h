// The Worker of one rank: executes StepPlans on its model shard and KV pool (DESIGN.md §1, §3).
// TP rank 0 leads: lead() broadcasts the plan to the group, then runs it; the other ranks sit in serve(),
// receiving and running plans until the leader's shutdown(). Logits come back complete on the leader.
#pragma once
#include <cstdint>
#include <vector>

#include "kvstore/kv_pool.h"
#include "parallel/communicator.h"
#include "parallel/kv_fetch_order.h"
#include "parallel/step_plan.h"
#include "rank/llama_model.h"
#include "rank/sampler.h"
#include "rank/token_bitmask.h"

namespace tp {

class KvTransferAgent;

class Worker {
 public:
  // comm: the TP group (nullptr: a group of one). The model must have been built on the same group.
  Worker(LlamaModel& model, KvPool& pool, Communicator* comm);

  // Leader only: runs `plan` on every rank; logits [sum of n_logit_rows(), vocab] (LlamaModel::forward). The
  // followers receive the plan without the sequences' history and logit_bias (empty, n_history_prompt 0);
  // `plan` is left as it came, but for kind and step_id.
  void lead(StepPlan& plan, std::vector<float>& logits);
  // Leader only: runs `plan` and samples the next token of every sequence with want_logits, with its own
  // SamplingParams (penalties from SeqPlan::history, SeqPlan::logit_bias), at position start_pos +
  // tokens.size(). result: step_id, seq_ids and tokens in plan order; logprobs [n] (of the raw logits, nullopt
  // for sequences with sampling.logprobs -1) when any sampled sequence asked for them, else empty;
  // prompt_logprobs for every sequence that sent prompt_targets.
  void lead(StepPlan& plan, StepResult& result);
  // This rank's KV transfer agent (kvstore/kv_transfer.h; it must outlive the worker), or null: fetch orders
  // then fail on this rank. Every rank sets its own.
  void set_kv_agent(KvTransferAgent* agent) { kv_agent_ = agent; }
  // Leader only: every rank t pulls order.holder_blocks from order.holder_addresses[t] into its local_blocks
  // (rank/kv_fetch.h), then one all-reduce tells whether all succeeded. ok only when every rank's did; the
  // error names the leader's failure or the ranks that failed. Throws only when a collective fails.
  KvFetchOutcome fetch_kv(KvFetchOrder& order);
  // Leader only: releases the other ranks from serve(). Idempotent.
  void shutdown();
  // Followers: runs plans from the leader until shutdown.
  void serve();
  // Followers: runs the leader's next plan; false when it was the shutdown (for a caller that drives several
  // workers over one group, e.g. `tpserve eval` with a reference model).
  bool serve_one();

  LlamaModel& model() { return model_; }
  const LlamaModel& model() const { return model_; }
  KvPool& pool() { return pool_; }
  bool is_leader() const { return !comm_ || comm_->rank() == 0; }
  // Seconds the leader spent sampling (and computing logprobs) after the forwards, cumulative.
  double sample_seconds() const { return sample_s_; }

 private:
  // Runs the plan on this rank's shard; SeqPlan::history is not read (only the leader samples).
  void execute(const StepPlan& plan, std::vector<float>& logits);
  // broadcast_plan with every sequence's history held back on the leader, restored afterwards (also when
  // the broadcast throws).
  void broadcast_without_history(StepPlan& plan);

  struct HeldHistory {  // what only the sampling leader reads
    std::vector<int32_t> history;
    int64_t n_prompt = 0;
    std::vector<LogitBias> logit_bias;
    std::vector<int32_t> token_bitmask;
  };

  // Every rank: runs `order` on this rank and agrees with the others on the outcome.
  KvFetchOutcome execute_fetch(const KvFetchOrder& order);

  LlamaModel& model_;
  KvPool& pool_;
  KvTransferAgent* kv_agent_ = nullptr;
  Communicator* comm_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::vector<HeldHistory> held_;
  std::vector<MaskedRow> masked_;  // [sequences with a token bitmask] scratch of lead  // [plan.seqs] scratch of broadcast_without_history
  uint64_t next_step_ = 0;
  double sample_s_ = 0;
  bool shut_down_ = false;
};

}  // namespace tp
