// The paged K/V memory of one rank: for every layer, K and V blocks of `block_size` tokens, stored in the
// pool's dtype (cache.dtype: f32, bf16, fp8_e4m3, int8) with the block layout of common/kv_dtype.h:
// per layer and tensor, [n_blocks] blocks of [block_size, n_kv_heads, head_dim] elements, each followed by its
// [n_kv_heads] F32 scales when the dtype keeps block scales (int8 without tensor scales).
// A token's slot is block_id * block_size + offset_in_block; slot -1 means padding (not written).
// The pool only owns memory; which block belongs to whom is the BlockManager's business. kernels/cpu/
// paged_attention.h writes and reads it through the views k(layer) / v(layer).
//
// Tensor scales (the hook for a checkpoint's per-layer k_scale / v_scale, e.g. compressed-tensors'
// `kv_cache_scheme`): with shape.tensor_scales, the pool takes one K and one V scale per layer (finite, > 0);
// fp8_e4m3 stores x / scale, int8 round(x / scale) clamped to ±127, and no block scales are kept. Without them,
// fp8_e4m3 uses scale 1 and int8 keeps a scale per block and KV head.
//
// Memory: host memory by default; a GPU backend passes a KvMemory (rank/backend_kv_memory.h) so the blocks live
// in device memory — the views then hold device pointers and copy_block copies on the device.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/kv_dtype.h"

namespace tp {

struct KvPoolShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;   // tokens per block
  int64_t n_kv_heads = 0;    // local to this rank
  int64_t head_dim = 0;
  KvDType dtype = KvDType::F32;  // the library default: exact; serving takes cache.dtype (default bf16)
  bool tensor_scales = false;    // fp8_e4m3 / int8: per-layer scales given to the pool (see above)

  KvBlockLayout layout() const { return {dtype, block_size, n_kv_heads, head_dim, tensor_scales}; }
  // One block of every layer, K and V, scales included (= KvFootprint::block_bytes, kvstore/capacity.h).
  int64_t block_bytes() const { return 2 * n_layers * layout().block_bytes(); }
  // K and V, all layers, elements only (block scales excluded: they are per block).
  int64_t bytes_per_token() const { return 2 * n_layers * layout().row_bytes(); }
};

// Per-layer tensor scales, [n_layers] each: x̂ = stored · scale.
struct KvTensorScales {
  std::vector<float> k, v;
};

// Where a pool's bytes live (the default: host memory). kvstore knows no device: the rank gives an adapter.
class KvMemory {
 public:
  virtual ~KvMemory() = default;
  // `bytes` zero-filled bytes (nullptr for 0); throws tp::Error when it cannot allocate.
  virtual void* allocate_zeroed(int64_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  // dst[0, bytes) = src[0, bytes), both in this memory, not overlapping.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  // True when the bytes are host memory (tests read them directly).
  virtual bool host() const = 0;
};

// Host memory (aligned to 64 bytes).
std::shared_ptr<KvMemory> host_kv_memory();

class KvPool {
 public:
  // Throws InputError for a negative count, block_size <= 0, tensor scales on a dtype that takes none, or
  // scales that are missing, of the wrong count, non-finite or <= 0 (naming the layer). memory: where the
  // blocks live (null: host).
  explicit KvPool(const KvPoolShape& shape, KvTensorScales scales = {}, std::shared_ptr<KvMemory> memory = nullptr);
  ~KvPool();
  KvPool(KvPool&& o) noexcept;
  KvPool& operator=(KvPool&& o) noexcept;
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;
  const KvPoolShape& shape() const { return shape_; }
  // One layer's K or V, writable (write_kv) and readable (paged_attention).
  KvTensorView k(int64_t layer);
  KvTensorView v(int64_t layer);
  // Copies block src into block dst in every layer, K and V, with their scales (copy-on-write).
  void copy_block(int64_t src, int64_t dst);
  int64_t n_bytes() const { return 2 * bytes_each_; }
  // Whether the blocks are host memory.
  bool host() const { return memory_->host(); }

 private:
  void release() noexcept;
  int64_t layer_bytes() const { return shape_.n_blocks * shape_.layout().block_bytes(); }
  KvTensorView view(uint8_t* data, const std::vector<float>& scales, int64_t layer);
  KvPoolShape shape_;
  KvTensorScales scales_;
  std::shared_ptr<KvMemory> memory_;
  uint8_t* k_ = nullptr;
  uint8_t* v_ = nullptr;
  int64_t bytes_each_ = 0;  // of k_ and of v_
};

}  // namespace tp
