#include "kvstore/kv_pool.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "common/error.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace tp {
namespace {

void check_scales(const std::vector<float>& scales, int64_t n_layers, const char* which) {
  if (int64_t(scales.size()) != n_layers)
    throw InputError(std::string("KvPool: ") + which + " tensor scales: " + std::to_string(scales.size()) +
                     " given for " + std::to_string(n_layers) + " layers");
  for (size_t l = 0; l < scales.size(); ++l)
    if (!std::isfinite(scales[l]) || scales[l] <= 0.0f)
      throw InputError(std::string("KvPool: ") + which + " tensor scale of layer " + std::to_string(l) + " is " +
                       std::to_string(scales[l]) + "; scales must be finite and > 0");
}

// Host pools of 2 MiB or more sit on 2 MiB pages where the kernel gives them (transparent huge pages asked for
// with MADV_HUGEPAGE before the first touch; best effort). Decode attention reads a sequence's blocks scattered
// over the pool, a few lines of each (one KV head's rows), so on 4 KiB pages its reads walk many more pages
// (SmolLM2 BF16, depth 8192, 1 thread, Xeon with AMX, alternated 3 times: tg32 18.2 -> 18.5 tok/s; pp512 unchanged —
// a small gain: that kernel is bound by its own arithmetic, bench/results/xeon-amx-kernels-20261203.md §16).
constexpr size_t kHugePage = size_t(2) << 20;

class HostKvMemory final : public KvMemory {
 public:
  void* allocate_zeroed(int64_t bytes) override {
    if (bytes <= 0) return nullptr;
    const bool huge = size_t(bytes) >= kHugePage;
    const size_t align = huge ? kHugePage : 64, n = (size_t(bytes) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, n);
    if (p == nullptr)
      throw Error("KvPool: cannot allocate " + std::to_string(bytes) + " bytes of host memory for the KV cache");
#ifdef __linux__
    if (huge) madvise(p, n, MADV_HUGEPAGE);
#endif
    std::memset(p, 0, size_t(bytes));
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
  }
  bool host() const override { return true; }
};

}  // namespace

std::shared_ptr<KvMemory> host_kv_memory() {
  static const std::shared_ptr<KvMemory> memory = std::make_shared<HostKvMemory>();
  return memory;
}

KvPool::KvPool(const KvPoolShape& shape, KvTensorScales scales, std::shared_ptr<KvMemory> memory)
    : shape_(shape), scales_(std::move(scales)), memory_(memory ? std::move(memory) : host_kv_memory()) {
  if (shape.n_layers < 0 || shape.n_blocks < 0 || shape.block_size <= 0 || shape.n_kv_heads < 0 ||
      shape.head_dim < 0)
    throw InputError("KvPool: invalid shape (layers " + std::to_string(shape.n_layers) + ", blocks " +
                     std::to_string(shape.n_blocks) + ", block_size " + std::to_string(shape.block_size) +
                     ", kv_heads " + std::to_string(shape.n_kv_heads) + ", head_dim " +
                     std::to_string(shape.head_dim) + ")");
  if (shape.tensor_scales) {
    if (!kv_takes_tensor_scales(shape.dtype))
      throw InputError("KvPool: a " + std::string(kv_dtype_name(shape.dtype)) +
                       " pool takes no tensor scales (only fp8_e4m3 and int8 do)");
    check_scales(scales_.k, shape.n_layers, "K");
    check_scales(scales_.v, shape.n_layers, "V");
  } else if (!scales_.k.empty() || !scales_.v.empty()) {
    throw InputError("KvPool: tensor scales given but shape.tensor_scales is false");
  }
  bytes_each_ = shape.n_layers * layer_bytes();
  k_ = static_cast<uint8_t*>(memory_->allocate_zeroed(bytes_each_));
  try {
    v_ = static_cast<uint8_t*>(memory_->allocate_zeroed(bytes_each_));
  } catch (...) {
    memory_->deallocate(k_);
    throw;
  }
}

KvPool::~KvPool() { release(); }

void KvPool::release() noexcept {
  if (memory_) {
    memory_->deallocate(k_);
    memory_->deallocate(v_);
  }
  k_ = v_ = nullptr;
  bytes_each_ = 0;
}

KvPool::KvPool(KvPool&& o) noexcept
    : shape_(o.shape_), scales_(std::move(o.scales_)), memory_(o.memory_), k_(std::exchange(o.k_, nullptr)),
      v_(std::exchange(o.v_, nullptr)), bytes_each_(std::exchange(o.bytes_each_, 0)) {}

KvPool& KvPool::operator=(KvPool&& o) noexcept {
  if (this != &o) {
    release();
    shape_ = o.shape_;
    scales_ = std::move(o.scales_);
    memory_ = o.memory_;
    k_ = std::exchange(o.k_, nullptr);
    v_ = std::exchange(o.v_, nullptr);
    bytes_each_ = std::exchange(o.bytes_each_, 0);
  }
  return *this;
}

KvTensorView KvPool::view(uint8_t* data, const std::vector<float>& scales, int64_t layer) {
  KvTensorView t;
  t.blocks = data + layer * layer_bytes();
  t.n_blocks = shape_.n_blocks;
  t.layout = shape_.layout();
  t.tensor_scale = shape_.tensor_scales ? scales[size_t(layer)] : 1.0f;
  return t;
}

KvTensorView KvPool::k(int64_t layer) { return view(k_, scales_.k, layer); }
KvTensorView KvPool::v(int64_t layer) { return view(v_, scales_.v, layer); }

void KvPool::copy_block(int64_t src, int64_t dst) {
  if (src < 0 || dst < 0 || src >= shape_.n_blocks || dst >= shape_.n_blocks)
    throw Error("KvPool: block copy " + std::to_string(src) + " -> " + std::to_string(dst) + " outside a pool of " +
                std::to_string(shape_.n_blocks) + " blocks");
  if (src == dst) return;
  const size_t bb = size_t(shape_.layout().block_bytes());
  for (int64_t l = 0; l < shape_.n_layers; ++l)
    for (const KvTensorView& t : {k(l), v(l)}) memory_->copy(t.block(dst), t.block(src), int64_t(bb));
}

}  // namespace tp
