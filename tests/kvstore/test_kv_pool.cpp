// KvPool: zeroed, disjoint layers in every dtype with the block layout of common/kv_dtype.h; block bytes as
// kvstore/capacity counts them; copy_block moves data and block scales; the tensor-scale hook and its checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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

TEST(KvPool, RejectsInvalidShape) {
  EXPECT_THROW(KvPool(KvPoolShape{.n_layers = 1, .n_blocks = 4, .block_size = 0, .n_kv_heads = 1, .head_dim = 8}),
               InputError);
  EXPECT_THROW(KvPool(KvPoolShape{.n_layers = -1, .n_blocks = 4, .block_size = 16, .n_kv_heads = 1, .head_dim = 8}),
               InputError);
}

}  // namespace
}  // namespace tp
