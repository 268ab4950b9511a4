#include "rank/sequence_runner.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace tp {

SequenceRunner::SequenceRunner(Worker& worker, int64_t capacity, int64_t chunk)
    : worker_(worker), capacity_(capacity), chunk_(chunk) {
  const int64_t bs = worker.pool().shape().block_size;
  const int64_t n_blocks = (capacity + bs - 1) / bs;
  if (n_blocks > worker.pool().shape().n_blocks)
    throw InputError("a sequence of " + std::to_string(capacity) + " tokens needs " + std::to_string(n_blocks) +
                     " KV blocks; the pool has " + std::to_string(worker.pool().shape().n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) block_table_.push_back(int32_t(b));
}

const std::vector<float>& SequenceRunner::feed(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw InputError("feed: no tokens");
  if (n_past_ + int64_t(tokens.size()) > capacity_)
    throw InputError("sequence of " + std::to_string(n_past_ + int64_t(tokens.size())) +
                     " tokens exceeds the capacity of " + std::to_string(capacity_));
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk_)) {
    const size_t n = std::min(tokens.size() - i, size_t(chunk_));
    StepPlan plan = chunk_plan(tokens, i, n);
    plan.seqs[0].want_logits = i + n == tokens.size();
    worker_.lead(plan, logits_);
    n_past_ += int64_t(n);
  }
  return logits_;
}

StepPlan SequenceRunner::chunk_plan(const std::vector<int32_t>& tokens, size_t i, size_t n) const {
  StepPlan plan;
  SeqPlan& s = plan.seqs.emplace_back();
  s.tokens.assign(tokens.begin() + long(i), tokens.begin() + long(i + n));
  s.start_pos = n_past_;
  s.block_table = block_table_;
  return plan;
}

std::vector<TokenLogprobs> SequenceRunner::feed_scored(const std::vector<int32_t>& tokens, int32_t k) {
  if (n_past_ != 0) throw InputError("feed_scored: the sequence is not empty");
  if (int64_t(tokens.size()) > capacity_)
    throw InputError("sequence of " + std::to_string(tokens.size()) + " tokens exceeds the capacity of " +
                     std::to_string(capacity_));
  std::vector<TokenLogprobs> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk_)) {
    const size_t n = std::min(tokens.size() - i, size_t(chunk_));
    StepPlan plan = chunk_plan(tokens, i, n);
    SeqPlan& s = plan.seqs[0];
    s.prompt_logprobs = k;
    s.prompt_targets.assign(tokens.begin() + long(i + 1), tokens.begin() + long(std::min(i + n + 1, tokens.size())));
    StepResult result;
    worker_.lead(plan, result);
    if (!s.prompt_targets.empty()) {
      const PromptLogprobs& p = result.prompt_logprobs.at(0);
      for (size_t j = 0; j < p.entries.size(); ++j) out[size_t(p.first_position) + j] = p.entries[j];
    }
    n_past_ += int64_t(n);
  }
  return out;
}

const std::vector<float>& SequenceRunner::feed_rows(const std::vector<int32_t>& tokens, size_t begin, size_t end) {
  if (begin >= end || end > tokens.size()) throw InputError("feed_rows: empty or out-of-range token range");
  if (n_past_ != int64_t(begin))
    throw InputError("feed_rows: the sequence holds " + std::to_string(n_past_) + " tokens, not " + std::to_string(begin));
  if (int64_t(end) > capacity_)
    throw InputError("sequence of " + std::to_string(end) + " tokens exceeds the capacity of " + std::to_string(capacity_));
  StepPlan plan = chunk_plan(tokens, begin, end - begin);
  SeqPlan& s = plan.seqs[0];
  s.prompt_logprobs = 0;
  s.prompt_targets.assign(tokens.begin() + long(begin + 1), tokens.begin() + long(std::min(end + 1, tokens.size())));
  logits_.clear();
  worker_.lead(plan, logits_);
  n_past_ = int64_t(end);
  return logits_;
}

}  // namespace tp
