#include "rank/sequence_runner.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace tp {

SequenceRunner::SequenceRunner(LlamaModel& model, int64_t capacity, int64_t block_size, int64_t chunk)
    : model_(model),
      capacity_(capacity),
      chunk_(chunk),
      pool_(model.kv_shape((capacity + block_size - 1) / block_size, block_size)) {
  const int64_t n_blocks = pool_.shape().n_blocks;
  for (int64_t b = n_blocks - 1; b >= 0; --b) block_table_.push_back(int32_t(b));
}

const std::vector<float>& SequenceRunner::feed(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw InputError("feed: no tokens");
  if (n_past_ + int64_t(tokens.size()) > capacity_)
    throw InputError("sequence of " + std::to_string(n_past_ + int64_t(tokens.size())) +
                     " tokens exceeds the capacity of " + std::to_string(capacity_));
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk_)) {
    const size_t n = std::min(tokens.size() - i, size_t(chunk_));
    SeqStep s;
    s.tokens.assign(tokens.begin() + long(i), tokens.begin() + long(i + n));
    s.start_pos = n_past_;
    s.block_table = block_table_;
    s.want_logits = i + n == tokens.size();
    model_.forward({s}, pool_, logits_);
    n_past_ += int64_t(n);
  }
  return logits_;
}

}  // namespace tp
