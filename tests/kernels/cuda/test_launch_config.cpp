// Host-only tests of kernels/cuda: the launch choices (launch_config.h) and the entries' argument checks, which
// throw InputError before any CUDA call — so this suite runs on machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>

#include "common/error.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sampling.h"

namespace tp::cuda {
namespace {

TEST(CudaLaunchConfig, RowThreadsAreWarpMultiplesWithinLimits) {
  EXPECT_EQ(row_threads(1), 32);
  EXPECT_EQ(row_threads(33), 64);
  EXPECT_EQ(row_threads(576), 576);
  EXPECT_EQ(row_threads(576, 4), 160);  // 144 rounded up to a warp
  EXPECT_EQ(row_threads(100000), 1024);
  EXPECT_EQ(row_threads(0), 32);
}

TEST(CudaLaunchConfig, AttentionItemsCountHeadChunks) {
  EXPECT_EQ(attention_items(5, 9, 3), 5 * 3);          // group 3: one chunk per KV head
  EXPECT_EQ(attention_items(2, 32, 2), 2 * 2 * 2);      // group 16: two chunks of 8
  EXPECT_EQ(attention_items(1, 12, 1), 2);              // group 12: chunks of 8 and 4
}

TEST(CudaLaunchConfig, AttentionSplitsOnlyWhenSmsIdleAndContextLong) {
  // A big batch fills the SMs: no split.
  EXPECT_EQ(attention_splits(256, 32, 8, 8192, 132), 1);
  // One decode token, long context: split until ~2 items per SM, bounded by kMaxSplits.
  const int s = attention_splits(1, 32, 8, 32768, 132);
  EXPECT_GT(s, 1);
  EXPECT_LE(s, kMaxSplits);
  EXPECT_EQ(s, 33);  // 8 items, 264 wanted
  // Short context: partitions of at least kMinSplitTokens.
  EXPECT_EQ(attention_splits(1, 32, 8, 600, 132), 2);
  EXPECT_EQ(attention_splits(1, 32, 8, 100, 132), 1);
  // Very long context, few items: capped.
  EXPECT_EQ(attention_splits(1, 8, 1, 1 << 20, 132), kMaxSplits);
  // Degenerate inputs give 1.
  EXPECT_EQ(attention_splits(0, 8, 1, 100, 132), 1);
  EXPECT_EQ(attention_splits(1, 8, 1, 4096, 0), 1);
}

TEST(CudaDeviceInfo, DeviceCountNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = device_count());
  EXPECT_GE(n, 0);
}

TEST(CudaLaunchConfig, AttentionWorkspaceBytes) {
  EXPECT_EQ(attention_workspace_bytes(3, 8, 64, 1), 0);
  EXPECT_EQ(attention_workspace_bytes(3, 8, 64, 4), 3 * 8 * 4 * (2 + 64) * 4);
}

// The plan's attention share: the largest workspace over every step size, found where split-K is deepest (few
// tokens, a long context), not at the largest step; 0 when no step splits (short contexts).
TEST(CudaLaunchConfig, AttentionWorkspacePeakOverStepSizes) {
  const int64_t nh = 32, nkv = 8, hd = 128, ctx = 32768;
  const int sms = 132;
  int64_t brute = 0;
  for (int64_t n = 1; n <= 512; ++n)
    brute = std::max(brute, attention_workspace_bytes(n, nh, hd, attention_splits(n, nh, nkv, ctx, sms)));
  EXPECT_EQ(attention_workspace_peak(512, nh, nkv, hd, ctx, sms), brute);
  EXPECT_GT(brute, attention_workspace_bytes(512, nh, hd, attention_splits(512, nh, nkv, ctx, sms)));
  EXPECT_EQ(attention_workspace_peak(64, nh, nkv, hd, kMinSplitTokens, sms), 0);
  EXPECT_EQ(attention_workspace_peak(0, nh, nkv, hd, ctx, sms), 0);
}

TEST(CudaLaunchConfig, CheckHelpersThrowInputError) {
  EXPECT_THROW(check_positive("e", "n", 0), InputError);
  EXPECT_NO_THROW(check_positive("e", "n", 1));
  EXPECT_THROW(check_non_negative("e", "n", -1), InputError);
  alignas(16) static const uint8_t buf[32] = {};
  EXPECT_NO_THROW(check_aligned("e", "p", buf, 16));
  EXPECT_THROW(check_aligned("e", "p", buf + 1, 16), InputError);
}

// A pool view that is never dereferenced: the checks throw before any launch.
KvTensorView fake_pool(KvDType t, int64_t head_dim, int64_t n_kv_heads = 2, bool tensor_scales = false) {
  static uint8_t byte = 0;
  KvTensorView v;
  v.blocks = &byte;
  v.n_blocks = 4;
  v.layout = {t, 16, n_kv_heads, head_dim, tensor_scales};
  return v;
}

TEST(CudaArgumentChecks, ElementwiseOps) {
  EXPECT_THROW(rmsnorm(nullptr, nullptr, nullptr, -1, 64, 1e-5f, nullptr, DType::F32, nullptr), InputError);
  EXPECT_THROW(rmsnorm(nullptr, nullptr, nullptr, 1, 0, 1e-5f, nullptr, DType::F32, nullptr), InputError);
  EXPECT_THROW(rmsnorm(nullptr, nullptr, nullptr, 1, 64, 1e-5f, nullptr, DType::Q8_0, nullptr), InputError);
  EXPECT_THROW(rope(nullptr, 1, 2, 63, nullptr, 10000.0f, RopeStyle::Neox, nullptr), InputError);
  EXPECT_THROW(silu_mul(nullptr, 1, 64, nullptr, DType::F16, nullptr), InputError);
  EXPECT_THROW(embedding(nullptr, DType::Q4_0, 0, 10, 64, nullptr, 1, nullptr, nullptr), InputError);
  EXPECT_THROW(embedding(nullptr, DType::F32, 0, 10, 0, nullptr, 1, nullptr, nullptr), InputError);
  // Empty work is accepted and launches nothing.
  EXPECT_NO_THROW(rmsnorm(nullptr, nullptr, nullptr, 0, 64, 1e-5f, nullptr, DType::F32, nullptr));
  EXPECT_NO_THROW(convert_f32_to_bf16(nullptr, 0, nullptr, nullptr));
}

TEST(CudaArgumentChecks, KvWriteAndAttention) {
  const KvTensorView k = fake_pool(KvDType::BF16, 64), v_other = fake_pool(KvDType::F32, 64);
  EXPECT_THROW(write_kv(nullptr, nullptr, 1, nullptr, k, v_other, nullptr), InputError);
  EXPECT_NO_THROW(write_kv(nullptr, nullptr, 0, nullptr, k, k, nullptr));

  static const int32_t dummy = 0;
  AttentionBatch b;
  b.token_seq = b.token_pos = b.block_tables = &dummy;
  b.max_blocks_per_seq = 4;
  b.max_context = 64;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, v_other, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  EXPECT_THROW(paged_attention(nullptr, 1, 7, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);  // 7 % 2
  const KvTensorView odd = fake_pool(KvDType::F32, 80);
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, odd, odd, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  b.n_splits = 0;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  b.n_splits = kMaxSplits + 1;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  b.n_splits = 4;  // needs a workspace
  const int64_t need = attention_workspace_bytes(1, 8, 64, 4);
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  uint8_t ws = 0;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, &ws, need - 1, nullptr), InputError);
  b.n_splits = 1;
  b.max_context = 0;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  b.max_context = 64;
  b.block_tables = nullptr;
  EXPECT_THROW(paged_attention(nullptr, 1, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr), InputError);
  b.block_tables = &dummy;
  EXPECT_NO_THROW(paged_attention(nullptr, 0, 8, b, k, k, 0.125f, nullptr, nullptr, 0, nullptr));
}

TEST(CudaArgumentChecks, GemvQuantizeAndSampling) {
  alignas(16) static const int8_t w[64] = {};
  EXPECT_THROW(gemv_w8a16(nullptr, DType::F32, 1, w, nullptr, 4, 24, nullptr, nullptr), InputError);  // k % 16
  EXPECT_THROW(gemv_w8a16(nullptr, DType::F32, 1, w + 1, nullptr, 4, 16, nullptr, nullptr), InputError);
  EXPECT_THROW(gemv_w8a16(nullptr, DType::Q8_0, 1, w, nullptr, 4, 16, nullptr, nullptr), InputError);
  EXPECT_THROW(quantize_fp8_per_token(nullptr, DType::F16, 1, 16, nullptr, nullptr, nullptr), InputError);
  EXPECT_THROW(scale_rows_cols(nullptr, 1, 0, nullptr, nullptr, nullptr), InputError);
  EXPECT_THROW(argmax_rows(nullptr, 1, 0, nullptr, nullptr), InputError);
  EXPECT_THROW(sampling_probs(nullptr, -1, 10, nullptr, nullptr, nullptr), InputError);
  EXPECT_THROW(sampling_probs(nullptr, 1, int64_t(1) << 32, nullptr, nullptr, nullptr), InputError);
}

}  // namespace
}  // namespace tp::cuda
