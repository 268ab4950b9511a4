// CUDA write_kv and paged attention (kernels/cuda/kv_cache.h) against the CPU ones (kernels/cpu/kv_write.h,
// kernels/cpu/paged_attention.h), on pools of every dtype.
//   write_kv: the device pool's bytes equal the CPU pool's, exactly, after a prefill step and a decode step
//   (garbage-filled blocks, padding slots, int8 scale raises and requantization included).
//   paged_attention: NMSE <= 1e-8 against the CPU over the same stored bytes (both widen the same stored
//   values; only F32 summation order and expf differ, ~1e-7 relative per output, NMSE ~1e-13 expected). The
//   bounds here come from that error analysis: no GPU was available when they were written; the first run on
//   one (the gpu-check script) measures them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/launch_config.h"
#include "tests/kernels/cuda/device_buffer.h"
#include "tests/kernels/kv_fixtures.h"

namespace tp::test {
namespace {

constexpr double kAttentionNmse = 1e-8;

// A pool dtype and its tensor scale (0: none, i.e. block scales for int8 and scale 1 for fp8).
struct PoolKind {
  KvDType dtype;
  float tensor_scale;
};

const PoolKind kPoolKinds[] = {{KvDType::F32, 0.0f},      {KvDType::BF16, 0.0f}, {KvDType::FP8_E4M3, 0.0f},
                               {KvDType::FP8_E4M3, 0.05f}, {KvDType::INT8, 0.0f}, {KvDType::INT8, 0.02f}};

std::string kind_label(const PoolKind& k) { return dtype_label(k.dtype, k.tensor_scale > 0.0f); }

// A host pool and its device copy.
struct Pools {
  Pools(const PoolKind& kind, int64_t block_size, int64_t n_kv_heads, int64_t head_dim, int64_t n_blocks)
      : k(layout(kind, block_size, n_kv_heads, head_dim), n_blocks, scale(kind), 0xAB),
        v(layout(kind, block_size, n_kv_heads, head_dim), n_blocks, scale(kind), 0xCD),
        dk(k.bytes), dv(v.bytes) {}
  static KvBlockLayout layout(const PoolKind& kind, int64_t bs, int64_t n_kv, int64_t hd) {
    return {kind.dtype, bs, n_kv, hd, kind.tensor_scale > 0.0f};
  }
  static float scale(const PoolKind& kind) { return kind.tensor_scale > 0.0f ? kind.tensor_scale : 1.0f; }
  KvTensorView dev_view(const TestPool& p, const DeviceBuffer<uint8_t>& d) const {
    KvTensorView view = p.view;
    view.blocks = d.get();
    return view;
  }
  TestPool k, v;
  DeviceBuffer<uint8_t> dk, dv;
};

// [n_tokens, n_kv_heads · head_dim] values, each token's magnitude drawn in [0.2, 3] so int8 blocks raise
// their scale now and then.
std::vector<float> kv_values(int64_t n_tokens, int64_t n_row, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), mag(0.2f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * n_row));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float m = mag(rng);
    for (int64_t i = 0; i < n_row; ++i) x[size_t(t * n_row + i)] = u(rng) * m;
  }
  return x;
}

class CudaWriteKv : public ::testing::TestWithParam<PoolKind> {};

TEST_P(CudaWriteKv, StoresTheCpuBytes) {
  TP_REQUIRE_CUDA_DEVICE();
  const int64_t bs = 16, n_kv = 2, hd = 64, n_row = n_kv * hd;
  Pools pools(GetParam(), bs, n_kv, hd, 8);
  std::mt19937 rng(11);
  // Sequence A in blocks [3, 1], B in block [0]. Step 1: A 0..12, padding, B 0..5, padding. Step 2: A 13..20
  // (crossing into block 1), B 6.
  auto a_slot = [&](int64_t p) { return (p < bs ? 3 : 1) * bs + p % bs; };
  std::vector<std::vector<int64_t>> steps(2);
  for (int64_t p = 0; p <= 12; ++p) steps[0].push_back(a_slot(p));
  steps[0].push_back(-1);
  for (int64_t p = 0; p <= 5; ++p) steps[0].push_back(p);
  steps[0].push_back(-1);
  for (int64_t p = 13; p <= 20; ++p) steps[1].push_back(a_slot(p));
  steps[1].push_back(6);
  for (const auto& slots : steps) {
    const int64_t n = int64_t(slots.size());
    const std::vector<float> k = kv_values(n, n_row, rng), v = kv_values(n, n_row, rng);
    cpu::write_kv(k.data(), v.data(), n, slots.data(), pools.k.view, pools.v.view);
    DeviceBuffer<float> dk(k), dv(v);
    DeviceBuffer<int64_t> ds(slots);
    cuda::write_kv(dk.get(), dv.get(), n, ds.get(), pools.dev_view(pools.k, pools.dk), pools.dev_view(pools.v, pools.dv),
                   nullptr);
    EXPECT_EQ(pools.dk.download(), pools.k.bytes);
    EXPECT_EQ(pools.dv.download(), pools.v.bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaWriteKv, ::testing::ValuesIn(kPoolKinds),
                         [](const auto& info) { return kind_label(info.param); });

// (pool kind, n_heads, n_kv_heads, head_dim, n_splits)
using AttentionParam = std::tuple<PoolKind, std::tuple<int64_t, int64_t, int64_t>, int>;
class CudaPagedAttention : public ::testing::TestWithParam<AttentionParam> {};

TEST_P(CudaPagedAttention, DecodeAndPrefillChunkMatchCpu) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [kind, heads, n_splits] = GetParam();
  const auto [n_heads, n_kv, hd] = heads;
  const int64_t bs = 16, n_row = n_kv * hd;
  // Sequence 0: one decode token at position 699. Sequence 1: a prefill chunk at positions 300..331.
  const int64_t ctx0 = 700, chunk_begin = 300, chunk_len = 32, ctx1 = chunk_begin + chunk_len;
  const int64_t nb0 = (ctx0 + bs - 1) / bs, nb1 = (ctx1 + bs - 1) / bs, n_blocks = nb0 + nb1 + 3;
  Pools pools(kind, bs, n_kv, hd, n_blocks);
  std::mt19937 rng(21);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t max_blocks = std::max(nb0, nb1);
  std::vector<int32_t> tables(size_t(2 * max_blocks), 0);
  for (int64_t b = 0; b < nb0; ++b) tables[size_t(b)] = ids[size_t(b)];
  for (int64_t b = 0; b < nb1; ++b) tables[size_t(max_blocks + b)] = ids[size_t(nb0 + b)];
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t ctx = s == 0 ? ctx0 : ctx1;
    std::vector<int64_t> slots(static_cast<size_t>(ctx));
    for (int64_t p = 0; p < ctx; ++p) slots[size_t(p)] = int64_t(tables[size_t(s * max_blocks + p / bs)]) * bs + p % bs;
    const std::vector<float> k = kv_values(ctx, n_row, rng), v = kv_values(ctx, n_row, rng);
    cpu::write_kv(k.data(), v.data(), ctx, slots.data(), pools.k.view, pools.v.view);
  }
  pools.dk.upload(pools.k.bytes);
  pools.dv.upload(pools.v.bytes);

  const int64_t n_tokens = 1 + chunk_len;
  std::vector<int32_t> token_seq(size_t(n_tokens), 1), token_pos(static_cast<size_t>(n_tokens));
  token_seq[0] = 0;
  token_pos[0] = int32_t(ctx0 - 1);
  for (int64_t i = 0; i < chunk_len; ++i) token_pos[size_t(1 + i)] = int32_t(chunk_begin + i);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n_tokens * n_heads * hd));
  for (auto& x : q) x = u(rng);
  const float scale = 1.0f / std::sqrt(float(hd));

  std::vector<float> want(q.size());
  cpu::paged_attention(q.data(), 1, ctx0 - 1, n_heads, pools.k.view, pools.v.view, tables.data(), scale, want.data());
  cpu::paged_attention(q.data() + n_heads * hd, chunk_len, chunk_begin, n_heads, pools.k.view, pools.v.view,
                       tables.data() + max_blocks, scale, want.data() + n_heads * hd);

  DeviceBuffer<float> dq(q), dout(q.size());
  DeviceBuffer<int32_t> dseq(token_seq), dpos(token_pos), dtables(tables);
  cuda::AttentionBatch batch;
  batch.token_seq = dseq.get();
  batch.token_pos = dpos.get();
  batch.block_tables = dtables.get();
  batch.max_blocks_per_seq = max_blocks;
  batch.max_context = ctx0;
  batch.n_splits = n_splits;
  const int64_t ws_bytes = cuda::attention_workspace_bytes(n_tokens, n_heads, hd, n_splits);
  DeviceBuffer<uint8_t> ws(static_cast<size_t>(ws_bytes));
  cuda::paged_attention(dq.get(), n_tokens, n_heads, batch, pools.dev_view(pools.k, pools.dk),
                        pools.dev_view(pools.v, pools.dv), scale, dout.get(), ws.get(), ws_bytes, nullptr);
  EXPECT_LT(nmse(dout.download(), want), kAttentionNmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaPagedAttention,
    ::testing::Combine(::testing::ValuesIn(kPoolKinds),
                       ::testing::Values(std::make_tuple(int64_t(4), int64_t(4), int64_t(64)),
                                         std::make_tuple(int64_t(9), int64_t(3), int64_t(64)),
                                         std::make_tuple(int64_t(8), int64_t(2), int64_t(128)),
                                         std::make_tuple(int64_t(12), int64_t(1), int64_t(64)),
                                         std::make_tuple(int64_t(4), int64_t(2), int64_t(256)),
                                         std::make_tuple(int64_t(2), int64_t(1), int64_t(32))),
                       ::testing::Values(1, 3)),
    [](const auto& info) {
      const auto& heads = std::get<1>(info.param);
      return kind_label(std::get<0>(info.param)) + "_h" + std::to_string(std::get<0>(heads)) + "_kv" +
             std::to_string(std::get<1>(heads)) + "_d" + std::to_string(std::get<2>(heads)) + "_s" +
             std::to_string(std::get<2>(info.param));
    });

}  // namespace
}  // namespace tp::test
