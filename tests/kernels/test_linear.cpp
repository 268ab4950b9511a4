// linear() and Weight against a naive double-precision reference.
// Tolerance: |y - ref| <= 2e-6 · Σ_k |x_k · w_k| + 1e-30 per output — F32 accumulation of n_in products in
// any order (blocked sums; measured worst 2.1e-7 of Σ|x·w| for oneDNN, 1.2e-7 for the GEMV). For BF16 weights the reference
// uses the same BF16-rounded x and W, so the only difference is summation order.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/linear.h"
#include "tests/kernels/fixtures.h"

namespace tp::cpu {
namespace {

using test::make_typed_rows;
using test::random_floats;
using test::round_bf16;

constexpr double kRelTol = 2e-6;

const char* impl_name(LinearImpl i) {
  switch (i) {
    case LinearImpl::Auto: return "auto";
    case LinearImpl::Gemv: return "gemv";
    case LinearImpl::GemvAvx2: return "gemv_avx2";
    case LinearImpl::GemvPortable: return "gemv_portable";
    case LinearImpl::Onednn: return "onednn";
  }
  return "?";
}

// ref[m, n_out] and bound[m, n_out] = Σ|x·w| for a weight whose stored values are w_vals.
void reference(const std::vector<float>& x, int64_t m, const std::vector<float>& w_vals, int64_t n_out,
               int64_t n_in, bool bf16, std::vector<double>* ref, std::vector<double>* bound) {
  ref->assign(size_t(m * n_out), 0.0);
  bound->assign(size_t(m * n_out), 0.0);
  std::vector<float> xr(x);
  if (bf16)
    for (float& f : xr) f = round_bf16(f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        const double p = double(xr[size_t(i * n_in + k)]) * double(w_vals[size_t(r * n_in + k)]);
        s += p;
        a += std::fabs(p);
      }
      (*ref)[size_t(i * n_out + r)] = s;
      (*bound)[size_t(i * n_out + r)] = a;
    }
}

void check_all_impls(DType dtype, int64_t m, int64_t n_out, int64_t n_in, uint32_t seed,
                     std::vector<LinearImpl> impls) {
  const auto src = make_typed_rows(DType::F32, n_out, n_in, seed);
  const Weight w(dtype, n_out, n_in, DType::F32, src.bytes.data(), src.stride);
  std::vector<float> w_vals(src.values);
  if (dtype == DType::BF16)
    for (float& f : w_vals) f = round_bf16(f);
  const auto x = random_floats(size_t(m * n_in), seed + 1);
  std::vector<double> ref, bound;
  reference(x, m, w_vals, n_out, n_in, dtype == DType::BF16, &ref, &bound);
  for (LinearImpl impl : impls) {
    // Paths this CPU lacks are not run (Auto and Gemv still run on whatever it has).
    if (impl == LinearImpl::Onednn && !linear_has_onednn(dtype)) continue;
    if (impl == LinearImpl::GemvAvx2 && !gemv_has_avx2()) continue;
    std::vector<float> y(size_t(m * n_out), NAN);
    linear(x.data(), m, w, y.data(), impl);
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double err = std::fabs(double(y[i]) - ref[i]);
      worst = std::max(worst, err / (bound[i] + 1e-30));
      ASSERT_LE(err, kRelTol * bound[i] + 1e-30)
          << impl_name(impl) << " " << dtype_name(dtype) << " m=" << m << " [" << n_out << "x" << n_in
          << "] at (" << i / size_t(n_out) << ", " << i % size_t(n_out) << "): got " << y[i] << " want " << ref[i];
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", worst);
    ::testing::Test::RecordProperty(std::string("worst_rel_") + impl_name(impl), buf);
  }
}

const std::vector<LinearImpl> kAllImpls = {LinearImpl::Auto, LinearImpl::Gemv, LinearImpl::GemvAvx2,
                                           LinearImpl::GemvPortable, LinearImpl::Onednn};

using LinearParam = std::tuple<DType, int64_t, std::pair<int64_t, int64_t>>;  // dtype, m, (n_out, n_in)

class LinearTest : public ::testing::TestWithParam<LinearParam> {};

TEST_P(LinearTest, MatchesReferenceOnEveryPath) {
  const auto [dtype, m, shape] = GetParam();
  check_all_impls(dtype, m, shape.first, shape.second, uint32_t(m * 131 + shape.first * 7 + shape.second),
                  kAllImpls);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Combine(::testing::Values(DType::F32, DType::BF16), ::testing::Values(1, 2, 3, 7, 16, 33, 100),
                       ::testing::Values(std::pair<int64_t, int64_t>{576, 1536}, std::pair<int64_t, int64_t>{1536, 576},
                                         std::pair<int64_t, int64_t>{13, 67}, std::pair<int64_t, int64_t>{67, 13},
                                         std::pair<int64_t, int64_t>{1, 1}, std::pair<int64_t, int64_t>{5, 33})),
    [](const ::testing::TestParamInfo<LinearParam>& info) {
      const auto& shape = std::get<2>(info.param);
      return std::string(dtype_name(std::get<0>(info.param))) + "_m" + std::to_string(std::get<1>(info.param)) +
             "_" + std::to_string(shape.first) + "x" + std::to_string(shape.second);
    });

// Every M the GEMV serves (1..33: the decode batches below oneDNN's crossover and past it), on the best GEMV this
// CPU has (AVX-512-BF16 with software prefetch on Zen 4 / Sapphire Rapids; the test below checks which) and on
// the portable loop, at odd shapes where the 4-row tiles, the 32-column steps and the prefetch stream all end
// mid-way, with 1 and 2 threads (1031x77 is over worth_parallel's 64 KiB, so 2 threads split its rows).
TEST(LinearGemv, EveryMUpTo33OddShapes) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t m = 1; m <= 33; ++m)
      for (const auto& [n_out, n_in] : {std::pair<int64_t, int64_t>{1031, 77}, std::pair<int64_t, int64_t>{7, 1000}})
        check_all_impls(DType::BF16, m, n_out, n_in, uint32_t(m * 31 + n_out + threads),
                        {LinearImpl::Gemv, LinearImpl::GemvAvx2, LinearImpl::GemvPortable});
  }
  set_num_threads(1);
}

// The AVX2 BF16 tiles sum a row in one order whatever the tile (8 rows at m = 1, 4 x 3 for m > 1), the batch
// and the thread split (gemv_avx2.cpp): each row of a batch has exactly the bits of that row alone, at shapes
// whose columns end mid 16-column group (77, 67, 1000) and on a whole one (1536), with 1 and 2 threads.
TEST(LinearGemv, Avx2BatchRowEqualsRowAlone) {
  if (!gemv_has_avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [n_out, n_in] : {std::pair<int64_t, int64_t>{1031, 77}, std::pair<int64_t, int64_t>{576, 1536},
                                      std::pair<int64_t, int64_t>{13, 67}, std::pair<int64_t, int64_t>{7, 1000}}) {
      const auto src = make_typed_rows(DType::F32, n_out, n_in, uint32_t(n_out + n_in));
      const Weight w(DType::BF16, n_out, n_in, DType::F32, src.bytes.data(), src.stride);
      for (int64_t m : {2, 3, 4, 7, 17}) {
        const auto x = random_floats(size_t(m * n_in), uint32_t(m + threads));
        std::vector<float> batch(size_t(m * n_out)), alone(static_cast<size_t>(n_out));
        linear(x.data(), m, w, batch.data(), LinearImpl::GemvAvx2);
        for (int64_t i = 0; i < m; ++i) {
          linear(x.data() + i * n_in, 1, w, alone.data(), LinearImpl::GemvAvx2);
          for (int64_t r = 0; r < n_out; ++r)
            ASSERT_EQ(std::bit_cast<uint32_t>(batch[size_t(i * n_out + r)]), std::bit_cast<uint32_t>(alone[size_t(r)]))
                << "[" << n_out << "x" << n_in << "] m=" << m << " threads=" << threads << " row " << i << " out " << r;
        }
      }
    }
  }
  set_num_threads(1);
}

// The GEMV rounds x to BF16 exactly as f32_to_bf16 (nearest even, NaN kept) on every path: with W = I the
// output is the rounded x itself (one product by 1.0 plus exact zeros). Values: ties to even up and down, the
// largest below a tie, a denormal that rounds to 0 and one that rounds to the smallest normal (VDPBF16PS reads
// denormal BF16 inputs as 0, so none is kept), ±0, the largest that stays finite, random floats; then ±inf and
// NaN one at a time (0 · inf is NaN in every other output) in a 16-wide step and in the tail (n = 77).
TEST(LinearGemv, RoundsXExactlyLikeF32ToBf16) {
  constexpr int64_t n = 77;
  std::vector<float> eye(size_t(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[size_t(i * n + i)] = 1.0f;
  const Weight w(DType::BF16, n, n, DType::F32, eye.data(), n * 4);
  std::vector<float> x = random_floats(size_t(n), 11);
  const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0xbf808000u, 0x00000001u, 0x807fffffu,
                           0x00000000u, 0x80000000u, 0x7f7f7fffu, 0x3f80ffffu, 0x3f7f8000u, 0x00818000u};
  for (size_t i = 0; i < std::size(bits); ++i) x[i * 5 + 1] = std::bit_cast<float>(bits[i]);
  const auto run = [&](const std::vector<float>& xs, LinearImpl impl) {
    std::vector<float> y(static_cast<size_t>(n));
    linear(xs.data(), 1, w, y.data(), impl);
    return y;
  };
  const auto same = [](float got, float want) {  // -0 + +0 products sum to +0: compare with a +0 added
    return std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(got + 0.0f) == std::bit_cast<uint32_t>(want + 0.0f);
  };
  for (LinearImpl impl : {LinearImpl::Gemv, LinearImpl::GemvPortable}) {
    const std::vector<float> y = run(x, impl);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(same(y[size_t(i)], bf16_to_f32(f32_to_bf16(x[size_t(i)]))))
          << impl_name(impl) << " at " << i << ": x bits " << std::hex << std::bit_cast<uint32_t>(x[size_t(i)])
          << " got bits " << std::bit_cast<uint32_t>(y[size_t(i)]);
    for (const float special : {INFINITY, -INFINITY, NAN})
      for (const int64_t at : {int64_t(40), n - 1}) {
        std::vector<float> xs = x;
        xs[size_t(at)] = special;
        EXPECT_TRUE(same(run(xs, impl)[size_t(at)], bf16_to_f32(f32_to_bf16(special))))
            << impl_name(impl) << " " << special << " at " << at;
      }
  }
}

// The lm_head shape of SmolLM2 (vocab 49152 × hidden 576), once: both paths, both thread counts.
TEST(LinearLarge, LmHeadShape) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    check_all_impls(DType::BF16, 1, 49157, 576, 7, {LinearImpl::Gemv, LinearImpl::GemvAvx2, LinearImpl::Onednn});
  }
  check_all_impls(DType::BF16, 17, 49157, 576, 8, {LinearImpl::Auto});
  check_all_impls(DType::F32, 1, 49157, 576, 9, {LinearImpl::Gemv, LinearImpl::Onednn});
}

TEST(Linear, ThreadCountsAgree) {
  const auto src = make_typed_rows(DType::F32, 1000, 576, 3);
  const Weight w(DType::BF16, 1000, 576, DType::F32, src.bytes.data(), src.stride);
  const auto x = random_floats(3 * 576, 4);
  std::vector<float> y1(3000), y2(3000);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  linear(x.data(), 3, w, y1.data());
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  linear(x.data(), 3, w, y2.data());
  EXPECT_EQ(y1, y2);  // rows are split across threads, each row's sum is computed the same way
}

// oneDNN's reordered copy of W (when it wants one) is made once, reused, and moves with the Weight.
TEST(Linear, OnednnWeightCacheIsReusedAndMoves) {
  if (!linear_has_onednn(DType::BF16)) GTEST_SKIP() << "oneDNN has no BF16 matmul on this CPU (no AVX-512)";
  const auto src = make_typed_rows(DType::F32, 300, 256, 5);
  Weight w(DType::BF16, 300, 256, DType::F32, src.bytes.data(), src.stride);
  EXPECT_EQ(w.gemm_cache_bytes(), 0);
  const auto x = random_floats(32 * 256, 6);
  std::vector<float> y1(32 * 300), y2(32 * 300), y3(32 * 300);
  linear(x.data(), 32, w, y1.data(), LinearImpl::Onednn);
  const int64_t cached = w.gemm_cache_bytes();
  EXPECT_TRUE(cached == 0 || cached >= w.n_bytes()) << cached;
  linear(x.data(), 32, w, y2.data(), LinearImpl::Onednn);
  EXPECT_EQ(w.gemm_cache_bytes(), cached);
  EXPECT_EQ(y1, y2);
  Weight moved(std::move(w));
  EXPECT_EQ(moved.gemm_cache_bytes(), cached);
  linear(x.data(), 32, moved, y3.data(), LinearImpl::Onednn);
  EXPECT_EQ(y1, y3);
}

// The AMX tile kernel (BF16 weights, m <= 128 through the oneDNN path, kernels/cpu/gemm_bf16_amx.h) against oneDNN's
// own matmul on the same blocked copy: every m across its 32-row groups (full, half and ragged last groups), 1
// and 2 threads (units of 32 columns split over the threads), shapes from one 32-input × 64-output block
// up to SmolLM2's. Both sum the same BF16 products in F32, 32 inputs a tile product in input order;
// each output is held to the reference tolerance (check_all_impls), and the test reports how many bits differ
// from oneDNN's (about 1.4 % of outputs on the AMX Xeon: oneDNN's order is not always ours).
TEST(LinearAmxGemm, MatchesOnednnAndReference) {
  if (!amx_gemm()) GTEST_SKIP() << "no AMX here (or the kernel is switched off)";
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 32}, {192, 576}, {576, 1536}, {1536, 576}, {960, 576}};
  int64_t differing = 0, total = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [n_out, n_in] : shapes) {
      const auto src = make_typed_rows(DType::F32, n_out, n_in, uint32_t(n_out + n_in));
      const Weight w(DType::BF16, n_out, n_in, DType::F32, src.bytes.data(), src.stride);
      for (int64_t m : {1, 16, 17, 31, 32, 33, 64, 100, 128}) {
        check_all_impls(DType::BF16, m, n_out, n_in, uint32_t(m * 3 + n_in), {LinearImpl::Onednn, LinearImpl::Auto});
        const auto x = random_floats(size_t(m * n_in), uint32_t(m * 7 + n_out));
        std::vector<float> ours(size_t(m * n_out), NAN), theirs(size_t(m * n_out), NAN);
        linear(x.data(), m, w, ours.data(), LinearImpl::Onednn);
        set_amx_gemm(false);
        ASSERT_FALSE(amx_gemm());
        linear(x.data(), m, w, theirs.data(), LinearImpl::Onednn);
        set_amx_gemm(true);
        for (size_t i = 0; i < ours.size(); ++i) {
          ASSERT_FALSE(std::isnan(ours[i])) << "m=" << m << " [" << n_out << "x" << n_in << "] output " << i;
          differing += std::bit_cast<uint32_t>(ours[i]) != std::bit_cast<uint32_t>(theirs[i]);
        }
        total += int64_t(ours.size());
      }
    }
  }
  check_all_impls(DType::BF16, 17, 49152, 576, 21, {LinearImpl::Auto});  // SmolLM2's lm_head: 1536 units, 2 threads
  set_num_threads(1);
  ::testing::Test::RecordProperty("bits_differing_from_onednn",
                                  std::to_string(differing) + " of " + std::to_string(total));
  std::printf("AMX GEMM vs oneDNN: %lld of %lld outputs differ in their bits\n", (long long)differing,
              (long long)total);
}

TEST(Linear, ReportsDispatch) {
  EXPECT_GE(linear_gemm_min_m(DType::BF16), 1);
  EXPECT_EQ(linear_gemm_min_m(DType::F32), 16);
  // On a CPU with avx512bf16 the AVX-512 path must be the one exercised above.
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_TRUE(gemv_has_avx512(DType::BF16));
  }
  if (!__builtin_cpu_supports("avx512f")) {
    EXPECT_FALSE(gemv_has_avx512(DType::F32));
  }
  EXPECT_EQ(gemv_has_avx2(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_TRUE(linear_has_onednn(DType::F32));
  // Where oneDNN has no BF16 matmul, every M goes to our tiles (and asking for oneDNN says why not).
  if (!linear_has_onednn(DType::BF16)) {
    EXPECT_EQ(linear_gemm_min_m(DType::BF16), std::numeric_limits<int64_t>::max());
    const auto src = make_typed_rows(DType::F32, 4, 32, 1);
    const Weight w(DType::BF16, 4, 32, DType::F32, src.bytes.data(), src.stride);
    std::vector<float> x(32, 1.0f), y(4);
    EXPECT_THROW(linear(x.data(), 1, w, y.data(), LinearImpl::Onednn), Error);
  }
}

// ------------------------------------------------------------------------------------------------ Weight
class WeightTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(WeightTest, ConvertsFromSourceType) {
  const auto [src_type, dtype] = GetParam();
  const int64_t n_out = 5, n_in = dtype_block_elems(src_type) == 256 ? 512 : 96;
  const auto src = make_typed_rows(src_type, n_out, n_in, 11, /*extra_stride=*/6);
  const Weight w(dtype, n_out, n_in, src_type, src.bytes.data(), src.stride);
  EXPECT_EQ(w.dtype(), dtype);
  EXPECT_EQ(w.n_out(), n_out);
  EXPECT_EQ(w.n_in(), n_in);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % 64, 0u);
  EXPECT_EQ(w.n_bytes(), n_out * n_in * (dtype == DType::F32 ? 4 : 2));
  for (int64_t i = 0; i < n_out * n_in; ++i) {
    const float want = src.values[size_t(i)];
    if (dtype == DType::F32) {
      ASSERT_NEAR(static_cast<const float*>(w.data())[i], want, 1e-6f * std::fabs(want)) << i;
    } else {
      const float got = bf16_to_f32(static_cast<const uint16_t*>(w.data())[i]);
      ASSERT_NEAR(got, round_bf16(want), 1e-6f * std::fabs(want)) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, WeightTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                                              DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                                              DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                                              DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_to_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

TEST(Weight, MoveTransfersOwnership) {
  const auto src = make_typed_rows(DType::F32, 3, 8, 1);
  Weight a(DType::F32, 3, 8, DType::F32, src.bytes.data(), src.stride);
  const void* p = a.data();
  Weight b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  Weight c(DType::BF16, 1, 8, DType::F32, src.bytes.data(), src.stride);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.n_out(), 3);
}

TEST(Weight, RejectsBadInput) {
  const auto src = make_typed_rows(DType::F32, 2, 64, 1);
  EXPECT_THROW(Weight(DType::Q8_0, 2, 64, DType::F32, src.bytes.data(), src.stride), InputError);
  EXPECT_THROW(Weight(DType::F32, 2, 48, DType::Q8_0, src.bytes.data(), 64), InputError);  // 48 % 32 != 0
  EXPECT_THROW(Weight(DType::F32, 2, 64, DType::F32, src.bytes.data(), 100), InputError);  // stride < row
}

}  // namespace
}  // namespace tp::cpu
