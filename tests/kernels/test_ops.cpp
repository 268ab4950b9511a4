// rmsnorm, rope, silu_mul, embedding, add_inplace against naive double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/fixtures.h"

namespace tp::cpu {
namespace {

using test::make_typed_rows;
using test::random_floats;

// ----------------------------------------------------------------------------------------------- rmsnorm
// Tolerance: 2e-6 relative (one F32 rounding of x·scale and of ·weight, scale from a double sum).
class RmsnormTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(RmsnormTest, MatchesReference) {
  const auto [n, dim] = GetParam();
  const auto x = random_floats(size_t(n * dim), 1, -3.0f, 3.0f);
  const auto wt = random_floats(size_t(dim), 2, 0.5f, 1.5f);
  const float eps = 1e-5f;
  std::vector<float> out(x.size());
  rmsnorm(x.data(), wt.data(), n, dim, eps, out.data());
  std::vector<float> in_place(x);
  rmsnorm(in_place.data(), wt.data(), n, dim, eps, in_place.data());
  EXPECT_EQ(in_place, out);
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
    const double scale = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const double want = double(x[size_t(r * dim + i)]) * scale * wt[size_t(i)];
      ASSERT_NEAR(out[size_t(r * dim + i)], want, 2e-6 * std::fabs(want) + 1e-30) << r << "," << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsnormTest,
                         ::testing::Combine(::testing::Values(1, 3, 64, 300), ::testing::Values(1, 13, 576, 2048)));

// -------------------------------------------------------------------------------------------------- rope
using RopeParam = std::tuple<RopeStyle, int64_t, float>;  // style, head_dim, base
class RopeTest : public ::testing::TestWithParam<RopeParam> {};

// Index pairs rotated together: (a[i], b[i]) with angle index i.
std::pair<int64_t, int64_t> rope_pair(RopeStyle style, int64_t head_dim, int64_t i) {
  return style == RopeStyle::Interleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + head_dim / 2};
}

// Exact formula theta_i = pos · base^(-2i/head_dim) in double. Tolerance: 1e-3 · |x|max — the F32 angle
// built by repeated multiplication (llama.cpp's recipe) drifts by ≈ pos · i · 6e-8 rad from the exact one;
// positions here are ≤ 2000, which bounds that drift by ≈ 4e-4.
TEST_P(RopeTest, MatchesExactFormula) {
  const auto [style, head_dim, base] = GetParam();
  const int64_t n_tokens = 7, n_heads = 3;
  const std::vector<int32_t> pos = {0, 1, 2, 17, 100, 999, 2000};
  const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), 5);
  std::vector<float> y(x);
  rope(y.data(), n_tokens, n_heads, head_dim, pos.data(), base, style);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h) {
      const size_t off = size_t((t * n_heads + h) * head_dim);
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        const double theta = double(pos[size_t(t)]) * std::pow(double(base), -2.0 * double(i) / double(head_dim));
        const auto [a, b] = rope_pair(style, head_dim, i);
        const double x0 = x[off + size_t(a)], x1 = x[off + size_t(b)];
        ASSERT_NEAR(y[off + size_t(a)], x0 * std::cos(theta) - x1 * std::sin(theta), 1e-3) << t << " " << h << " " << i;
        ASSERT_NEAR(y[off + size_t(b)], x0 * std::sin(theta) + x1 * std::cos(theta), 1e-3) << t << " " << h << " " << i;
      }
    }
}

// llama.cpp's F32 recipe (ggml_rope_cache_init + rope_f32): theta_scale = powf(base, -2/n_dims), theta starts
// at pos and is multiplied by theta_scale per pair; x0·cos − x1·sin, x0·sin + x1·cos in F32. Tolerance 2e-7
// absolute (|x| ≤ 1): the same operations, up to libm vs. vector math.
TEST_P(RopeTest, MatchesGgmlRecipe) {
  const auto [style, head_dim, base] = GetParam();
  const int64_t n_tokens = 5, n_heads = 2;
  const std::vector<int32_t> pos = {3, 64, 511, 4095, 30000};
  const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), 6);
  std::vector<float> y(x);
  rope(y.data(), n_tokens, n_heads, head_dim, pos.data(), base, style);
  const float theta_scale = powf(base, -2.0f / float(head_dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float theta = float(pos[size_t(t)]);
    for (int64_t i = 0; i < head_dim / 2; ++i, theta *= theta_scale) {
      const float c = cosf(theta), s = sinf(theta);
      for (int64_t h = 0; h < n_heads; ++h) {
        const size_t off = size_t((t * n_heads + h) * head_dim);
        const auto [a, b] = rope_pair(style, head_dim, i);
        const float x0 = x[off + size_t(a)], x1 = x[off + size_t(b)];
        ASSERT_NEAR(y[off + size_t(a)], x0 * c - x1 * s, 2e-7f);
        ASSERT_NEAR(y[off + size_t(b)], x0 * s + x1 * c, 2e-7f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeTest,
                         ::testing::Combine(::testing::Values(RopeStyle::Interleaved, RopeStyle::Neox),
                                            ::testing::Values(2, 8, 64, 128), ::testing::Values(10000.0f, 100000.0f)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == RopeStyle::Neox ? "neox" : "interleaved") +
                                  "_d" + std::to_string(std::get<1>(info.param)) + "_base" +
                                  std::to_string(int(std::get<2>(info.param)));
                         });

TEST(Rope, PositionZeroIsIdentity) {
  const auto x = random_floats(64 * 4, 9);
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::Neox}) {
    std::vector<float> y(x);
    const int32_t pos = 0;
    rope(y.data(), 1, 4, 64, &pos, 10000.0f, style);
    EXPECT_EQ(y, x);
  }
}

TEST(Rope, ManyTokensParallelMatchesOneByOne) {
  const int64_t n_tokens = 300, n_heads = 9, head_dim = 64;
  auto x = random_floats(size_t(n_tokens * n_heads * head_dim), 10);
  std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) pos[size_t(t)] = int32_t(t * 3);
  std::vector<float> y(x);
  set_num_threads(2);
  rope(y.data(), n_tokens, n_heads, head_dim, pos.data(), 100000.0f, RopeStyle::Neox);
  for (int64_t t = 0; t < n_tokens; ++t)
    rope(x.data() + t * n_heads * head_dim, 1, n_heads, head_dim, &pos[size_t(t)], 100000.0f, RopeStyle::Neox);
  EXPECT_EQ(x, y);
}

// rope keeps a run of consecutive positions' cos / sin per thread (ops.cpp): positions inside, just past and far
// from the run, going back, negative, and calls at another head_dim and base in between get the values of a fresh
// computation — each call matches the ggml recipe on the same input.
TEST(Rope, CachedAnglesFollowThePositionHeadDimAndBase) {
  const int64_t n_heads = 2;
  const auto x = random_floats(size_t(n_heads * 128), 11);
  struct Call {
    int32_t pos;
    int64_t head_dim;
    float base;
  };
  const std::vector<Call> calls = {{5, 64, 10000.0f},     {6, 64, 10000.0f},    {7, 64, 10000.0f},
                                   {6, 64, 10000.0f},     {5, 64, 10000.0f},    {4, 64, 10000.0f},
                                   {5 + 4096, 64, 10000.0f}, {5, 64, 10000.0f}, {5, 128, 10000.0f},
                                   {6, 128, 10000.0f},    {6, 64, 500000.0f},   {-3, 64, 10000.0f},
                                   {-2, 64, 10000.0f},    {6, 64, 10000.0f},    {12293, 64, 10000.0f}};
  for (size_t c = 0; c < calls.size(); ++c) {
    const auto [pos, head_dim, base] = calls[c];
    std::vector<float> y(x.begin(), x.begin() + n_heads * head_dim);
    rope(y.data(), 1, n_heads, head_dim, &pos, base, RopeStyle::Neox);
    const float theta_scale = powf(base, -2.0f / float(head_dim));
    float theta = float(pos);
    for (int64_t i = 0; i < head_dim / 2; ++i, theta *= theta_scale)
      for (int64_t h = 0; h < n_heads; ++h) {
        const size_t a = size_t(h * head_dim + i), b = a + size_t(head_dim / 2);
        ASSERT_NEAR(y[a], x[a] * cosf(theta) - x[b] * sinf(theta), 2e-7f) << "call " << c << " i " << i;
        ASSERT_NEAR(y[b], x[a] * sinf(theta) + x[b] * cosf(theta), 2e-7f) << "call " << c << " i " << i;
      }
  }
}
// ---------------------------------------------------------------------------------------------- silu_mul
// Every code path this CPU has (silu.cpp: AVX-512, AVX2 + FMA, the scalar loop), and the dispatched one.
std::vector<SiluPath> silu_paths() {
  std::vector<SiluPath> v;
  float probe_in[2] = {1.0f, 1.0f}, probe_out[1];
  for (SiluPath p : {SiluPath::Portable, SiluPath::Avx2, SiluPath::Avx512})
    if (silu_mul_path(probe_in, 1, 1, probe_out, p)) v.push_back(p);
  return v;
}

// Tolerance 1e-6 relative: expf vs exp (or the vector exp, ~1 ulp) and two F32 roundings.
TEST(SiluMul, MatchesReference) {
  for (SiluPath p : silu_paths())
    for (auto [n, dim] : {std::pair<int64_t, int64_t>{1, 1536}, {5, 13}, {40, 1536}}) {
      const auto gu = random_floats(size_t(n * 2 * dim), 12, -8.0f, 8.0f);
      std::vector<float> out(size_t(n * dim)), dispatched(out.size());
      ASSERT_TRUE(silu_mul_path(gu.data(), n, dim, out.data(), p));
      silu_mul(gu.data(), n, dim, dispatched.data());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < dim; ++i) {
          const double g = gu[size_t(r * 2 * dim + i)], u = gu[size_t(r * 2 * dim + dim + i)];
          const double want = g / (1.0 + std::exp(-g)) * u;
          ASSERT_NEAR(out[size_t(r * dim + i)], want, 1e-6 * std::fabs(want) + 1e-30) << int(p) << " " << r << "," << i;
          ASSERT_NEAR(dispatched[size_t(r * dim + i)], want, 1e-6 * std::fabs(want) + 1e-30) << r << "," << i;
        }
    }
}

// Saturating inputs: e^-g overflows F32 for g < -88 (silu → -0 from below), and -|g| below exp's -87 clamp.
TEST(SiluMul, LargeInputsStayFinite) {
  const std::vector<float> g = {-1000.0f, -200.0f, -89.0f, -87.5f, -30.0f, -0.0f, 0.0f, 1e-30f, 30.0f, 89.0f, 1000.0f};
  const int64_t dim = int64_t(g.size());
  std::vector<float> gu(g);
  gu.insert(gu.end(), g.size(), 2.0f);
  for (SiluPath p : silu_paths()) {
    std::vector<float> out(g.size());
    ASSERT_TRUE(silu_mul_path(gu.data(), 1, dim, out.data(), p));
    for (int64_t i = 0; i < dim; ++i) {
      const double x = g[size_t(i)];
      const double want = x / (1.0 + std::exp(-x)) * 2.0;
      ASSERT_TRUE(std::isfinite(out[size_t(i)])) << int(p) << " " << g[size_t(i)];
      ASSERT_NEAR(out[size_t(i)], want, 1e-6 * std::fabs(want) + 1e-30) << int(p) << " " << g[size_t(i)];
    }
  }
}

// An element's bits do not depend on where it sits: a row's tail (masked or padded) against the same values in
// the middle of a longer row, and a row of a batch against that row alone — on every path.
TEST(SiluMul, ElementBitsIndependentOfPositionAndBatch) {
  const int64_t dim = 37, wide = 64, n = 3;
  const auto gu = random_floats(size_t(n * 2 * dim), 21, -12.0f, 12.0f);
  for (SiluPath p : silu_paths()) {
    std::vector<float> out(size_t(n * dim));
    ASSERT_TRUE(silu_mul_path(gu.data(), n, dim, out.data(), p));
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> one(static_cast<size_t>(dim));
      silu_mul_path(gu.data() + r * 2 * dim, 1, dim, one.data(), p);
      for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(one[size_t(i)], out[size_t(r * dim + i)]) << int(p) << " " << r << "," << i;
      // The row's elements at offset 5 of a 64-wide row: a whole vector for every one of them.
      std::vector<float> w(static_cast<size_t>(2 * wide), 1.0f), wo(static_cast<size_t>(wide));
      for (int64_t i = 0; i < dim; ++i) {
        w[size_t(5 + i)] = gu[size_t(r * 2 * dim + i)];
        w[size_t(wide + 5 + i)] = gu[size_t(r * 2 * dim + dim + i)];
      }
      silu_mul_path(w.data(), 1, wide, wo.data(), p);
      for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(wo[size_t(5 + i)], out[size_t(r * dim + i)]) << int(p) << " " << r << "," << i;
    }
  }
}

// --------------------------------------------------------------------------------------------- embedding
class EmbeddingTest : public ::testing::TestWithParam<DType> {};

// Exact up to 1e-6 relative (the fixture computes d·q + m the same way; only FMA contraction may differ).
TEST_P(EmbeddingTest, GathersRows) {
  const DType type = GetParam();
  const int64_t vocab = 50, hidden = 512;  // two K-quant super-blocks
  const auto table = make_typed_rows(type, vocab, hidden, 13, /*extra_stride=*/10);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  std::vector<float> out(ids.size() * size_t(hidden));
  embedding(table.bytes.data(), type, table.stride, hidden, ids.data(), int64_t(ids.size()), out.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t k = 0; k < hidden; ++k) {
      const float want = table.values[size_t(ids[i] * hidden + k)];
      ASSERT_NEAR(out[i * size_t(hidden) + size_t(k)], want, 1e-6f * std::fabs(want)) << i << "," << k;
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EmbeddingTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q4_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ------------------------------------------------------------------------------------------- add_inplace
TEST(AddInplace, AddsElementwise) {
  auto x = random_floats(1001, 14);
  const auto y = random_floats(1001, 15);
  const auto x0 = x;
  add_inplace(x.data(), y.data(), 1001);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], x0[i] + y[i]);
}

// A prefill-sized call (past the threshold where the threads split it): every element, both ends of each part.
TEST(AddInplace, PrefillSizedCallOverThreads) {
  const int before = num_threads();
  for (int nt : {1, 2, 3}) {
    set_num_threads(nt);
    const int64_t n = 512 * 576 + 7;
    auto x = random_floats(size_t(n), 16);
    const auto y = random_floats(size_t(n), 17);
    const auto x0 = x;
    add_inplace(x.data(), y.data(), n);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], x0[i] + y[i]) << "threads " << nt << " i " << i;
  }
  set_num_threads(before);
}

// add_rmsnorm is add_inplace then rmsnorm, bit for bit (x and out), with out aliasing y as the model calls it; decode
// and prefill sizes, 1 and 2 threads.
TEST(AddRmsnorm, IsAddInplaceThenRmsnormBitForBit) {
  const int before = num_threads();
  for (int nt : {1, 2})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(512)}) {
      set_num_threads(nt);
      const int64_t dim = 576;
      const auto x0 = random_floats(size_t(n * dim), 18);
      const auto y0 = random_floats(size_t(n * dim), 19);
      const auto wt = random_floats(size_t(dim), 20);
      std::vector<float> xa = x0, ya = y0, xb = x0, yb = y0;
      add_inplace(xa.data(), ya.data(), n * dim);
      rmsnorm(xa.data(), wt.data(), n, dim, 1e-5f, ya.data());
      add_rmsnorm(xb.data(), yb.data(), wt.data(), n, dim, 1e-5f, yb.data());
      ASSERT_EQ(0, std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float))) << "threads " << nt << " n " << n;
      ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float))) << "threads " << nt << " n " << n;
      ASSERT_NE(0, std::memcmp(yb.data(), y0.data(), yb.size() * sizeof(float)));
    }
  set_num_threads(before);
}

}  // namespace
}  // namespace tp::cpu
