// The Llama forward pass on one rank, over a paged K/V pool.
// Weights are converted at load into the runtime dtype (F32 or BF16) with Q|K|V and gate|up fused row-wise;
// the token embedding stays in the file's type and is read through the mapping.
// One step runs any number of sequences, each a run of new tokens at consecutive positions (a prefill
// chunk or one decode token). K/V of those tokens are written into the pool at the slots their block table
// gives, then attention reads every past position through the same table: there is no contiguous cache.
#pragma once
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/model_config.h"
#include "kernels/cpu/linear.h"
#include "kvstore/kv_pool.h"
#include "rank/model_file.h"

namespace tp {

// One sequence's share of a step.
struct SeqStep {
  std::vector<int32_t> tokens;       // new tokens this step, [n]
  int64_t start_pos = 0;             // position of tokens[0]; tokens before it are already in the pool
  std::vector<int32_t> block_table;  // pool block ids covering positions [0, start_pos + n)
  bool want_logits = true;           // logits of the last token wanted
};

class LlamaModel {
 public:
  // runtime: F32 or BF16. Throws FormatError for a missing or mis-shaped tensor, InputError for an
  // unsupported runtime dtype.
  LlamaModel(const ModelFile& file, DType runtime);

  const ModelConfig& config() const { return cfg_; }
  // Bytes of weights this rank holds in memory (converted weights + norms; the mmapped embedding table
  // counts once for its pages).
  int64_t resident_weight_bytes() const;

  // The pool shape this model needs for n_blocks blocks of block_size tokens.
  KvPoolShape kv_shape(int64_t n_blocks, int64_t block_size) const;

  // Runs one step. logits: [number of seqs with want_logits, vocab], in seqs order.
  void forward(const std::vector<SeqStep>& seqs, KvPool& pool, std::vector<float>& logits);

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // [hidden]
    cpu::Weight qkv;                          // [(n_heads + 2 n_kv) head_dim, hidden]
    cpu::Weight wo;                           // [hidden, n_heads head_dim]
    cpu::Weight gate_up;                      // [2 intermediate, hidden]
    cpu::Weight down;                         // [hidden, intermediate]
  };

  ModelConfig cfg_;
  const TensorView* embd_ = nullptr;  // [vocab, hidden] in the file's type
  std::vector<Layer> layers_;
  std::vector<float> output_norm_;    // [hidden]
  cpu::Weight lm_head_;               // [vocab, hidden]

  // Scratch, grown on demand: [n_tokens, ...]
  std::vector<float> x_, h_, qkv_, q_, k_, v_, attn_, gu_, mlp_, last_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
};

}  // namespace tp
