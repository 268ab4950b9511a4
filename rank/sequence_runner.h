// Runs one sequence through a LlamaModel on its own small paged pool: prefill in chunks, then one token
// at a time. Used by `tpserve generate`, the oracle tests and the benchmarks until the engine's scheduler
// (which batches many sequences over a shared pool) takes over. Its block table deliberately hands out
// blocks in descending order so nothing can silently rely on a contiguous cache.
#pragma once
#include <cstdint>
#include <vector>

#include "kvstore/kv_pool.h"
#include "rank/llama_model.h"

namespace tp {

class SequenceRunner {
 public:
  // capacity: the most tokens this sequence will hold; chunk: prefill tokens per forward step.
  SequenceRunner(LlamaModel& model, int64_t capacity, int64_t block_size = 16, int64_t chunk = 512);

  // Appends tokens (any number) and returns the logits [vocab] after the last one.
  // Throws InputError when capacity would be exceeded.
  const std::vector<float>& feed(const std::vector<int32_t>& tokens);
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }

 private:
  LlamaModel& model_;
  int64_t capacity_, chunk_;
  KvPool pool_;
  std::vector<int32_t> block_table_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
};

}  // namespace tp
