// CUDA GEMMs and GEMVs (kernels/cuda/gemm.h) against the CPU linear (kernels/cpu/linear.h, y = x · Wᵀ) over
// parametrized shapes. Bounds (NMSE against the CPU):
//   gemm_bf16, F32 out: 1e-8 (the same BF16 inputs, products exact in F32, F32 accumulation in another order
//     — tensor cores may truncate rather than round partial sums: ~1e-5 relative per output at k = 1024);
//   gemm_bf16, BF16 out: 1e-5 (one BF16 rounding of the output);
//   quantize_fp8_per_token: exact (bytes and scales equal common/fp_formats.h's conversion);
//   gemm_fp8: 1e-6 against the CPU over the dequantized E4M3 operands (products exact in F32; Hopper's FP8
//     MMA keeps fewer mantissa bits in its accumulator between cuBLASLt's F32 promotions);
//   gemv_bf16: 1e-8 against the CPU BF16 linear over the same F32 x (both round x to BF16; products exact in
//     F32, F32 sums in another order);
//   gemv_w8a16: 1e-9 against the CPU over the int8 values, the scale applied after the sum (F32 sums of <= 576
//     terms in another order: ~1e-7 relative).
// These bounds come from error analysis: no GPU was available when they were written; the first run on one
// measures them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/gemm.h"
#include "tests/kernels/cuda/device_buffer.h"

namespace tp::test {
namespace {

constexpr double kGemmF32Nmse = 1e-8;
constexpr double kGemmBf16Nmse = 1e-5;
constexpr double kGemmFp8Nmse = 1e-6;
constexpr double kGemvNmse = 1e-9;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}

std::vector<float> round_bf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

// y[m, n] = x[m, k] · w[n, k]ᵀ on the CPU with an F32 weight.
std::vector<float> cpu_linear(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n,
                              int64_t k) {
  const cpu::Weight weight(DType::F32, n, k, DType::F32, w.data(), k * int64_t(sizeof(float)));
  std::vector<float> y(static_cast<size_t>(m * n));
  cpu::linear(x.data(), m, weight, y.data());
  return y;
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // m, n, k
const Shape kShapes[] = {{1, 64, 64}, {7, 96, 160}, {33, 256, 576}, {128, 384, 1024}};

class CudaGemmBf16 : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(CudaGemmBf16, MatchesCpuBf16Linear) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [shape, y_type] = GetParam();
  const auto [m, n, k] = shape;
  const std::vector<float> x = random_vec(size_t(m * k), 1), w = random_vec(size_t(n * k), 2);
  const cpu::Weight weight(DType::BF16, n, k, DType::F32, w.data(), k * int64_t(sizeof(float)));
  std::vector<float> want(static_cast<size_t>(m * n));
  cpu::linear(x.data(), m, weight, want.data());

  cuda::Blas blas;
  DeviceBuffer<uint16_t> dx(to_bf16(x)), dw(to_bf16(w)), dy16(size_t(m * n));
  DeviceBuffer<float> dy(size_t(m * n));
  if (y_type == DType::F32) {
    cuda::gemm_bf16(blas, dx.get(), dw.get(), m, n, k, dy.get(), y_type, nullptr);
    EXPECT_LT(nmse(dy.download(), want), kGemmF32Nmse);
  } else {
    cuda::gemm_bf16(blas, dx.get(), dw.get(), m, n, k, dy16.get(), y_type, nullptr);
    std::vector<float> got;
    for (uint16_t b : dy16.download()) got.push_back(bf16_to_f32(b));
    EXPECT_LT(nmse(got, want), kGemmBf16Nmse);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemmBf16,
                         ::testing::Combine(::testing::ValuesIn(kShapes), ::testing::Values(DType::F32, DType::BF16)));

class CudaFp8 : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(CudaFp8, PerTokenQuantizationThenGemm) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [shape, x_type] = GetParam();
  const auto [m, n, k] = shape;
  std::vector<float> x = random_vec(size_t(m * k), 3);
  for (int64_t i = 0; i < m; ++i)  // rows of different magnitudes; row 0 all zero
    for (int64_t j = 0; j < k; ++j) x[size_t(i * k + j)] *= i == 0 ? 0.0f : float(1 + i % 5) * 3.0f;
  if (x_type == DType::BF16) x = round_bf16(x);

  // Quantization: exactly the reference.
  std::vector<uint8_t> want_q(static_cast<size_t>(m * k));
  std::vector<float> want_s(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(x[size_t(i * k + j)]));
    const float s = std::max(amax, 1e-12f) / 448.0f;
    want_s[size_t(i)] = s;
    for (int64_t j = 0; j < k; ++j) want_q[size_t(i * k + j)] = f32_to_fp8_e4m3(x[size_t(i * k + j)] / s);
  }
  DeviceBuffer<float> dx32(x);
  DeviceBuffer<uint16_t> dx16(to_bf16(x));
  DeviceBuffer<uint8_t> dxq(size_t(m * k));
  DeviceBuffer<float> dxs(static_cast<size_t>(m));
  const void* dx = x_type == DType::F32 ? static_cast<const void*>(dx32.get()) : static_cast<const void*>(dx16.get());
  cuda::quantize_fp8_per_token(dx, x_type, m, k, dxq.get(), dxs.get(), nullptr);
  EXPECT_EQ(dxq.download(), want_q);
  EXPECT_EQ(dxs.download(), want_s);

  // GEMM: needs cuBLASLt's FP8 kernels (sm_89+).
  if (cuda::compute_capability() < 89) GTEST_SKIP() << "FP8 GEMM needs sm_89 or newer";
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), sc(0.001f, 0.01f);
  std::vector<uint8_t> wq(static_cast<size_t>(n * k));
  std::vector<float> w_scale(static_cast<size_t>(n)), wq_f(size_t(n * k)), xq_f(size_t(m * k));
  for (size_t i = 0; i < wq.size(); ++i) {
    wq[i] = f32_to_fp8_e4m3(u(rng) * 448.0f);
    wq_f[i] = fp8_e4m3_to_f32(wq[i]);
  }
  for (auto& s : w_scale) s = sc(rng);
  for (size_t i = 0; i < want_q.size(); ++i) xq_f[i] = fp8_e4m3_to_f32(want_q[i]);
  std::vector<float> want = cpu_linear(xq_f, m, wq_f, n, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[size_t(i * n + j)] *= want_s[size_t(i)] * w_scale[size_t(j)];
  cuda::Blas blas;
  DeviceBuffer<uint8_t> dwq(wq);
  DeviceBuffer<float> dws(w_scale), dy(size_t(m * n));
  cuda::gemm_fp8(blas, dxq.get(), dxs.get(), dwq.get(), dws.get(), m, n, k, dy.get(), nullptr);
  EXPECT_LT(nmse(dy.download(), want), kGemmFp8Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFp8,
                         ::testing::Combine(::testing::ValuesIn(kShapes), ::testing::Values(DType::F32, DType::BF16)));

// (m, n, k, x type)
class CudaGemvBf16 : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(CudaGemvBf16, MatchesCpuBf16Linear) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [m, n, k] = GetParam();
  const std::vector<float> x = random_vec(size_t(m * k), 7), w = random_vec(size_t(n * k), 8);
  const cpu::Weight weight(DType::BF16, n, k, DType::F32, w.data(), k * int64_t(sizeof(float)));
  std::vector<float> want(static_cast<size_t>(m * n));
  cpu::linear(x.data(), m, weight, want.data());

  DeviceBuffer<float> dx(x), dy(size_t(m * n) + 1);
  DeviceBuffer<uint16_t> dw(to_bf16(w));
  cuda::gemv_bf16(dx.get(), m, dw.get(), n, k, dy.get() + 1, nullptr);  // y at an offset: any alignment
  std::vector<float> got = dy.download();
  got.erase(got.begin());
  EXPECT_LT(nmse(got, want), kGemmF32Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemvBf16,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(2), int64_t(3), int64_t(4)),
                                            ::testing::Values(int64_t(1), int64_t(100), int64_t(3072)),
                                            ::testing::Values(int64_t(8), int64_t(576), int64_t(5632))));

TEST(CudaGemvBf16Args, RefusesWhatItCannotRun) {
  TP_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> dx(size_t(64)), dy(size_t(64));
  DeviceBuffer<uint16_t> dw(size_t(64));
  EXPECT_THROW(cuda::gemv_bf16(dx.get(), 5, dw.get(), 4, 8, dy.get(), nullptr), InputError);      // m > 4
  EXPECT_THROW(cuda::gemv_bf16(dx.get(), 1, dw.get(), 4, 12, dy.get(), nullptr), InputError);     // k % 8
  EXPECT_THROW(cuda::gemv_bf16(dx.get() + 1, 1, dw.get(), 4, 8, dy.get(), nullptr), InputError);  // x alignment
}

class CudaGemvW8A16 : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, DType>> {};

TEST_P(CudaGemvW8A16, MatchesCpuOverInt8Values) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [m, n, k, x_type] = GetParam();
  std::vector<float> x = random_vec(size_t(m * k), 5);
  if (x_type == DType::BF16) x = round_bf16(x);
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> sc(0.001f, 0.02f);
  std::vector<int8_t> w(static_cast<size_t>(n * k));
  std::vector<float> w_f(w.size()), scale(static_cast<size_t>(n));
  for (size_t i = 0; i < w.size(); ++i) w_f[i] = float(w[i] = int8_t(q(rng)));
  for (auto& s : scale) s = sc(rng);
  std::vector<float> want = cpu_linear(x, m, w_f, n, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[size_t(i * n + j)] *= scale[size_t(j)];

  DeviceBuffer<float> dx32(x), dscale(scale), dy(size_t(m * n));
  DeviceBuffer<uint16_t> dx16(to_bf16(x));
  DeviceBuffer<int8_t> dw(w);
  const void* dx = x_type == DType::F32 ? static_cast<const void*>(dx32.get()) : static_cast<const void*>(dx16.get());
  cuda::gemv_w8a16(dx, x_type, m, dw.get(), dscale.get(), n, k, dy.get(), nullptr);
  EXPECT_LT(nmse(dy.download(), want), kGemvNmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemvW8A16,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(3), int64_t(8), int64_t(11)),
                                            ::testing::Values(int64_t(100), int64_t(1536)),
                                            ::testing::Values(int64_t(256), int64_t(576)),
                                            ::testing::Values(DType::F32, DType::BF16)));

}  // namespace
}  // namespace tp::test
