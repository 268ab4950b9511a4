#include "kvstore/kv_pool.h"

#include <string>

#include "common/error.h"

namespace tp {

KvPool::KvPool(const KvPoolShape& shape) : shape_(shape) {
  if (shape.n_layers < 0 || shape.n_blocks < 0 || shape.block_size <= 0 || shape.n_kv_heads < 0 ||
      shape.head_dim < 0)
    throw InputError("KvPool: invalid shape (layers " + std::to_string(shape.n_layers) + ", blocks " +
                     std::to_string(shape.n_blocks) + ", block_size " + std::to_string(shape.block_size) +
                     ", kv_heads " + std::to_string(shape.n_kv_heads) + ", head_dim " +
                     std::to_string(shape.head_dim) + ")");
  const size_t n = size_t(shape.n_layers * layer_floats());
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

}  // namespace tp
