// CUDA elementwise ops (kernels/cuda/ops.h) against the CPU ops (kernels/cpu/ops.h) over parametrized shapes.
// Bounds (NMSE = Σ(gpu - cpu)² / Σ cpu²): F32 outputs 1e-10 (float vs double sums, expf/sincosf vs libm: a
// few ulp); BF16 outputs 1e-5 (one BF16 rounding, relative error <= 2^-9, of values that may round the other
// way from a few-ulp F32 difference). Embedding and residual sums: exact. Bounds from error analysis (no GPU
// was available when they were written; the first run on one measures them).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda/device_buffer.h"

namespace tp::test {
namespace {

constexpr double kF32Nmse = 1e-10;
constexpr double kBf16Nmse = 1e-5;

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<float> bf16_to_f32_vec(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

// ---- embedding ----
class CudaEmbedding : public ::testing::TestWithParam<DType> {};

TEST_P(CudaEmbedding, VocabParallelRowsMatchCpuAndOthersAreZero) {
  TP_REQUIRE_CUDA_DEVICE();
  const DType t = GetParam();
  const int64_t vocab_begin = 30, vocab_local = 40, hidden = 96;
  const std::vector<float> values = random_vec(size_t(vocab_local * hidden), 1);
  std::vector<uint8_t> table_bytes(size_t(vocab_local * hidden) * (t == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(table_bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(table_bytes.data() + 2 * i, &b, 2);
    }
  }
  const std::vector<int32_t> ids = {30, 69, 0, 29, 70, 45, 1000, -1, 31};
  const int64_t n = int64_t(ids.size());
  std::vector<float> want(size_t(n * hidden), 0.0f);
  const int64_t row_bytes = hidden * (t == DType::F32 ? 4 : 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = ids[size_t(i)] - vocab_begin;
    if (r < 0 || r >= vocab_local) continue;
    const int32_t local = int32_t(r);
    cpu::embedding(table_bytes.data(), t, row_bytes, hidden, &local, 1, want.data() + i * hidden);
  }
  DeviceBuffer<uint8_t> d_table(table_bytes);
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<float> d_out(size_t(n * hidden));
  cuda::embedding(d_table.get(), t, vocab_begin, vocab_local, hidden, d_ids.get(), n, d_out.get(), nullptr);
  EXPECT_EQ(d_out.download(), want);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaEmbedding, ::testing::Values(DType::F32, DType::BF16));

// ---- rmsnorm ----
// (n, dim, with residual, out type)
class CudaRmsnorm : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool, DType>> {};

TEST_P(CudaRmsnorm, MatchesCpuAddThenNorm) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [n, dim, with_residual, out_type] = GetParam();
  const float eps = 1e-5f;
  const std::vector<float> x = random_vec(size_t(n * dim), 2), w = random_vec(size_t(dim), 3, 0.5f, 1.5f);
  std::vector<float> residual = random_vec(size_t(n * dim), 4);
  std::vector<float> want_res = residual, want(size_t(n * dim));
  if (with_residual) cpu::add_inplace(want_res.data(), x.data(), n * dim);
  cpu::rmsnorm(with_residual ? want_res.data() : x.data(), w.data(), n, dim, eps, want.data());

  DeviceBuffer<float> d_x(x), d_w(w), d_res(residual), d_out(size_t(n * dim));
  DeviceBuffer<uint16_t> d_out16(size_t(n * dim));
  void* out = out_type == DType::F32 ? static_cast<void*>(d_out.get()) : static_cast<void*>(d_out16.get());
  cuda::rmsnorm(d_x.get(), with_residual ? d_res.get() : nullptr, d_w.get(), n, dim, eps, out, out_type, nullptr);
  const std::vector<float> got = out_type == DType::F32 ? d_out.download() : bf16_to_f32_vec(d_out16.download());
  EXPECT_LT(nmse(got, want), out_type == DType::F32 ? kF32Nmse : kBf16Nmse);
  if (with_residual) {
    EXPECT_EQ(d_res.download(), want_res);  // one float add each: exact
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsnorm,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(7), int64_t(33)),
                                            // 4 a thread in registers, 8 (6000 over 1024 threads), the loop (9000)
                                            ::testing::Values(int64_t(64), int64_t(576), int64_t(4096), int64_t(6000),
                                                              int64_t(9000)),
                                            ::testing::Bool(), ::testing::Values(DType::F32, DType::BF16)));

// The CUDA backend's add_rmsnorm: residual += x, then out = rmsnorm(residual) written over x.
TEST(CudaRmsnormAlias, OutOverXWithResidual) {
  TP_REQUIRE_CUDA_DEVICE();
  for (const int64_t dim : {int64_t(2048), int64_t(6000), int64_t(9000)}) {
    const int64_t n = 3;
    const float eps = 1e-5f;
    const std::vector<float> x = random_vec(size_t(n * dim), 5), w = random_vec(size_t(dim), 6, 0.5f, 1.5f);
    std::vector<float> want_res = random_vec(size_t(n * dim), 7), want(size_t(n * dim));
    DeviceBuffer<float> d_x(x), d_w(w), d_res(want_res);
    cpu::add_inplace(want_res.data(), x.data(), n * dim);
    cpu::rmsnorm(want_res.data(), w.data(), n, dim, eps, want.data());
    cuda::rmsnorm(d_x.get(), d_res.get(), d_w.get(), n, dim, eps, d_x.get(), DType::F32, nullptr);
    EXPECT_LT(nmse(d_x.download(), want), kF32Nmse) << "dim " << dim;
    EXPECT_EQ(d_res.download(), want_res) << "dim " << dim;
  }
}

// ---- rope ----
// (n_tokens, n_heads, head_dim, style)
class CudaRope : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, RopeStyle>> {};

TEST_P(CudaRope, MatchesCpu) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [n_tokens, n_heads, head_dim, style] = GetParam();
  std::vector<float> x = random_vec(size_t(n_tokens * n_heads * head_dim), 5);
  std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) pos[size_t(t)] = int32_t(t * 397 % 5000);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int32_t> d_pos(pos);
  cpu::rope(x.data(), n_tokens, n_heads, head_dim, pos.data(), 10000.0f, style);
  cuda::rope(d_x.get(), n_tokens, n_heads, head_dim, d_pos.get(), 10000.0f, style, nullptr);
  EXPECT_LT(nmse(d_x.download(), x), kF32Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRope,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(13)),
                                            ::testing::Values(int64_t(3), int64_t(9)),
                                            ::testing::Values(int64_t(64), int64_t(128)),
                                            ::testing::Values(RopeStyle::Interleaved, RopeStyle::Neox)));

// split_qkv_rope against the CPU's copies then rope (the model's unfused path): (n_tokens, n_heads, n_kv_heads,
// head_dim, style); v is copied exactly.
class CudaSplitQkvRope
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, RopeStyle>> {};

TEST_P(CudaSplitQkvRope, MatchesCopiesThenCpuRope) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [n_tokens, nh, nkv, hd, style] = GetParam();
  const int64_t row = (nh + 2 * nkv) * hd;
  const std::vector<float> qkv = random_vec(size_t(n_tokens * row), 8);
  std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) pos[size_t(t)] = int32_t(t * 211 % 7000);
  std::vector<float> q, k, v;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* r = qkv.data() + t * row;
    q.insert(q.end(), r, r + nh * hd);
    k.insert(k.end(), r + nh * hd, r + (nh + nkv) * hd);
    v.insert(v.end(), r + (nh + nkv) * hd, r + row);
  }
  cpu::rope(q.data(), n_tokens, nh, hd, pos.data(), 10000.0f, style);
  cpu::rope(k.data(), n_tokens, nkv, hd, pos.data(), 10000.0f, style);
  DeviceBuffer<float> d_qkv(qkv), d_q(q.size()), d_k(k.size()), d_v(v.size());
  DeviceBuffer<int32_t> d_pos(pos);
  cuda::split_qkv_rope(d_qkv.get(), n_tokens, nh, nkv, hd, d_pos.get(), 10000.0f, style, d_q.get(), d_k.get(),
                       d_v.get(), nullptr);
  EXPECT_LT(nmse(d_q.download(), q), kF32Nmse);
  EXPECT_LT(nmse(d_k.download(), k), kF32Nmse);
  EXPECT_EQ(d_v.download(), v);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSplitQkvRope,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(13)),
                                            ::testing::Values(int64_t(9), int64_t(32)),
                                            ::testing::Values(int64_t(3), int64_t(8)),
                                            ::testing::Values(int64_t(64), int64_t(128)),
                                            ::testing::Values(RopeStyle::Interleaved, RopeStyle::Neox)));

// ---- silu_mul and convert ----
// (n, dim, out type)
class CudaSiluMul : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType>> {};

TEST_P(CudaSiluMul, MatchesCpu) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [n, dim, out_type] = GetParam();
  const std::vector<float> gu = random_vec(size_t(n * 2 * dim), 6, -6.0f, 6.0f);
  std::vector<float> want(static_cast<size_t>(n * dim));
  cpu::silu_mul(gu.data(), n, dim, want.data());
  DeviceBuffer<float> d_gu(gu), d_out(size_t(n * dim));
  DeviceBuffer<uint16_t> d_out16(size_t(n * dim));
  void* out = out_type == DType::F32 ? static_cast<void*>(d_out.get()) : static_cast<void*>(d_out16.get());
  cuda::silu_mul(d_gu.get(), n, dim, out, out_type, nullptr);
  const std::vector<float> got = out_type == DType::F32 ? d_out.download() : bf16_to_f32_vec(d_out16.download());
  EXPECT_LT(nmse(got, want), out_type == DType::F32 ? kF32Nmse : kBf16Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSiluMul,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(5)),
                                            ::testing::Values(int64_t(64), int64_t(1536)),
                                            ::testing::Values(DType::F32, DType::BF16)));

TEST(CudaConvert, F32ToBf16IsCommonRounding) {
  TP_REQUIRE_CUDA_DEVICE();
  std::vector<float> x = random_vec(100003, 7, -1e3f, 1e3f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_out(x.size());
  cuda::convert_f32_to_bf16(d_x.get(), int64_t(x.size()), d_out.get(), nullptr);
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = f32_to_bf16(x[i]);
  EXPECT_EQ(d_out.download(), want);
}

// ---- residual add and fill (exact: one F32 add per element, as the CPU) ----
class CudaAddFill : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaAddFill, AddInplaceMatchesCpuExactlyAndFillSetsEveryElement) {
  TP_REQUIRE_CUDA_DEVICE();
  const int64_t n = GetParam();
  std::vector<float> x = random_vec(size_t(n), 11), y = random_vec(size_t(n), 12);
  DeviceBuffer<float> d_x(x), d_y(y);
  cuda::add_inplace(d_x.get(), d_y.get(), n, nullptr);
  cpu::add_inplace(x.data(), y.data(), n);
  EXPECT_EQ(d_x.download(), x);
  cuda::fill(d_y.get(), n, -3.5f, nullptr);
  EXPECT_EQ(d_y.download(), std::vector<float>(size_t(n), -3.5f));
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaAddFill, ::testing::Values(1, 255, 257, 576 * 7, 65535 * 256 + 3));

}  // namespace
}  // namespace tp::test
