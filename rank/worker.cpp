#include "rank/worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "common/error.h"
#include "rank/kv_fetch.h"

namespace tp {

Worker::Worker(LlamaModel& model, KvPool& pool, Communicator* comm)
    : model_(model), pool_(pool), comm_(comm && comm->size() > 1 ? comm : nullptr) {}

void Worker::execute(const StepPlan& plan, std::vector<float>& logits) {
  const KvPoolShape& s = pool_.shape();
  for (const BlockCopy& c : plan.block_copies) {
    if (c.src < 0 || c.dst < 0 || c.src >= s.n_blocks || c.dst >= s.n_blocks)
      throw Error("step plan copies a block outside the pool");
    pool_.copy_block(c.src, c.dst);  // every layer, K and V, with their block scales
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
  if (comm_) broadcast_without_history(plan);
  execute(plan, logits);
}

void Worker::broadcast_without_history(StepPlan& plan) {
  // Followers never sample: the histories stay here (moved out and back, O(1) per sequence).
  held_.resize(plan.seqs.size());
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    SeqPlan& s = plan.seqs[i];
    held_[i].history = std::move(s.history);
    held_[i].n_prompt = std::exchange(s.n_history_prompt, 0);
    held_[i].logit_bias = std::move(s.logit_bias);
    held_[i].token_bitmask = std::move(s.token_bitmask);
    s.history.clear();
    s.logit_bias.clear();
    s.token_bitmask.clear();
  }
  const auto restore = [&] {
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      plan.seqs[i].history = std::move(held_[i].history);
      plan.seqs[i].n_history_prompt = held_[i].n_prompt;
      plan.seqs[i].logit_bias = std::move(held_[i].logit_bias);
      plan.seqs[i].token_bitmask = std::move(held_[i].token_bitmask);
      held_[i].history.clear();
      held_[i].logit_bias.clear();
      held_[i].token_bitmask.clear();
    }
  };
  try {
    broadcast_plan(*comm_, plan, 0);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

void Worker::lead(StepPlan& plan, StepResult& result) {
  lead(plan, logits_);
  const auto t0 = std::chrono::steady_clock::now();
  struct AddTime {
    std::chrono::steady_clock::time_point t0;
    double& acc;
    ~AddTime() { acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } add_time{t0, sample_s_};
  result.step_id = plan.step_id;
  result.seq_ids.clear();
  result.tokens.clear();
  result.logprobs.clear();
  result.prompt_logprobs.clear();
  const bool any_logprobs = std::any_of(plan.seqs.begin(), plan.seqs.end(),
                                        [](const SeqPlan& s) { return s.want_logits && s.sampling.logprobs >= 0; });
  const int64_t vocab = model_.config().vocab;
  // Structured output: every sampling row's token bitmask first, over the whole batch (token_bitmask.h).
  masked_.clear();
  int64_t mask_row = 0;
  for (const SeqPlan& s : plan.seqs) {
    mask_row += int64_t(s.prompt_targets.size());
    if (!s.want_logits) continue;
    if (!s.token_bitmask.empty()) masked_.push_back({mask_row, s.token_bitmask});
    ++mask_row;
  }
  apply_token_bitmasks(logits_.data(), vocab, masked_);
  int64_t row = 0;
  for (const SeqPlan& s : plan.seqs) {
    if (!s.prompt_targets.empty()) {
      PromptLogprobs& p = result.prompt_logprobs.emplace_back();
      p.seq_id = s.seq_id;
      p.first_position = s.start_pos + 1;
      for (const int32_t target : s.prompt_targets)
        p.entries.push_back(sampler_.logprobs(logits_.data() + (row++) * vocab, vocab, target, s.prompt_logprobs));
    }
    if (!s.want_logits) continue;
    const float* logits = logits_.data() + row * vocab;
    const uint64_t position = uint64_t(s.start_pos) + s.tokens.size();
    const int32_t token =
        sampler_.sample(logits, vocab, s.sampling, position, s.history, s.n_history_prompt, s.logit_bias);
    result.seq_ids.push_back(s.seq_id);
    result.tokens.push_back(token);
    if (any_logprobs) {
      if (s.sampling.logprobs >= 0)
        result.logprobs.emplace_back(sampler_.logprobs(logits, vocab, token, s.sampling.logprobs));
      else
        result.logprobs.emplace_back(std::nullopt);
    }
    ++row;
  }
}

KvFetchOutcome Worker::execute_fetch(const KvFetchOrder& order) {
  KvFetchOutcome mine = run_kv_fetch(kv_agent_, order, comm_ ? comm_->rank() : 0);
  if (!comm_) return mine;
  std::vector<float> failed(size_t(comm_->size()), 0.0f);  // [tp] 1 where that rank failed
  failed[size_t(comm_->rank())] = mine.ok ? 0.0f : 1.0f;
  comm_->all_reduce_sum(failed.data(), failed.size());
  std::string others;
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r] > 0.5f && int(r) != comm_->rank()) others += (others.empty() ? "" : ", ") + std::to_string(r);
  if (!others.empty()) {
    mine.ok = false;
    mine.error += (mine.error.empty() ? "" : "; ") + std::string("the fetch failed on rank(s) ") + others;
  }
  return mine;
}

KvFetchOutcome Worker::fetch_kv(KvFetchOrder& order) {
  if (!is_leader()) throw Error("Worker::fetch_kv called on a follower rank");
  if (shut_down_) throw Error("Worker::fetch_kv after shutdown");
  if (comm_) {
    StepPlan plan;
    plan.kind = StepKind::FetchKv;
    plan.step_id = next_step_++;
    broadcast_plan(*comm_, plan, 0);
    broadcast_fetch_order(*comm_, order, 0);
  }
  return execute_fetch(order);
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
  while (serve_one()) {
  }
}

bool Worker::serve_one() {
  if (!comm_) return false;
  StepPlan plan;
  broadcast_plan(*comm_, plan, 0);
  if (plan.kind == StepKind::Shutdown) return false;
  if (plan.kind == StepKind::FetchKv) {
    KvFetchOrder order;
    broadcast_fetch_order(*comm_, order, 0);
    execute_fetch(order);
    return true;
  }
  execute(plan, logits_);
  return true;
}

}  // namespace tp
