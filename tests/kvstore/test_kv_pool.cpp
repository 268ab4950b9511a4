#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "kvstore/kv_pool.h"

namespace tp {
namespace {

TEST(KvPool, AllocatesZeroedLayers) {
  const KvPoolShape shape{.n_layers = 3, .n_blocks = 5, .block_size = 16, .n_kv_heads = 2, .head_dim = 8};
  KvPool pool(shape);
  const int64_t per_layer = 5 * 16 * 2 * 8;
  EXPECT_EQ(shape.floats_per_block(), 16 * 2 * 8);
  EXPECT_EQ(shape.bytes_per_token(), 2 * 3 * 2 * 8 * 4);
  EXPECT_EQ(pool.n_bytes(), 2 * 3 * per_layer * 4);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(pool.k(l) - pool.k(0), l * per_layer);
    EXPECT_EQ(pool.v(l) - pool.v(0), l * per_layer);
    EXPECT_TRUE(std::all_of(pool.k(l), pool.k(l) + per_layer, [](float f) { return f == 0.0f; }));
    EXPECT_TRUE(std::all_of(pool.v(l), pool.v(l) + per_layer, [](float f) { return f == 0.0f; }));
  }
  // K and V of every layer are disjoint: writing one leaves the others zero.
  std::fill(pool.k(1), pool.k(1) + per_layer, 1.0f);
  EXPECT_EQ(pool.k(0)[per_layer - 1], 0.0f);
  EXPECT_EQ(pool.k(2)[0], 0.0f);
  EXPECT_EQ(pool.v(1)[0], 0.0f);
  const KvPool& cpool = pool;
  EXPECT_EQ(cpool.k(1)[0], 1.0f);
  EXPECT_EQ(cpool.shape().n_blocks, 5);
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
