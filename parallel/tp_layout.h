// Tensor-parallel layout math: which slice of every weight and of the KV cache a rank holds (DESIGN §1, §4).
//
// A TP group of `tp` ranks splits a Llama model Megatron-style:
//   Q heads            column-parallel: rank r holds heads [r * n_heads / tp, (r + 1) * n_heads / tp)
//   K/V heads          split like Q when tp divides n_kv_heads; replicated when tp is a multiple of
//                      n_kv_heads (tp > n_kv_heads): rank r holds the one KV head r * n_kv_heads / tp, which
//                      is the KV head all of its Q heads use (GQA group g = n_heads / n_kv_heads: Q head h
//                      uses KV head h / g).
//   O projection       row-parallel over the local Q heads' columns; its output is all-reduced.
//   gate/up, down      column-/row-parallel over intermediate columns [r * I / tp, (r + 1) * I / tp).
//   embedding, lm_head vocab-parallel over rows of the vocab padded up to a multiple of tp; padded rows are
//                      zero and their logits are -inf.
//   norms, hidden      replicated (not split).
//
// A valid tp (>= 1) divides n_heads and intermediate and either divides n_kv_heads or is a multiple of it.
// An invalid tp throws tp::InputError naming the first rule it breaks, the model, and the valid choices:
//   "tp=2 does not divide the 9 attention heads of SmolLM2-135M-Instruct; valid: 1, 3"
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/model_config.h"

namespace tp {

// The dimensions the layout depends on. Counts are > 0; n_heads % n_kv_heads == 0.
struct TpShape {
  int64_t n_layers = 0;
  int64_t n_heads = 0;       // attention (query) heads
  int64_t n_kv_heads = 0;    // key/value heads (GQA)
  int64_t head_dim = 0;      // elements per head
  int64_t hidden = 0;        // embedding length (not split)
  int64_t intermediate = 0;  // feed-forward length
  int64_t vocab = 0;         // token embedding rows

  static TpShape from(const ModelConfig& c) {
    return {c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden, c.intermediate, c.vocab};
  }
};

// Half-open [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
  bool operator==(const Range&) const = default;
};

struct TpLayout {
  int tp = 1;
  int rank = 0;                 // TP rank, [0, tp)
  Range q_heads;                // global Q head indices held by this rank
  Range kv_heads;               // global KV head indices held by this rank (size >= 1)
  bool kv_replicated = false;   // tp > n_kv_heads: each KV head lives on tp / n_kv_heads ranks
  Range intermediate;           // gate/up output rows and down input columns held by this rank
  int64_t vocab = 0;            // real vocab size
  int64_t vocab_padded = 0;     // vocab rounded up to a multiple of tp
  Range vocab_rows;             // rows of the padded vocab held by this rank, size vocab_padded / tp
  int64_t head_dim = 0;

  int64_t local_q_heads() const { return q_heads.size(); }
  int64_t local_kv_heads() const { return kv_heads.size(); }
  // Rows of this rank's vocab shard that are real tokens (the rest are padding): [vocab_rows.begin, vocab).
  int64_t local_real_vocab_rows() const;
  // The local KV head index ([0, local_kv_heads())) that global Q head `q` (in q_heads) attends with.
  int64_t local_kv_head_of_q(int64_t q, int64_t n_heads, int64_t n_kv_heads) const;
};

// The tp degrees (ascending) for which make_tp_layout succeeds. Throws InputError on an invalid shape.
std::vector<int> valid_tp_degrees(const TpShape& shape);

// Throws InputError unless `tp` is valid for `shape` (message above; `model_name` names the model).
void validate_tp(const TpShape& shape, int tp, std::string_view model_name);

// The slice TP rank `rank` in [0, tp) holds. Validates tp (InputError) and rank (InputError).
TpLayout make_tp_layout(const TpShape& shape, int tp, int rank, std::string_view model_name);

// KV cache bytes one token occupies on one rank: 2 (K and V) x n_layers x local_kv_heads x head_dim x
// dtype_bytes.
int64_t kv_bytes_per_token(int64_t n_layers, int64_t local_kv_heads, int64_t head_dim, int64_t dtype_bytes);
inline int64_t kv_bytes_per_token(const TpShape& shape, const TpLayout& layout, int64_t dtype_bytes) {
  return kv_bytes_per_token(shape.n_layers, layout.local_kv_heads(), layout.head_dim, dtype_bytes);
}

}  // namespace tp
