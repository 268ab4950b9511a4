// The paged K/V memory of one rank: for every layer, K and V blocks of `block_size` tokens.
// Layout per layer and per tensor (K or V): [n_blocks, block_size, n_kv_heads, head_dim] F32.
// A token's slot is block_id * block_size + offset_in_block; slot -1 means padding (not written).
// The pool only owns memory; which block belongs to whom is the BlockManager's business.
#pragma once
#include <cstdint>
#include <vector>

namespace tp {

struct KvPoolShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;   // tokens per block
  int64_t n_kv_heads = 0;    // local to this rank
  int64_t head_dim = 0;
  int64_t floats_per_block() const { return block_size * n_kv_heads * head_dim; }
  // K and V, all layers, F32.
  int64_t bytes_per_token() const { return 2 * n_layers * n_kv_heads * head_dim * int64_t(sizeof(float)); }
};

class KvPool {
 public:
  explicit KvPool(const KvPoolShape& shape);
  const KvPoolShape& shape() const { return shape_; }
  float* k(int64_t layer) { return k_.data() + layer * layer_floats(); }
  float* v(int64_t layer) { return v_.data() + layer * layer_floats(); }
  const float* k(int64_t layer) const { return k_.data() + layer * layer_floats(); }
  const float* v(int64_t layer) const { return v_.data() + layer * layer_floats(); }
  int64_t n_bytes() const { return int64_t((k_.size() + v_.size()) * sizeof(float)); }

 private:
  int64_t layer_floats() const { return shape_.n_blocks * shape_.floats_per_block(); }
  KvPoolShape shape_;
  std::vector<float> k_, v_;
};

}  // namespace tp
