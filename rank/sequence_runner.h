// Runs one sequence through a Worker: prefill in chunks, then one token at a time, with no scheduler —
// the reference path of the oracle, tensor-parallel and engine tests and of decode_bench (serving goes
// through coordinator/engine, which batches many sequences over a shared pool). It takes the pool's blocks
// in descending order so nothing can silently rely on a contiguous cache.
#pragma once
#include <cstdint>
#include <vector>

#include "rank/backend_kv_memory.h"
#include "rank/worker.h"

namespace tp {

class SequenceRunner {
 public:
  // Uses the first ceil(capacity / block_size) blocks of the worker's pool (InputError if it has fewer).
  // chunk: prefill tokens per step.
  SequenceRunner(Worker& worker, int64_t capacity, int64_t chunk = 512);

  // Appends tokens (any number) and returns the logits [vocab] after the last one.
  // Throws InputError when capacity would be exceeded.
  const std::vector<float>& feed(const std::vector<int32_t>& tokens);
  // Prefills `tokens` from an empty sequence, asking the ranks for prompt logprobs (SeqPlan::prompt_targets,
  // top k): returns [tokens.size()] entries, entry i the logprob, rank and top k of tokens[i] given the ones
  // before it, from the rows of the prefill itself (entry 0 is left default: the first token has none).
  // Samples nothing (the last chunk wants no logits). Throws InputError when not empty or over capacity.
  std::vector<TokenLogprobs> feed_scored(const std::vector<int32_t>& tokens, int32_t k);
  // Appends tokens[begin, end) in one step (n_past() must be begin) and returns the logit rows
  // [min(end, tokens.size() - 1) - begin, vocab]: row j is the model's next-token logits at position begin + j,
  // the distribution of tokens[begin + j + 1] (full vocabulary, gathered on the leader under TP). Samples nothing.
  const std::vector<float>& feed_rows(const std::vector<int32_t>& tokens, size_t begin, size_t end);
  // Forgets the sequence (n_past() = 0); the next feed overwrites its KV slots.
  void reset() { n_past_ = 0; }
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }

 private:
  // The plan of tokens[i, i + n) at the current position (no logits asked yet).
  StepPlan chunk_plan(const std::vector<int32_t>& tokens, size_t i, size_t n) const;

  Worker& worker_;
  int64_t capacity_, chunk_;
  std::vector<int32_t> block_table_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
};

// A single-rank model with its own pool (K/V in kv_dtype; in the model backend's memory): the common case of tests and tools (tp = 1).
struct LocalRunner {
  // scales: per-layer K / V tensor scales for an fp8_e4m3 / int8 pool (none: scale 1 / block scales).
  LocalRunner(LlamaModel& model, int64_t capacity, int64_t block_size = 16, KvDType kv_dtype = KvDType::F32,
              const KvTensorScales& scales = {})
      : pool(with_tensor_scales(model.kv_shape((capacity + block_size - 1) / block_size, block_size, kv_dtype),
                                !scales.k.empty()),
             scales, kv_memory_for(model.backend())),
        worker(model, pool, nullptr),
        seq(worker, capacity) {}
  static KvPoolShape with_tensor_scales(KvPoolShape s, bool on) {
    s.tensor_scales = on;
    return s;
  }
  KvPool pool;
  Worker worker;
  SequenceRunner seq;
};

}  // namespace tp
