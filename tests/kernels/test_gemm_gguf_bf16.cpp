// The GGUF prefill path that dequantizes W to BF16 and runs oneDNN's BF16 matmul (kernels/cpu/gemm_gguf_bf16.h)
// against the F32 reference (packed_linear_reference: W dequantized, x as given, F64 sums) over parametrized
// shapes: every GGUF type, odd m, n_out across slab boundaries, the row layouts the VNNI kernel reads, TP
// slices of rows and of columns. Skipped (and says so) on a CPU without AVX-512 BF16.
//
// Bounds (x from make_gguf_x, tests/kernels/gguf_fixtures.h: uniform in [-1, 1], every 97th element ×8):
//   dequantization: dequantize_gguf_bf16 gives exactly f32_to_bf16 of dequantize_rows, element by element.
//   vs the F32 reference: x and W each rounded to BF16 (relative ≤ 2^-9 each), F32 sums:
//     every output |y − ref| ≤ (2^-8 + 2^-17 + 1e-5) · Σ_k |x_k · w_k|  (the two roundings, their product, the
//     F32 summation); NMSE over each shape's outputs ≤ 1e-4 (measured 4e-6 .. 3.3e-5, the worst on 7 × 256).
//   off by default: gemm_gguf(Best) is the int8 tile at every m. Switched on,
//   below gguf_bf16_min_m(): gemm_gguf(Best) has exactly the bits of the best int8 tile (decode unchanged);
//   from it on, exactly those of gemm_gguf(DequantBf16) (Q8_0Groups rows: the tile's at every m).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/gguf_layout.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemm_gguf_bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_linear.h"
#include "tests/kernels/gguf_fixtures.h"

namespace tp::cpu::detail {
namespace {

constexpr double kNmse = 1e-4;
constexpr double kRel = 1.0 / 256 + 1.0 / 131072 + 1e-5;

// w's rows in `layout` (a GGUF regrouping; common/gguf_layout.h).
PackedWeight in_layout(const PackedWeight& w, GgufLayout layout) {
  PackedWeight c = copy_packed_weight(w);
  const int64_t rb = w.row_bytes();
  for (int64_t r = 0; r < w.n_out; ++r) gguf_row_from_file_layout(layout, w.data.data() + r * rb, w.n_in, c.data.data() + r * rb);
  c.gguf_layout = layout;
  return c;
}

// y vs ref: every output within kRel · Σ|x·w|, NMSE ≤ kNmse. Returns the NMSE.
double check(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<double>& scale,
             const std::string& what) {
  double e = 0, s = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = double(y[i]) - ref[i];
    e += d * d;
    s += double(ref[i]) * ref[i];
    EXPECT_LE(std::fabs(d), kRel * scale[i] + 1e-30) << what << " output " << i << ": " << y[i] << " vs " << ref[i];
    if (!(std::fabs(d) <= kRel * scale[i] + 1e-30)) break;
  }
  const double nmse = s > 0 ? e / s : e;
  EXPECT_LE(nmse, kNmse) << what;
  return nmse;
}

// The layouts a weight of type t can be held in (the file's, and the VNNI kernel's regroupings).
std::vector<GgufLayout> layouts_of(DType t) {
  if (t == DType::Q8_0) return {GgufLayout::File, GgufLayout::Q8_0Quads, GgufLayout::Q8_0Groups};
  if (t == DType::Q4_0) return {GgufLayout::File, GgufLayout::Q4_0Groups};
  if (t == DType::Q5_0) return {GgufLayout::File, GgufLayout::Q5_0Quads, GgufLayout::Q5_0Groups};
  return {GgufLayout::File};
}

TEST(GemmGgufBf16, DequantizationIsTheF32DequantizationRoundedToBf16) {
  if (!gguf_bf16_available()) GTEST_SKIP() << "no AVX-512 BF16 (or no oneDNN BF16 matmul) on this CPU";
  for (DType t : test::kGgufTypes)
    for (int64_t n_blocks : {1, 3, 19}) {
      const int64_t n_in = n_blocks * dtype_block_elems(t), n_out = 5;
      const PackedWeight file = test::make_gguf_weight(t, n_out, n_in, uint32_t(9 + n_blocks));
      std::vector<float> f32(size_t(n_out * n_in));
      dequantize_rows(file, 0, n_out, f32.data());
      for (GgufLayout l : layouts_of(t)) {
        const PackedWeight w = l == GgufLayout::File ? copy_packed_weight(file) : in_layout(file, l);
        std::vector<uint16_t> got(size_t(n_out * n_in));
        dequantize_gguf_bf16(w, 0, n_out, got.data());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], f32_to_bf16(f32[i])) << dtype_name(t) << " " << gguf_layout_name(l) << " blocks " << n_blocks
                                                 << " element " << i << " (" << f32[i] << ")";
      }
    }
}

class GemmGgufBf16P : public ::testing::TestWithParam<test::GgufShape> {};

TEST_P(GemmGgufBf16P, MatchesTheF32Reference) {
  if (!gguf_bf16_available()) GTEST_SKIP() << "no AVX-512 BF16 (or no oneDNN BF16 matmul) on this CPU";
  const auto [t, m, n_out, n_blocks] = GetParam();
  const int64_t n_in = n_blocks * dtype_block_elems(t);
  const PackedWeight w = test::make_gguf_weight(t, n_out, n_in, uint32_t(17 + m + n_out));
  const auto x = test::make_gguf_x(m, n_in, uint32_t(200 + m));
  std::vector<float> ref(size_t(m * n_out));
  packed_linear_reference(x.data(), m, w, ref.data(), 2);
  const auto scale = test::abs_sums(x.data(), m, w);
  double worst = 0;
  for (GgufLayout l : layouts_of(t)) {
    const PackedWeight wl = l == GgufLayout::File ? copy_packed_weight(w) : in_layout(w, l);
    for (int threads : {1, 2})
      for (int64_t slab : {int64_t(0), int64_t(16), int64_t(1) << 40}) {
        std::vector<float> y(size_t(m * n_out), NAN);
        gemm_gguf_bf16(x.data(), m, wl, y.data(), threads, slab);
        worst = std::max(worst, check(y, ref, scale, std::string(dtype_name(t)) + " " + gguf_layout_name(l) + " threads " +
                                                         std::to_string(threads) + " slab " + std::to_string(slab)));
      }
  }
  // TP slices: rows (column-parallel: each rank its output rows) and columns (row-parallel: partial sums).
  {
    const int64_t cut = n_out / 2;
    std::vector<float> y(size_t(m * n_out));
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n_out}}) {
      if (r0 == r1) continue;
      const PackedWeight s = test::slice_gguf_weight(w, r0, r1, 0, n_in);
      std::vector<float> part(size_t(m * s.n_out));
      gemm_gguf_bf16(x.data(), m, s, part.data(), 1);
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(y.data() + i * n_out + r0, part.data() + i * s.n_out, size_t(s.n_out) * sizeof(float));
    }
    check(y, ref, scale, "row slices");
  }
  if (n_blocks >= 2) {
    const int64_t blk = dtype_block_elems(t), cut = blk * (n_blocks / 2);
    std::vector<float> y(size_t(m * n_out), 0.0f);
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n_in}}) {
      const PackedWeight s = test::slice_gguf_weight(w, 0, n_out, c0, c1);
      std::vector<float> xs(size_t(m * s.n_in)), part(size_t(m * n_out));
      for (int64_t i = 0; i < m; ++i) std::memcpy(xs.data() + i * s.n_in, x.data() + i * n_in + c0, size_t(s.n_in) * sizeof(float));
      gemm_gguf_bf16(xs.data(), m, s, part.data(), 1);
      for (size_t i = 0; i < y.size(); ++i) y[i] += part[i];
    }
    check(y, ref, scale, "column slices");
  }
  std::printf("[gemm_gguf_bf16] %s m=%lld [%lld x %lld]: worst NMSE vs F32 %.2e\n", std::string(dtype_name(t)).c_str(),
              (long long)m, (long long)n_out, (long long)n_in, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmGgufBf16P,
    ::testing::Combine(::testing::ValuesIn(test::kGgufTypes), ::testing::Values(1, 3, 65, 130),
                       ::testing::Values(7, 34, 300),  // odd, a slab remainder, two slabs of 256
                       ::testing::Values(1, 6)),       // blocks a row: 32 / 192 (256 / 1536 for the K types)
    [](const auto& info) { return test::gguf_shape_name(info.param); });

// gemm_gguf(Best) below the threshold: the bits of the int8 tile (what decode ran before this path existed);
// from it on: the bits of this path.
TEST(GemmGgufBf16, OffByDefaultBestIsTheInt8Tile) {
  ASSERT_FALSE(gguf_bf16_enabled());
  ASSERT_EQ(gguf_bf16_min_m(), std::numeric_limits<int64_t>::max());
  const PackedWeight w = test::make_gguf_weight(DType::Q4_0, 19, 64, 5);
  const auto x = test::make_gguf_x(130, 64, 6);
  std::vector<float> best(size_t(130 * 19)), tile(size_t(130 * 19));
  gemm_gguf(x.data(), 130, w, best.data(), 1, GgufKernel::Best);
  gemm_gguf(x.data(), 130, w, tile.data(), 1, gguf_best_tile());
  EXPECT_EQ(std::memcmp(best.data(), tile.data(), best.size() * sizeof(float)), 0);
}

// Switched on for the test below, off again whatever happens.
struct EnableBf16 {
  EnableBf16() { set_gguf_bf16_enabled(true); }
  ~EnableBf16() { set_gguf_bf16_enabled(false); }
};

TEST(GemmGgufBf16, BestKeepsTheInt8TileBelowTheThreshold) {
  const EnableBf16 on;
  const int64_t min_m = gguf_bf16_min_m();
  if (min_m == std::numeric_limits<int64_t>::max())
    std::printf("[gemm_gguf_bf16] not available here: Best is the int8 tile at every m\n");
  for (DType t : test::kGgufTypes) {
    const int64_t n_in = 2 * dtype_block_elems(t), n_out = 19;
    const PackedWeight w = test::make_gguf_weight(t, n_out, n_in, 5);
    const int64_t top = min_m == std::numeric_limits<int64_t>::max() ? 70 : min_m;
    const auto x = test::make_gguf_x(top + 1, n_in, 6);
    for (int64_t m : {int64_t(1), int64_t(2), top - 1, top}) {
      std::vector<float> best(size_t(m * n_out), NAN), want(size_t(m * n_out), NAN);
      gemm_gguf(x.data(), m, w, best.data(), 1, GgufKernel::Best);
      gemm_gguf(x.data(), m, w, want.data(), 1, m >= min_m ? GgufKernel::DequantBf16 : gguf_best_tile());
      ASSERT_EQ(std::memcmp(best.data(), want.data(), best.size() * sizeof(float)), 0) << dtype_name(t) << " m " << m;
    }
  }
  // Q8_0 rows of whole 16-block groups are regrouped at load (Q8_0Groups), and keep the int8 tile at every m.
  if (gguf_kernel_available(GgufKernel::Avx512Vnni)) {
    const PackedWeight file = test::make_gguf_weight(DType::Q8_0, 19, 512, 5), g = in_layout(file, GgufLayout::Q8_0Groups);
    const int64_t m = min_m == std::numeric_limits<int64_t>::max() ? 70 : min_m;
    const auto x = test::make_gguf_x(m, 512, 6);
    std::vector<float> best(size_t(m * 19)), tile(size_t(m * 19));
    gemm_gguf(x.data(), m, g, best.data(), 1, GgufKernel::Best);
    gemm_gguf(x.data(), m, g, tile.data(), 1, GgufKernel::Avx512Vnni);
    EXPECT_FALSE(gguf_bf16_preferred(g, m));
    EXPECT_EQ(std::memcmp(best.data(), tile.data(), best.size() * sizeof(float)), 0) << "q8_0_groups m " << m;
  }
}

// Within this path a row of x gives the same bits in a call of m rows as in a call of other sizes ≥ the
// threshold (what the engine's batched == alone rule needs among prefill-sized steps): oneDNN's BF16 matmul
// must keep one summation order per output whatever m. (Not at m = 1: oneDNN takes another kernel there and
// its bits differ; this path never runs at m = 1 through Best.)
TEST(GemmGgufBf16, ARowHasTheSameBitsInCallsOfDifferentSizes) {
  if (!gguf_bf16_available()) GTEST_SKIP() << "no AVX-512 BF16 (or no oneDNN BF16 matmul) on this CPU";
  for (DType t : {DType::Q8_0, DType::Q4_K}) {
    const int64_t n_in = 6 * dtype_block_elems(t), n_out = 300;
    const PackedWeight w = test::make_gguf_weight(t, n_out, n_in, 8);
    const auto x = test::make_gguf_x(130, n_in, 9);
    std::vector<float> big(size_t(130 * n_out));
    gemm_gguf_bf16(x.data(), 130, w, big.data(), 1);
    for (int64_t m : {7, 64, 65, 129}) {
      std::vector<float> y(size_t(m * n_out));
      gemm_gguf_bf16(x.data(), m, w, y.data(), 1);
      EXPECT_EQ(std::memcmp(y.data(), big.data(), y.size() * sizeof(float)), 0) << dtype_name(t) << " m " << m << " vs 130";
    }
  }
}

}  // namespace
}  // namespace tp::cpu::detail
