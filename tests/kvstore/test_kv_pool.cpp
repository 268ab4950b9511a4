// KvPool: zeroed, disjoint layers in every dtype with the block layout of common/kv_dtype.h; block bytes as
// kvstore/capacity counts them; copy_block moves data and block scales; the tensor-scale hook and its checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "common/error.h"
#include "kvstore/capacity.h"
#include "kvstore/kv_pool.h"

namespace tp {
namespace {

KvPoolShape shape_of(KvDType dtype, bool tensor_scales = false) {
  return KvPoolShape{.n_layers = 3, .n_blocks = 5, .block_size = 16, .n_kv_heads = 2, .head_dim = 8, .dtype = dtype,
                     .tensor_scales = tensor_scales};
}

TEST(KvPool, AllocatesZeroedDisjointLayersInEveryDtype) {
  for (KvDType dt : kKvDTypes) {
    const KvPoolShape shape = shape_of(dt);
    KvPool pool(shape);
    const int64_t esz = kv_dtype_bytes(dt), scales = dt == KvDType::INT8 ? 2 * 4 : 0;
    const int64_t block = 16 * 2 * 8 * esz + scales, per_layer = 5 * block;
    EXPECT_EQ(shape.layout().block_bytes(), block) << kv_dtype_name(dt);
    EXPECT_EQ(shape.bytes_per_token(), 2 * 3 * 2 * 8 * esz);
    EXPECT_EQ(shape.block_bytes(), 2 * 3 * block);
    EXPECT_EQ(pool.n_bytes(), 2 * 3 * per_layer);
    for (int64_t l = 0; l < 3; ++l) {
      EXPECT_EQ(pool.k(l).blocks - pool.k(0).blocks, l * per_layer);
      EXPECT_EQ(pool.v(l).blocks - pool.v(0).blocks, l * per_layer);
      EXPECT_EQ(pool.k(l).n_blocks, 5);
      EXPECT_EQ(pool.k(l).layout.dtype, dt);
      EXPECT_EQ(pool.k(l).tensor_scale, 1.0f);
      EXPECT_EQ(pool.k(l).block(2) - pool.k(l).blocks, 2 * block);
      EXPECT_TRUE(std::all_of(pool.k(l).blocks, pool.k(l).blocks + per_layer, [](uint8_t b) { return b == 0; }));
      EXPECT_TRUE(std::all_of(pool.v(l).blocks, pool.v(l).blocks + per_layer, [](uint8_t b) { return b == 0; }));
    }
    // K and V of every layer are disjoint: writing one leaves the others zero.
    std::fill(pool.k(1).blocks, pool.k(1).blocks + per_layer, uint8_t(1));
    EXPECT_EQ(pool.k(0).blocks[per_layer - 1], 0);
    EXPECT_EQ(pool.k(2).blocks[0], 0);
    EXPECT_EQ(pool.v(1).blocks[0], 0);
  }
}

// The pool allocates per block exactly what the capacity arithmetic (start-up report, plan, metrics) counts.
TEST(KvPool, BlockBytesAgreeWithCapacity) {
  ModelShape m;
  m.n_layers = 3;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  for (KvDType dt : kKvDTypes)
    for (bool tensor : {false, true}) {
      if (tensor && !kv_takes_tensor_scales(dt)) continue;
      const KvFootprint fp = kv_footprint(m, 2, kv_cost(dt, tensor));
      EXPECT_EQ(shape_of(dt, tensor).block_bytes(), fp.block_bytes(16)) << kv_dtype_name(dt) << tensor;
      EXPECT_EQ(shape_of(dt, tensor).bytes_per_token(), fp.bytes_per_token) << kv_dtype_name(dt) << tensor;
    }
}

TEST(KvPool, CopyBlockMovesDataAndScalesOfEveryLayer) {
  KvPool pool(shape_of(KvDType::INT8));
  const int64_t bb = pool.shape().layout().block_bytes();
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t i = 0; i < bb; ++i) {
      pool.k(l).block(1)[i] = uint8_t(7 * l + i);
      pool.v(l).block(1)[i] = uint8_t(11 * l + 3 * i);
    }
  pool.copy_block(1, 4);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(std::memcmp(pool.k(l).block(4), pool.k(l).block(1), size_t(bb)), 0) << l;
    EXPECT_EQ(std::memcmp(pool.v(l).block(4), pool.v(l).block(1), size_t(bb)), 0) << l;
    EXPECT_EQ(pool.k(l).block(3)[bb - 1], 0);  // neighbours untouched
    EXPECT_EQ(pool.v(l).block(0)[bb - 1], 0);
  }
  EXPECT_THROW(pool.copy_block(5, 0), Error);
  EXPECT_THROW(pool.copy_block(0, -1), Error);
}

TEST(KvPool, TensorScalesPerLayer) {
  KvPool fp8(shape_of(KvDType::FP8_E4M3, true), {{0.5f, 0.25f, 2.0f}, {1.0f, 3.0f, 0.125f}});
  EXPECT_EQ(fp8.k(1).tensor_scale, 0.25f);
  EXPECT_EQ(fp8.v(2).tensor_scale, 0.125f);
  KvPool int8(shape_of(KvDType::INT8, true), {{0.5f, 0.25f, 2.0f}, {1.0f, 3.0f, 0.125f}});
  EXPECT_EQ(int8.v(1).tensor_scale, 3.0f);
  EXPECT_FALSE(int8.k(0).layout.block_scales());
  EXPECT_EQ(int8.k(0).layout.block_bytes(), 16 * 2 * 8);  // no room for block scales
  // Without tensor scales fp8 reads at scale 1 and int8 keeps block scales.
  EXPECT_EQ(KvPool(shape_of(KvDType::FP8_E4M3)).k(0).tensor_scale, 1.0f);
  EXPECT_TRUE(KvPool(shape_of(KvDType::INT8)).k(0).layout.block_scales());
}

TEST(KvPool, RejectsBadTensorScales) {
  const KvTensorScales three{{1, 1, 1}, {1, 1, 1}};
  EXPECT_THROW(KvPool(shape_of(KvDType::BF16, true), three), InputError);    // bf16 takes none
  EXPECT_THROW(KvPool(shape_of(KvDType::INT8, false), three), InputError);   // scales without the flag
  EXPECT_THROW(KvPool(shape_of(KvDType::INT8, true), {}), InputError);       // the flag without scales
  EXPECT_THROW(KvPool(shape_of(KvDType::INT8, true), {{1, 1}, {1, 1}}), InputError);  // 2 for 3 layers
  try {
    KvPool(shape_of(KvDType::FP8_E4M3, true), {{1, 1, 1}, {1, NAN, 1}});
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("V tensor scale of layer 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KvPool(shape_of(KvDType::FP8_E4M3, true), {{1, 0, 1}, {1, 1, 1}}), InputError);
}

TEST(KvPool, EmptyPoolIsValid) {
  KvPool pool(KvPoolShape{.n_layers = 2, .n_blocks = 0, .block_size = 16, .n_kv_heads = 1, .head_dim = 64});
  EXPECT_EQ(pool.n_bytes(), 0);
}

// Host memory: pools of 2 MiB and more start on a 2 MiB boundary (so they can sit on huge pages), zero-filled;
// smaller ones on 64 bytes; a size the machine cannot give is a tp::Error naming the KV cache, not a crash.
TEST(KvPool, HostMemoryAlignsLargePoolsForHugePagesAndRefusesImpossibleSizes) {
  const auto mem = host_kv_memory();
  for (const int64_t bytes : {int64_t(100), int64_t(64) << 10, (int64_t(2) << 20) + 17, int64_t(5) << 20}) {
    auto* p = static_cast<uint8_t*>(mem->allocate_zeroed(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    const uintptr_t align = bytes >= (int64_t(2) << 20) ? uintptr_t(2) << 20 : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << bytes;
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0; })) << bytes;
    p[bytes - 1] = 1;  // the whole range is writable
    mem->deallocate(p);
  }
  EXPECT_EQ(mem->allocate_zeroed(0), nullptr);
  mem->deallocate(nullptr);
  try {
    mem->allocate_zeroed(int64_t(1) << 62);
    FAIL() << "a 4 EiB pool was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
}

TEST(KvPool, RejectsInvalidShape) {
  EXPECT_THROW(KvPool(KvPoolShape{.n_layers = 1, .n_blocks = 4, .block_size = 0, .n_kv_heads = 1, .head_dim = 8}),
               InputError);
  EXPECT_THROW(KvPool(KvPoolShape{.n_layers = -1, .n_blocks = 4, .block_size = 16, .n_kv_heads = 1, .head_dim = 8}),
               InputError);
}

// A "device" memory: host bytes it owns (filled with 0xAB before the zeroing it is asked for), counting what the
// pool asks of it.
class CountingMemory final : public KvMemory {
 public:
  void* allocate_zeroed(int64_t bytes) override {
    if (bytes <= 0) return nullptr;
    ++allocations;
    auto* p = new uint8_t[size_t(bytes)];
    std::memset(p, 0xAB, size_t(bytes));
    std::memset(p, 0, size_t(bytes));
    live += bytes;
    sizes[p] = bytes;
    return p;
  }
  void deallocate(void* p) noexcept override {
    if (!p) return;
    ++frees;
    live -= sizes[p];
    delete[] static_cast<uint8_t*>(p);
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    ++copies;
    copied += bytes;
    std::memcpy(dst, src, size_t(bytes));
  }
  bool host() const override { return false; }
  int allocations = 0, frees = 0, copies = 0;
  int64_t live = 0, copied = 0;
  std::map<void*, int64_t> sizes;
};

TEST(KvPool, LivesInTheMemoryItIsGivenAndCopiesBlocksThroughIt) {
  auto mem = std::make_shared<CountingMemory>();
  {
    const KvPoolShape shape = shape_of(KvDType::INT8);
    KvPool pool(shape, {}, mem);
    EXPECT_FALSE(pool.host());
    EXPECT_EQ(mem->allocations, 2);  // K and V
    EXPECT_EQ(mem->live, pool.n_bytes());
    const int64_t bb = shape.layout().block_bytes();
    for (int64_t l = 0; l < 3; ++l) std::memset(pool.k(l).block(1), int(l + 1), size_t(bb));
    pool.copy_block(1, 4);
    EXPECT_EQ(mem->copies, 2 * 3);  // K and V of every layer
    EXPECT_EQ(mem->copied, 2 * 3 * bb);
    for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(pool.k(l).block(4)[bb - 1], uint8_t(l + 1));
    KvPool moved(std::move(pool));  // the blocks move; freed once
    EXPECT_EQ(mem->frees, 0);
    EXPECT_EQ(moved.k(2).block(4)[0], uint8_t(3));
  }
  EXPECT_EQ(mem->frees, 2);
  EXPECT_EQ(mem->live, 0);
  KvPool host_pool(shape_of(KvDType::F32));
  EXPECT_TRUE(host_pool.host());
}

}  // namespace
}  // namespace tp
