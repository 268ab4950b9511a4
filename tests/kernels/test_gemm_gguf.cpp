// The GGUF block kernels (kernels/cpu/gemm_gguf.h) against the F32 reference (packed_linear_reference: W
// dequantized, x as given, F64 sums) over parametrized shapes, on every kernel this CPU runs (portable, AVX2,
// AVX-512 VNNI where present — this test cannot exercise VNNI on a CPU without it, and says so).
//
// Bounds (random blocks; x uniform in [-1, 1] with every 97th element ×8, so a third of the 32-blocks have a
// max of ~8 and a 8× coarser activation step):
//   vs the F32 reference, the activations' int8 rounding (llama.cpp's Q8_0 / Q8_1 / Q8_K):
//     every output: |y − ref| ≤ Σ_k |w_k| · d_x(k) / 2 (+ the kernel bound below) — the hard bound of
//     round-to-nearest with step d_x; and NMSE = Σ(y − ref)² / Σ ref² over each shape's outputs ≤ 1e-3 for
//     32-block activations (Q8_0 / Q8_1; expected ≈ 3e-4 with these outliers, measured worst 5.7e-4) and
//     ≤ 3e-3 for Q8_K (256-blocks: every block holds an outlier, expected ≈ 6e-4, measured worst 1.45e-3
//     on a single output).
//   between kernels (portable vs AVX2 vs VNNI): the same integers, F32 sums in another order:
//     |y_a − y_b| ≤ 1e-5 · Σ_k |x_k · w_k|; measured worst 1.8e-7 · Σ|x·w|.
//   column slices (a TP row-parallel split on block boundaries): Σ over the slices = the whole, same bound
//     as between kernels (the activation blocks quantize identically because slices fall on blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/gguf_layout.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/rows16.h"
#include "tests/kernels/gguf_fixtures.h"

namespace tp::cpu::detail {
namespace {

constexpr double kNmseVsF32 = 1e-3;      // Q8_0 / Q8_1 activations
constexpr double kNmseVsF32Q8K = 3e-3;  // Q8_K activations
constexpr double kKernelRel = 1e-5;

// A copy of w in the row layout the best kernel reads (prepare_gguf_weight: Q8_0 / Q5_0 regrouped into
// Q8_0Quads / Q5_0Quads on a CPU with AVX-512 VNNI; unchanged otherwise).
PackedWeight prepared(const PackedWeight& w) {
  PackedWeight c = copy_packed_weight(w);
  prepare_gguf_weight(&c);
  check_packed_weight(c);
  return c;
}

double nmse(const std::vector<float>& y, const std::vector<float>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    e += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    s += double(ref[i]) * ref[i];
  }
  return s > 0 ? e / s : e;
}

double g_worst_kernel_rel = 0;

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& scale,
                  const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(double(a[i]) - b[i]);
    g_worst_kernel_rel = std::max(g_worst_kernel_rel, err / (scale[i] + 1e-30));
    ASSERT_LE(err, kKernelRel * scale[i] + 1e-30) << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

class GemmGguf : public ::testing::TestWithParam<test::GgufShape> {};

TEST_P(GemmGguf, MatchesTheF32ReferenceOnEveryKernel) {
  const auto [t, m, n_out, n_blocks] = GetParam();
  const int64_t n_in = n_blocks * dtype_block_elems(t);
  const PackedWeight w = test::make_gguf_weight(t, n_out, n_in, uint32_t(7 + m + n_out));
  const auto x = test::make_gguf_x(m, n_in, uint32_t(100 + m));
  std::vector<float> ref(size_t(m * n_out));
  packed_linear_reference(x.data(), m, w, ref.data(), 2);

  std::vector<float> portable(size_t(m * n_out), NAN);
  gemm_gguf(x.data(), m, w, portable.data(), 2, GgufKernel::Portable);
  // The NMSE is a statistic: stated from 16 outputs on (over 3 outputs a Q5_K weight's reached 7e-3 with every output
  // within its hard bound below); the hard bound holds for every output.
  const double e = nmse(portable, ref);
  if (m * n_out >= 16) {
    EXPECT_LE(e, gguf_act_type(w.format) == GgufActType::Q8_K ? kNmseVsF32Q8K : kNmseVsF32)
        << "portable vs F32 reference";
  }
  const auto scale = test::abs_sums(x.data(), m, w);
  {
    GgufActs a;
    quantize_gguf_acts(x.data(), m, n_in, gguf_act_type(w.format), &a);
    const int64_t blk = n_in / a.n_blocks();
    std::vector<float> wd(size_t(n_out * n_in));
    dequantize_rows(w, 0, n_out, wd.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < n_out; ++r) {
        double hard = 0;
        for (int64_t k = 0; k < n_in; ++k)
          hard += std::fabs(double(wd[size_t(r * n_in + k)])) * std::fabs(a.d[size_t(i * a.n_blocks() + k / blk)]) / 2;
        const size_t o = size_t(i * n_out + r);
        ASSERT_LE(std::fabs(double(portable[o]) - ref[o]), hard * 1.0001 + kKernelRel * scale[o]) << "output " << o;
      }
  }
  g_worst_kernel_rel = 0;

  for (GgufKernel k : {GgufKernel::Avx2, GgufKernel::Avx512Vnni}) {
    if (!gguf_kernel_available(k)) {
      std::printf("[gemm_gguf] %s kernel not run: this CPU lacks it\n", gguf_kernel_name(k));
      continue;
    }
    for (int threads : {1, 2}) {
      std::vector<float> y(size_t(m * n_out), NAN);
      gemm_gguf(x.data(), m, w, y.data(), threads, k);
      expect_close(y, portable, scale, std::string(gguf_kernel_name(k)) + " vs portable, threads " + std::to_string(threads));
    }
  }
  // The rows regrouped as the best kernel reads them (Q8_0Quads / Q5_0Quads with VNNI), on every kernel.
  const PackedWeight wp = prepared(w);
  for (GgufKernel k : {GgufKernel::Portable, GgufKernel::Avx2, GgufKernel::Avx512Vnni}) {
    if (!gguf_kernel_available(k)) continue;
    std::vector<float> y(size_t(m * n_out), NAN);
    gemm_gguf(x.data(), m, wp, y.data(), 2, k);
    expect_close(y, portable, scale, std::string(gguf_kernel_name(k)) + " on layout " + gguf_layout_name(wp.gguf_layout) + " vs portable");
  }
  std::printf("[gemm_gguf] %s m=%lld [%lld x %lld]: NMSE vs F32 %.2e, kernels vs portable worst %.1e of sum|x*w|\n",
              std::string(dtype_name(t)).c_str(), (long long)m, (long long)n_out, (long long)n_in, e, g_worst_kernel_rel);

  // linear() on a cpu::Weight takes the best kernel; Q4_0 / Q4_1 held in 16-row blocks (AVX512-BF16 on AMD:
  // rows16.h) take the GEMM-form kernel on x rounded to BF16, within the kernel bound of the reference on that x
  // (Q8_0 in 16-row blocks: int8 x, the same integer sums as the file layout's best kernel).
  const Weight cw(test::make_gguf_weight(t, n_out, n_in, uint32_t(7 + m + n_out)));
  std::vector<float> via_linear(size_t(m * n_out), NAN), best(size_t(m * n_out), NAN);
  linear(x.data(), m, cw, via_linear.data());
  if (cw.packed().rows_layout == RowsLayout::Rows16 && cw.packed().act_bf16)
    packed_linear_reference(x.data(), m, cw.packed(), best.data(), 2);
  else
    gemm_gguf(x.data(), m, w, best.data(), num_threads(), GgufKernel::Best);
  expect_close(via_linear, best, scale, "linear() vs gemm_gguf");
}

TEST_P(GemmGguf, ColumnSlicesSumToTheWhole) {
  const auto [t, m, n_out, n_blocks_param] = GetParam();
  const int64_t n_blocks = std::max<int64_t>(n_blocks_param, 6);  // three slices of whole blocks
  const int64_t blk = dtype_block_elems(t), n_in = n_blocks * blk;
  const PackedWeight w = test::make_gguf_weight(t, n_out, n_in, 11);
  const auto x = test::make_gguf_x(m, n_in, 12);
  std::vector<float> whole(size_t(m * n_out));
  gemm_gguf(x.data(), m, w, whole.data(), 1);
  // Three ranks' column ranges, on block boundaries.
  const int64_t cuts[4] = {0, blk * (n_blocks / 3), blk * (2 * n_blocks / 3), n_in};
  std::vector<float> sum(size_t(m * n_out), 0.0f), part(size_t(m * n_out));
  for (int k = 0; k < 3; ++k) {
    const PackedWeight s = test::slice_gguf_weight(w, 0, w.n_out, cuts[k], cuts[k + 1]);
    std::vector<float> xs(size_t(m * s.n_in));
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(xs.data() + i * s.n_in, x.data() + i * n_in + cuts[k], size_t(s.n_in) * sizeof(float));
    gemm_gguf(xs.data(), m, s, part.data(), 1);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  expect_close(sum, whole, test::abs_sums(x.data(), m, w), "sum of column slices vs whole");
}

// An IQ4_NL weight [n_out, n_in] in Rows16 whose every code is 0 (kIq4Values[0] = −127) under d = 1.
PackedWeight iq4_nl_lowest_codes(int64_t n_out, int64_t n_in) {
  PackedWeight w = test::make_gguf_weight(DType::IQ4_NL, n_out, n_in, 1);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t b = 0; b < n_in / 32; ++b) {
      uint8_t* blk = w.data.data() + r * w.row_bytes() + 18 * b;
      const uint16_t one = f32_to_f16(1.0f);
      std::memcpy(blk, &one, 2);
      std::memset(blk + 2, 0, 16);
    }
  set_rows_layout(&w, RowsLayout::Rows16);
  return w;
}

// A weight's shape in the 16-row block tests: its type, rows and blocks a row.
struct Rows16Shape {
  DType t;
  int64_t n_out, n_blocks;
};

// GGUF Q8_0, Q5_0, Q6_K, Q4_0, Q4_1, Q4_K and IQ4_NL in 16-row blocks (rows16_int8_linear, AVX-512 VNNI: the GEMM form
// with x quantized as the file layout's kernels quantize it): the same integer sums as the portable kernel on the
// file's blocks, so within the kernel bound of it; each row of a batch (m 2..37) with the bits it has alone, at 1 and 2
// threads; 1 to 48 blocks a row and row counts leaving 3, 16, 5, 1 and 3 rows in the last 16-row block; the file's
// layout declined. IQ4_NL: cpu::Weight holds it in Rows16 and linear() gives this kernel's bits; its codes' whole range
// (kIq4Values −127 .. 113 as bytes + 128, x ±127) is exact: all −127 codes against x of all ±127 give −127 Σ x.
TEST(GemmGgufRows16, Int8FormsMatchThePortableKernelAndRowsAlone) {
  if (!cpu_has_avx512vnni()) GTEST_SKIP() << "no AVX-512 VNNI here";
  for (const Rows16Shape sh :
       {Rows16Shape{DType::Q8_0, 35, 18},   Rows16Shape{DType::Q8_0, 16, 1},   Rows16Shape{DType::Q8_0, 5, 48},
        Rows16Shape{DType::Q8_0, 1, 6},     Rows16Shape{DType::Q8_0, 19, 3},   Rows16Shape{DType::Q5_0, 35, 18},
        Rows16Shape{DType::Q5_0, 16, 1},    Rows16Shape{DType::Q5_0, 5, 48},   Rows16Shape{DType::Q5_0, 1, 6},
        Rows16Shape{DType::Q6_K, 35, 1},    Rows16Shape{DType::Q6_K, 16, 6},   Rows16Shape{DType::Q6_K, 3, 2},
        Rows16Shape{DType::Q4_0, 35, 18},   Rows16Shape{DType::Q4_0, 16, 1},   Rows16Shape{DType::Q4_0, 5, 48},
        Rows16Shape{DType::Q4_1, 35, 18},   Rows16Shape{DType::Q4_1, 1, 6},    Rows16Shape{DType::Q4_1, 19, 3},
        Rows16Shape{DType::Q4_K, 35, 1},    Rows16Shape{DType::Q4_K, 16, 6},   Rows16Shape{DType::Q4_K, 3, 2},
        Rows16Shape{DType::IQ4_NL, 35, 18}, Rows16Shape{DType::IQ4_NL, 16, 1}, Rows16Shape{DType::IQ4_NL, 5, 48},
        Rows16Shape{DType::IQ4_NL, 49, 3}}) {
    const int64_t n_in = dtype_block_elems(sh.t) * sh.n_blocks, m_max = 37;
    const std::string name = std::string(dtype_name(sh.t)) + " [" + std::to_string(sh.n_out) + " x " + std::to_string(n_in) + "]";
    const PackedWeight w = test::make_gguf_weight(sh.t, sh.n_out, n_in, uint32_t(sh.n_out + n_in));
    PackedWeight r = copy_packed_weight(w);
    set_rows_layout(&r, RowsLayout::Rows16);
    const auto x = test::make_gguf_x(m_max, n_in, uint32_t(3 + n_in));
    std::vector<float> portable(size_t(m_max * sh.n_out));
    gemm_gguf(x.data(), m_max, w, portable.data(), 1, GgufKernel::Portable);
    EXPECT_FALSE(rows16_int8_linear(x.data(), 1, w, portable.data(), 1)) << name << ": the file's layout";
    const auto scale = test::abs_sums(x.data(), m_max, w);
    for (int threads : {1, 2}) {
      std::vector<float> alone(portable.size(), NAN);
      for (int64_t i = 0; i < m_max; ++i)
        ASSERT_TRUE(rows16_int8_linear(x.data() + i * n_in, 1, r, alone.data() + i * sh.n_out, threads)) << name;
      expect_close(alone, portable, scale, name + " rows16 vs portable, threads " + std::to_string(threads));
      for (int64_t m : {2, 3, 8, 9, 16, 37}) {
        std::vector<float> y(size_t(m * sh.n_out), NAN);
        ASSERT_TRUE(rows16_int8_linear(x.data(), m, r, y.data(), threads)) << name;
        for (int64_t k = 0; k < m * sh.n_out; ++k)
          ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << name << " m " << m << " row " << k / sh.n_out << " threads " << threads;
      }
      if (sh.t == DType::IQ4_NL && threads == 1) {
        const Weight cw(copy_packed_weight(w));
        EXPECT_EQ(cw.packed().rows_layout, RowsLayout::Rows16) << name;
        std::vector<float> via_linear(portable.size(), NAN);
        linear(x.data(), m_max, cw, via_linear.data());
        for (size_t k = 0; k < alone.size(); ++k)
          ASSERT_EQ(via_linear[k], alone[k]) << name << " linear(), output " << k;
      }
    }
  }
  const PackedWeight lowest = iq4_nl_lowest_codes(16, 64);
  std::vector<float> x(64), y(16, NAN);
  double want = 0;
  for (int64_t k = 0; k < 64; ++k) want += -127.0 * (x[size_t(k)] = (k * 7 % 3 == 0 ? -127.0f : 127.0f));
  ASSERT_TRUE(rows16_int8_linear(x.data(), 1, lowest, y.data(), 1));
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(double(y[size_t(r)]), want) << "IQ4_NL's lowest codes, row " << r;
}

// GGUF Q4_0, Q4_1, Q5_0 and Q8_0 in 16-row blocks on AVX2 (rows16_avx2_linear, their decode on CPUs without AVX-512
// VNNI): the bits of the file layout's AVX2 kernel for every output (the same integer sums and float chain), alone and
// in batches (m 2..37: every remainder of the tiles of 2 and 3 rows of x; Q5_0's from a panel of codes), at 1 and 2
// threads; 1 to 48 blocks a row, 1 to 16 rows in the last 16-row block; the file's layout and act_bf16 declined.
// cpu::Weight holds them so where the CPU has AVX2 and no AVX-512 VNNI, and linear() then gives the same bits.
TEST(GemmGgufRows16, Avx2FormsGiveTheFileKernelsBits) {
  if (!gguf_kernel_available(GgufKernel::Avx2)) GTEST_SKIP() << "no AVX2 here";
  for (const Rows16Shape sh : {Rows16Shape{DType::Q4_0, 35, 18}, Rows16Shape{DType::Q4_0, 16, 1},
                               Rows16Shape{DType::Q4_0, 5, 48}, Rows16Shape{DType::Q4_0, 1, 6},
                               Rows16Shape{DType::Q4_0, 49, 3}, Rows16Shape{DType::Q4_1, 35, 18},
                               Rows16Shape{DType::Q4_1, 16, 1}, Rows16Shape{DType::Q4_1, 5, 48},
                               Rows16Shape{DType::Q4_1, 19, 3}, Rows16Shape{DType::Q5_0, 35, 18},
                               Rows16Shape{DType::Q5_0, 16, 1}, Rows16Shape{DType::Q5_0, 5, 48},
                               Rows16Shape{DType::Q5_0, 17, 3}, Rows16Shape{DType::Q8_0, 35, 18},
                               Rows16Shape{DType::Q8_0, 16, 1}, Rows16Shape{DType::Q8_0, 5, 48},
                               Rows16Shape{DType::Q8_0, 1, 6}}) {
    const int64_t n_in = 32 * sh.n_blocks, m_max = 37;
    const std::string name = std::string(dtype_name(sh.t)) + " [" + std::to_string(sh.n_out) + " x " + std::to_string(n_in) + "]";
    const PackedWeight w = test::make_gguf_weight(sh.t, sh.n_out, n_in, uint32_t(5 * sh.n_out + n_in));
    PackedWeight r = copy_packed_weight(w);
    set_rows_layout(&r, RowsLayout::Rows16);
    const auto x = test::make_gguf_x(m_max, n_in, uint32_t(9 + n_in));
    std::vector<float> file(size_t(m_max * sh.n_out), NAN);
    gemm_gguf(x.data(), m_max, w, file.data(), 1, GgufKernel::Avx2);
    std::vector<float> portable(file.size());
    gemm_gguf(x.data(), m_max, w, portable.data(), 1, GgufKernel::Portable);
    expect_close(file, portable, test::abs_sums(x.data(), m_max, w), name + " file layout's AVX2 vs portable");
    EXPECT_FALSE(rows16_avx2_linear(x.data(), 1, w, file.data(), 1)) << name << ": the file's layout";
    PackedWeight rb = copy_packed_weight(r);
    rb.act_bf16 = true;
    EXPECT_FALSE(rows16_avx2_linear(x.data(), 1, rb, file.data(), 1)) << name << ": act_bf16";
    for (int threads : {1, 2}) {
      for (int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(8), int64_t(9), m_max}) {
        std::vector<float> y(size_t(m * sh.n_out), NAN);
        ASSERT_TRUE(rows16_avx2_linear(x.data(), m, r, y.data(), threads)) << name;
        for (int64_t k = 0; k < m * sh.n_out; ++k)
          ASSERT_EQ(y[size_t(k)], file[size_t(k)]) << name << " m " << m << " row " << k / sh.n_out << " threads " << threads;
      }
      std::vector<float> alone(file.size(), NAN);
      for (int64_t i = 0; i < m_max; ++i)
        ASSERT_TRUE(rows16_avx2_linear(x.data() + i * n_in, 1, r, alone.data() + i * sh.n_out, threads)) << name;
      for (size_t k = 0; k < alone.size(); ++k) ASSERT_EQ(alone[k], file[k]) << name << " alone, output " << k;
    }
    if (!cpu_has_avx512vnni()) {  // this CPU's choice: cpu::Weight holds them in Rows16, linear() gives the same bits
      EXPECT_TRUE(rows16_wanted(w)) << name;
      const Weight cw(copy_packed_weight(w));
      EXPECT_EQ(cw.packed().rows_layout, RowsLayout::Rows16) << name;
      std::vector<float> via_linear(file.size(), NAN);
      linear(x.data(), m_max, cw, via_linear.data());
      for (size_t k = 0; k < file.size(); ++k) ASSERT_EQ(via_linear[k], file[k]) << name << " linear(), output " << k;
    }
  }
}

using Rows16Fn = bool (*)(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// A Rows16 GEMM-form kernel fn on a random weight of shape sh (seeds w_seed + n_in, x_seed + n_in; 37 rows of x): the
// file's layout and act_bf16 declined; each row alone within the kernel bound of the portable kernel on the file's
// blocks (and, where exact(x, m, w16, &y) writes y, with its bits), at 1 and 2 threads; each row of a batch (m 2..37)
// with the bits it has alone; where held_so (this CPU's choice), cpu::Weight holds w in Rows16 and linear() gives the
// same bits.
template <class Exact = std::nullptr_t>
void expect_rows16_avx2_form(Rows16Fn fn, const Rows16Shape& sh, uint32_t w_seed, uint32_t x_seed, bool held_so,
                             Exact exact = nullptr) {
  const int64_t n_in = dtype_block_elems(sh.t) * sh.n_blocks, m_max = 37;
  const std::string name =
      std::string(dtype_name(sh.t)) + " [" + std::to_string(sh.n_out) + " x " + std::to_string(n_in) + "]";
  SCOPED_TRACE(name);
  const PackedWeight w = test::make_gguf_weight(sh.t, sh.n_out, n_in, uint32_t(w_seed + n_in));
  PackedWeight r = copy_packed_weight(w);
  set_rows_layout(&r, RowsLayout::Rows16);
  const auto x = test::make_gguf_x(m_max, n_in, uint32_t(x_seed + n_in));
  std::vector<float> portable(size_t(m_max * sh.n_out), NAN);
  gemm_gguf(x.data(), m_max, w, portable.data(), 1, GgufKernel::Portable);
  EXPECT_FALSE(fn(x.data(), 1, w, portable.data(), 1)) << "the file's layout";
  PackedWeight rb = copy_packed_weight(r);
  rb.act_bf16 = true;
  EXPECT_FALSE(fn(x.data(), 1, rb, portable.data(), 1)) << "act_bf16";
  const auto scale = test::abs_sums(x.data(), m_max, w);
  std::vector<float> bits(portable.size(), NAN);
  bool have_bits = false;
  if constexpr (!std::is_same_v<Exact, std::nullptr_t>) have_bits = exact(x.data(), m_max, r, &bits);
  std::vector<float> alone1;
  for (int threads : {1, 2}) {
    std::vector<float> alone(portable.size(), NAN);
    for (int64_t i = 0; i < m_max; ++i)
      ASSERT_TRUE(fn(x.data() + i * n_in, 1, r, alone.data() + i * sh.n_out, threads));
    expect_close(alone, portable, scale, name + " rows16 AVX2 vs portable, threads " + std::to_string(threads));
    for (size_t k = 0; have_bits && k < bits.size(); ++k)
      ASSERT_EQ(alone[k], bits[k]) << "the exact kernel, output " << k;
    for (int64_t m : {2, 3, 4, 5, 8, 9, 16, 37}) {
      std::vector<float> y(size_t(m * sh.n_out), NAN);
      ASSERT_TRUE(fn(x.data(), m, r, y.data(), threads));
      for (int64_t k = 0; k < m * sh.n_out; ++k)
        ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << "m " << m << " row " << k / sh.n_out << " threads " << threads;
    }
    if (threads == 1) alone1 = alone;
  }
  if (held_so) {
    EXPECT_TRUE(rows16_wanted(w));
    const Weight cw(copy_packed_weight(w));
    EXPECT_EQ(cw.packed().rows_layout, RowsLayout::Rows16);
    std::vector<float> via_linear(portable.size(), NAN);
    linear(x.data(), m_max, cw, via_linear.data());
    for (size_t k = 0; k < alone1.size(); ++k) ASSERT_EQ(via_linear[k], alone1[k]) << "linear(), output " << k;
  }
}

// GGUF Q2_K, Q3_K, Q4_K, Q5_K and Q6_K in 16-row blocks on AVX2 (rows16_avx2_k_linear: the K-quants of llama.cpp's
// mixes on CPUs without AVX-512 VNNI; Q5_K's, Q2_K's and Q3_K's only SIMD kernel, on every CPU with AVX2): Q4_K's and
// Q6_K's integer block totals and float operations are the VNNI kernel's (rows16_int8_linear), so its bits where this
// CPU has VNNI; all five within the kernel bound of the portable kernel on the file's blocks everywhere; each row of a
// batch (m 2..37: every remainder of the tiles of 3 rows of x, half a row block a pass) with the bits it has alone, at
// 1 and 2 threads; 1 to 6 blocks a row, 1 to 16 rows in the last 16-row block; the file's layout, act_bf16 and the
// other formats declined. cpu::Weight holds Q4_K / Q6_K so where the CPU has AVX2 and no AVX-512 VNNI, Q5_K / Q2_K /
// Q3_K wherever it has AVX2, and linear() then gives the same bits. Q5_K's int16 headroom: every code 31 under sc 63
// against x of all 127 (a pair of chunks' sums 8 · 31 · 127 = 31496 a lane) gives the exact integer.
TEST(GemmGgufRows16, Avx2KQuantsMatchThePortableKernelAndRowsAlone) {
  if (!gguf_kernel_available(GgufKernel::Avx2)) GTEST_SKIP() << "no AVX2 here";
  for (const Rows16Shape sh :
       {Rows16Shape{DType::Q4_K, 35, 1}, Rows16Shape{DType::Q4_K, 16, 6}, Rows16Shape{DType::Q4_K, 3, 2},
        Rows16Shape{DType::Q4_K, 49, 3}, Rows16Shape{DType::Q6_K, 35, 1}, Rows16Shape{DType::Q6_K, 16, 6},
        Rows16Shape{DType::Q6_K, 3, 2}, Rows16Shape{DType::Q6_K, 17, 3}})
    expect_rows16_avx2_form(rows16_avx2_k_linear, sh, uint32_t(7 * sh.n_out), 11, !cpu_has_avx512vnni(),
                            [](const float* x, int64_t m, const PackedWeight& r, std::vector<float>* y) {
                              if (!cpu_has_avx512vnni()) return false;  // the same bits where there is VNNI
                              const bool ran = rows16_int8_linear(x, m, r, y->data(), 1);
                              EXPECT_TRUE(ran);
                              return ran;
                            });
  for (const Rows16Shape sh :
       {Rows16Shape{DType::Q5_K, 35, 1}, Rows16Shape{DType::Q5_K, 16, 6}, Rows16Shape{DType::Q5_K, 3, 2},
        Rows16Shape{DType::Q5_K, 17, 3}, Rows16Shape{DType::Q2_K, 35, 1}, Rows16Shape{DType::Q2_K, 16, 6},
        Rows16Shape{DType::Q2_K, 3, 2}, Rows16Shape{DType::Q2_K, 49, 3}, Rows16Shape{DType::Q3_K, 35, 1},
        Rows16Shape{DType::Q3_K, 16, 6}, Rows16Shape{DType::Q3_K, 3, 2}, Rows16Shape{DType::Q3_K, 17, 3}})
    expect_rows16_avx2_form(rows16_avx2_k_linear, sh, uint32_t(7 * sh.n_out), 11, true);
  {  // Q5_K's extremes: d = 1, dmin = 0, sc = 63, m = 0, q = 31; x = 127 (Q8_K: q_x = −127, d_x = −1)
    constexpr int64_t n_out = 16, n_in = 512;
    PackedWeight w = test::make_gguf_weight(DType::Q5_K, n_out, n_in, 1);
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t b = 0; b < n_in / 256; ++b) {
        uint8_t* blk = w.data.data() + r * w.row_bytes() + 176 * b;
        const uint16_t one = f32_to_f16(1.0f), zero = 0;
        std::memcpy(blk, &one, 2);
        std::memcpy(blk + 2, &zero, 2);
        const uint8_t scales[12] = {63, 63, 63, 63, 0, 0, 0, 0, 15, 15, 15, 15};  // sc 63 (high bits of 4..7 in 0..3)
        std::memcpy(blk + 4, scales, 12);
        for (int k = 0; k < 4; ++k) blk[4 + k] = uint8_t(63 | 3 << 6);
        std::memset(blk + 16, 0xff, 160);
      }
    PackedWeight wr = copy_packed_weight(w);
    set_rows_layout(&wr, RowsLayout::Rows16);
    std::vector<float> x(size_t(n_in), 127.0f), y(size_t(n_out), NAN), want(size_t(n_out), NAN);
    gemm_gguf(x.data(), 1, w, want.data(), 1, GgufKernel::Portable);
    ASSERT_TRUE(rows16_avx2_k_linear(x.data(), 1, wr, y.data(), 1));
    for (int64_t r = 0; r < n_out; ++r) {
      EXPECT_EQ(double(want[size_t(r)]), 63.0 * 31 * 127 * n_in) << "row " << r;
      EXPECT_EQ(y[size_t(r)], want[size_t(r)]) << "row " << r;
    }
  }
  // The other formats are not its.
  const PackedWeight q40 = test::make_gguf_weight(DType::Q4_0, 16, 256, 5);
  PackedWeight q40r = copy_packed_weight(q40);
  set_rows_layout(&q40r, RowsLayout::Rows16);
  std::vector<float> x(256, 0.5f), y(16);
  EXPECT_FALSE(rows16_avx2_k_linear(x.data(), 1, q40r, y.data(), 1)) << "Q4_0";
}

// GGUF IQ4_NL and Q5_1 in 16-row blocks on AVX2 (rows16_avx2_linear: row_block_iq4, and row_block's Q5_0 codes with
// Q4_1's min term; their only SIMD kernel, on every CPU with AVX2): within the kernel bound of the portable kernel on
// the file's blocks (the same integer sums; one FMA a block where the portable kernel multiplies then adds), each row
// of a batch (m 2..37: every remainder of the tiles of 2 rows of x; Q5_1's from a panel of codes) with the bits it has
// alone, at 1 and 2 threads; 1 to 48 blocks a row, 1 to 16 rows in the last 16-row block; the file's layout and
// act_bf16 declined. Its codes' whole range (kIq4Values −127 .. 113, x ±127: a vpmaddubsw pair up
// to 32258) is exact: a weight of all −127 codes against x of all ±127 gives the portable kernel's integers.
// cpu::Weight holds both in Rows16 on every CPU with AVX2, and linear() gives the same bits (IQ4_NL: where AVX-512
// VNNI is missing; there linear() runs rows16_int8_linear, Int8FormsMatchThePortableKernelAndRowsAlone).
TEST(GemmGgufRows16, Avx2OnlyFormsMatchThePortableKernelAndRowsAlone) {
  if (!gguf_kernel_available(GgufKernel::Avx2)) GTEST_SKIP() << "no AVX2 here";
  for (const Rows16Shape sh :
       {Rows16Shape{DType::IQ4_NL, 35, 18}, Rows16Shape{DType::IQ4_NL, 16, 1}, Rows16Shape{DType::IQ4_NL, 5, 48},
        Rows16Shape{DType::IQ4_NL, 1, 6}, Rows16Shape{DType::IQ4_NL, 49, 3}, Rows16Shape{DType::Q5_1, 35, 18},
        Rows16Shape{DType::Q5_1, 16, 1}, Rows16Shape{DType::Q5_1, 5, 48}, Rows16Shape{DType::Q5_1, 17, 3}})
    expect_rows16_avx2_form(rows16_avx2_linear, sh, uint32_t(3 * sh.n_out), 13,
                            sh.t == DType::Q5_1 || !cpu_has_avx512vnni());
  // The extremes: every code 0 (−127) under d = 1, x of ±127 (a block's max 127: q = x): y = −127 Σ x exactly.
  {
    constexpr int64_t n_out = 16, n_in = 64;
    const PackedWeight wr = iq4_nl_lowest_codes(n_out, n_in);
    std::vector<float> x(static_cast<size_t>(n_in)), y(static_cast<size_t>(n_out), NAN);
    double want = 0;
    for (int64_t k = 0; k < n_in; ++k) want += -127.0 * (x[size_t(k)] = (k * 7 % 3 == 0 ? -127.0f : 127.0f));
    ASSERT_TRUE(rows16_avx2_linear(x.data(), 1, wr, y.data(), 1));
    for (int64_t r = 0; r < n_out; ++r) EXPECT_EQ(double(y[size_t(r)]), want) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmGguf,
    ::testing::Combine(::testing::ValuesIn(test::kGgufTypes),
                       ::testing::Values(1, 2, 3, 7, 16, 33),
                       ::testing::Values(1, 7, 34),  // odd row counts, a pair remainder
                       ::testing::Values(1, 6)),     // blocks a row: 32 / 192 (256 / 1536 for the K types)
    [](const auto& info) { return test::gguf_shape_name(info.param); });

// A row of x computed in a batch gives the bits it gives alone (DESIGN §5: batched == alone). Every kernel
// must do, for each output (row of W, row of x), the same float operations whatever m is and whatever the
// other rows are: the activations are quantized per row, so a last-bit difference here would only be a
// summation order — and the next layer's 8-bit activation rounding can turn it into a different token
// (EngineReal.BatchedEqualsAlone* caught exactly that once). m = 1 against m = 2..9 and 17 (every remainder of
// the kernels' 4-row activation tiles; the AVX2 32-block kernel's decode path below m = 4 and its panel path
// from 4 on, 8-row chunks with a 5-row tail at n_out = 37), odd row counts, rows of 1, 3 and 19 blocks (an odd block pair; more
// than one 16-block chunk), 1 and 2 threads, every GGUF type and kernel this CPU runs.
TEST(GemmGgufBatch, EveryRowOfABatchHasTheBitsOfThatRowAlone) {
  for (DType t : test::kGgufTypes)
    for (int64_t n_blocks : {1, 3, 19}) {
      const bool k_type = dtype_block_elems(t) == 256;
      if (k_type && n_blocks == 19) continue;  // 4864 inputs: slow on the portable kernel, nothing new
      const int64_t n_in = n_blocks * dtype_block_elems(t), n_out = 37;
      const PackedWeight file = test::make_gguf_weight(t, n_out, n_in, uint32_t(3 + n_blocks)), regrouped = prepared(file);
      constexpr int64_t kM = 17;
      const auto x = test::make_gguf_x(kM, n_in, uint32_t(40 + n_blocks));
      for (const PackedWeight* wl : {&file, &regrouped})
      for (GgufKernel k : {GgufKernel::Portable, GgufKernel::Avx2, GgufKernel::Avx512Vnni}) {
        const PackedWeight& w = *wl;
        if (wl == &regrouped && w.gguf_layout == GgufLayout::File) break;  // the same weight as `file`
        if (!gguf_kernel_available(k)) {
          std::printf("[gemm_gguf] %s kernel not run: this CPU lacks it\n", gguf_kernel_name(k));
          continue;
        }
        for (int threads : {1, 2}) {
          std::vector<float> alone(size_t(kM * n_out));
          for (int64_t i = 0; i < kM; ++i) gemm_gguf(x.data() + i * n_in, 1, w, alone.data() + i * n_out, threads, k);
          for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 9, 17}) {
            std::vector<float> y(size_t(m * n_out), NAN);
            gemm_gguf(x.data(), m, w, y.data(), threads, k);
            for (int64_t i = 0; i < m * n_out; ++i)
              ASSERT_EQ(std::memcmp(&y[size_t(i)], &alone[size_t(i)], sizeof(float)), 0)
                  << dtype_name(t) << " " << gguf_layout_name(w.gguf_layout) << " " << gguf_kernel_name(k)
                  << " threads " << threads << " m " << m << " blocks " << n_blocks << ": row " << i / n_out << " output " << i % n_out << " batched " << y[size_t(i)]
                  << " alone " << alone[size_t(i)];
          }
        }
      }
    }
}

// Q8_0Quads (common/gguf_layout.h) holds a row's bytes regrouped: to and back gives the file's bytes, every
// code lands once, dequantize_rows reads both layouts to the same values, and the layout is refused on a
// format it is not for. Rows of 1..9 blocks: every remainder of a quad.
TEST(GgufLayout, Q8_0QuadsRoundTripsAndDequantizesAsTheFile) {
  for (int64_t nb = 1; nb <= 9; ++nb) {
    const int64_t n_in = 32 * nb;
    const PackedWeight file = test::make_gguf_weight(DType::Q8_0, 5, n_in, uint32_t(60 + nb));
    const int64_t rb = file.row_bytes();
    PackedWeight quads = prepared(file);
    if (quads.gguf_layout == GgufLayout::File) {  // no VNNI here: regroup by hand
      for (int64_t r = 0; r < quads.n_out; ++r)
        q8_0_row_to_quads(file.data.data() + r * rb, n_in, quads.data.data() + r * rb);
      quads.gguf_layout = GgufLayout::Q8_0Quads;
    }
    std::vector<uint8_t> back(static_cast<size_t>(rb));
    for (int64_t r = 0; r < file.n_out; ++r) {
      const uint8_t* q = quads.data.data() + r * rb;
      // Block b's scale at its quad's start + 2j, weight e (file byte 34b + 2 + e) after the quad's k scales at
      // its place, XOR 0x80.
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k = std::min<int64_t>(4, nb - b / 4 * 4), j = b % 4, quad = 136 * (b / 4);
        for (int e = 0; e < 32; ++e) {
          const int64_t at = quad + 2 * k + (e < 16 ? 16 * j + e : 16 * k + 16 * j + e - 16);
          ASSERT_EQ(q[at], uint8_t(file.data.data()[r * rb + 34 * b + 2 + e] ^ 0x80)) << nb << " " << b << " " << e;
        }
        ASSERT_EQ(std::memcmp(q + quad + 2 * j, file.data.data() + r * rb + 34 * b, 2), 0);
      }
      q8_0_row_from_quads(q, n_in, back.data());
      ASSERT_EQ(std::memcmp(back.data(), file.data.data() + r * rb, size_t(rb)), 0) << "row " << r << " blocks " << nb;
    }
    std::vector<float> a(size_t(5 * n_in)), b(size_t(5 * n_in));
    dequantize_rows(file, 0, 5, a.data());
    dequantize_rows(quads, 0, 5, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "blocks " << nb;
  }
  PackedWeight q4 = test::make_gguf_weight(DType::Q4_0, 2, 64, 1);
  q4.gguf_layout = GgufLayout::Q8_0Quads;
  EXPECT_THROW(check_packed_weight(q4), Error);
}

// Q5_0Quads likewise: to and back gives the file's bytes, every scale, qh half and nibble byte lands where the
// layout says, dequantize_rows reads both layouts to the same values, and the layout is refused on another
// format. Rows of 1..9 blocks: every remainder of a quad.
TEST(GgufLayout, Q5_0QuadsRoundTripsAndDequantizesAsTheFile) {
  for (int64_t nb = 1; nb <= 9; ++nb) {
    const int64_t n_in = 32 * nb;
    const PackedWeight file = test::make_gguf_weight(DType::Q5_0, 5, n_in, uint32_t(70 + nb));
    const int64_t rb = file.row_bytes();
    PackedWeight quads = prepared(file);
    if (quads.gguf_layout == GgufLayout::File) {  // no VNNI here: regroup by hand
      for (int64_t r = 0; r < quads.n_out; ++r)
        q5_0_row_to_quads(file.data.data() + r * rb, n_in, quads.data.data() + r * rb);
      quads.gguf_layout = GgufLayout::Q5_0Quads;
    }
    ASSERT_EQ(quads.gguf_layout, GgufLayout::Q5_0Quads);
    std::vector<uint8_t> back(static_cast<size_t>(rb));
    for (int64_t r = 0; r < file.n_out; ++r) {
      const uint8_t* q = quads.data.data() + r * rb;
      const uint8_t* f = file.data.data() + r * rb;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k = std::min<int64_t>(4, nb - b / 4 * 4), j = b % 4, quad = 88 * (b / 4);
        ASSERT_EQ(std::memcmp(q + quad + 2 * j, f + 22 * b, 2), 0) << nb << " " << b;              // d
        ASSERT_EQ(std::memcmp(q + quad + 2 * k + 2 * j, f + 22 * b + 2, 2), 0) << nb << " " << b;  // qh bits 0-15
        ASSERT_EQ(std::memcmp(q + quad + 4 * k + 2 * j, f + 22 * b + 4, 2), 0) << nb << " " << b;  // qh bits 16-31
        ASSERT_EQ(std::memcmp(q + quad + 6 * k + 16 * j, f + 22 * b + 6, 16), 0) << nb << " " << b;  // nibbles
      }
      q5_0_row_from_quads(q, n_in, back.data());
      ASSERT_EQ(std::memcmp(back.data(), f, size_t(rb)), 0) << "row " << r << " blocks " << nb;
    }
    std::vector<float> a(size_t(5 * n_in)), b(size_t(5 * n_in));
    dequantize_rows(file, 0, 5, a.data());
    dequantize_rows(quads, 0, 5, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "blocks " << nb;
  }
  PackedWeight q8 = test::make_gguf_weight(DType::Q8_0, 2, 64, 1);
  q8.gguf_layout = GgufLayout::Q5_0Quads;
  EXPECT_THROW(check_packed_weight(q8), Error);
}

// The *Groups layouts (16 blocks a step; common/gguf_layout.h), forced on every Q4_0 / Q8_0 / Q5_0 row width
// (prepare_gguf_weight picks them only for whole groups): to and back gives the file's bytes, dequantize_rows
// reads them to the file's values, the layout is refused on another format, and on AVX-512 VNNI the groups
// kernel (its ymm / xmm last groups included) matches the portable kernel within kKernelRel and gives a batch
// row the bits of that row alone. Rows of 1, 3, 5, 9, 16, 18, 19 and 35 blocks: last groups of every vector
// width and whole groups.
TEST(GgufLayout, GroupsRoundTripDequantizeAndComputeAsTheFile) {
  const struct {
    DType t;
    GgufLayout l;
  } cases[] = {{DType::Q4_0, GgufLayout::Q4_0Groups}, {DType::Q8_0, GgufLayout::Q8_0Groups}, {DType::Q5_0, GgufLayout::Q5_0Groups}};
  for (const auto& c : cases)
    for (int64_t nb : {1, 3, 5, 9, 16, 18, 19, 35}) {
      const int64_t n_in = 32 * nb, n_out = 37;
      const PackedWeight file = test::make_gguf_weight(c.t, n_out, n_in, uint32_t(80 + nb));
      const int64_t rb = file.row_bytes();
      PackedWeight g = prepared(file);
      if (g.gguf_layout != c.l) {
        std::memcpy(g.data.data(), file.data.data(), size_t(file.data.size()));
        for (int64_t r = 0; r < n_out; ++r) gguf_row_from_file_layout(c.l, file.data.data() + r * rb, n_in, g.data.data() + r * rb);
        g.gguf_layout = c.l;
      }
      check_packed_weight(g);
      std::vector<uint8_t> back(static_cast<size_t>(rb));
      for (int64_t r = 0; r < n_out; ++r) {
        gguf_row_to_file_layout(c.l, g.data.data() + r * rb, n_in, back.data());
        ASSERT_EQ(std::memcmp(back.data(), file.data.data() + r * rb, size_t(rb)), 0) << gguf_layout_name(c.l) << " row " << r << " blocks " << nb;
      }
      // Block 0's scale is the group's first 2 bytes (the layout's header), not where the file has it only.
      ASSERT_EQ(std::memcmp(g.data.data(), file.data.data(), 2), 0);
      std::vector<float> a(size_t(n_out * n_in)), b(size_t(n_out * n_in));
      dequantize_rows(file, 0, n_out, a.data());
      dequantize_rows(g, 0, n_out, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << gguf_layout_name(c.l) << " blocks " << nb;
      if (!gguf_kernel_available(GgufKernel::Avx512Vnni)) continue;
      constexpr int64_t kM = 17;
      const auto x = test::make_gguf_x(kM, n_in, uint32_t(90 + nb));
      std::vector<float> portable(size_t(kM * n_out)), y(size_t(kM * n_out), NAN);
      gemm_gguf(x.data(), kM, file, portable.data(), 1, GgufKernel::Portable);
      gemm_gguf(x.data(), kM, g, y.data(), 2, GgufKernel::Avx512Vnni);
      expect_close(y, portable, test::abs_sums(x.data(), kM, file), std::string(gguf_layout_name(c.l)) + " vs portable, blocks " + std::to_string(nb));
      for (int threads : {1, 2}) {
        std::vector<float> alone(size_t(kM * n_out));
        for (int64_t i = 0; i < kM; ++i) gemm_gguf(x.data() + i * n_in, 1, g, alone.data() + i * n_out, threads, GgufKernel::Avx512Vnni);
        for (int64_t m : {2, 3, 4, 5, 9, 17}) {
          std::vector<float> yb(size_t(m * n_out), NAN);
          gemm_gguf(x.data(), m, g, yb.data(), threads, GgufKernel::Avx512Vnni);
          for (int64_t i = 0; i < m * n_out; ++i)
            ASSERT_EQ(std::memcmp(&yb[size_t(i)], &alone[size_t(i)], sizeof(float)), 0)
                << gguf_layout_name(c.l) << " threads " << threads << " m " << m << " blocks " << nb << " output " << i;
        }
      }
    }
  PackedWeight q4 = test::make_gguf_weight(DType::Q4_0, 2, 64, 1);
  q4.gguf_layout = GgufLayout::Q8_0Groups;
  EXPECT_THROW(check_packed_weight(q4), Error);
}

// The AVX-512 element loops of the activation quantizers give the scalar definition's bits (llama.cpp's:
// q = round half to even of x · (127 / amax), Q8_K: of x · (−127 / v), v the first value of largest magnitude,
// capped at 127): blocks of outliers, an all-zero block, and a block holding both +v and −v (the first wins).
TEST(GgufActs, Avx512QuantizersGiveTheScalarBits) {
  if (!gguf_kernel_available(GgufKernel::Avx512Vnni)) {
    GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  }
  auto x = test::make_gguf_x(1, 1024, 9);
  for (int j = 256; j < 512; ++j) x[size_t(j)] = 0.0f;  // block 1 (Q8_K), blocks 8-15 (32-blocks): zero
  x[600] = 9.5f;  // above every outlier (≤ 8)
  x[700] = -9.5f;  // block 2: ±9.5, +9.5 first
  std::vector<int8_t> q(1024);
  std::vector<float> amax(32);
  std::vector<int> sum(32);
  quantize_q8_32_elems_avx512(x.data(), 1024, q.data(), amax.data(), sum.data());
  for (int b = 0; b < 32; ++b) {
    float am = 0;
    for (int j = 0; j < 32; ++j) am = std::max(am, std::fabs(x[size_t(32 * b + j)]));
    ASSERT_EQ(amax[size_t(b)], am) << b;
    const float id = am != 0.0f ? 127.f / am : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = int(std::nearbyint(x[size_t(32 * b + j)] * id));
      ASSERT_EQ(q[size_t(32 * b + j)], v) << b << " " << j;
      s += v;
    }
    ASSERT_EQ(sum[size_t(b)], s) << b;
  }
  std::vector<float> vmax(4);
  std::vector<int16_t> bsums(64);
  quantize_q8_k_elems_avx512(x.data(), 1024, q.data(), vmax.data(), bsums.data());
  for (int b = 0; b < 4; ++b) {
    float v = 0, am = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[size_t(256 * b + j)]) > am) {
        am = std::fabs(x[size_t(256 * b + j)]);
        v = x[size_t(256 * b + j)];
      }
    ASSERT_EQ(vmax[size_t(b)], v) << b;
    if (b == 2) {
      EXPECT_EQ(v, 9.5f);
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) {
        const int e = 256 * b + 16 * k + j;
        const int want = v == 0.0f ? 0 : std::min(127, int(std::nearbyint(x[size_t(e)] * (-127.f / v))));
        ASSERT_EQ(q[size_t(e)], want) << e;
        s += want;
      }
      ASSERT_EQ(bsums[size_t(16 * b + k)], s) << b << " " << k;
    }
  }
}

// Q8_K (llama.cpp's quantize_row_q8_K_ref): the value of largest magnitude maps to ∓127, every q·d is within
// d/2 of x, and bsums are the 16-sums.
TEST(GgufActs, Q8KAndQ8_0AsLlamaCpp) {
  const auto x = test::make_gguf_x(2, 512, 5);
  GgufActs a;
  quantize_gguf_acts(x.data(), 2, 512, GgufActType::Q8_K, &a);
  for (int64_t b = 0; b < 4; ++b) {
    const float d = a.d[size_t(b)];
    for (int j = 0; j < 256; ++j) {
      const size_t i = size_t(b * 256 + j);
      ASSERT_LE(std::fabs(a.q[i] * d - x[i]), std::fabs(d) * 0.5001f) << i;
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += a.q[size_t(b * 256 + 16 * k + j)];
      EXPECT_EQ(a.bsums[size_t(b * 16 + k)], s);
    }
  }
  quantize_gguf_acts(x.data(), 2, 512, GgufActType::Q8_1, &a);
  for (int64_t b = 0; b < 32; ++b) {
    float amax = 0;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
      amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
      s += a.q[size_t(b * 32 + j)];
    }
    EXPECT_EQ(a.d[size_t(b)], f16_to_f32(f32_to_f16(amax / 127)));
    EXPECT_EQ(a.s[size_t(b)], f16_to_f32(f32_to_f16(amax / 127 * float(s))));
  }
}

}  // namespace
}  // namespace tp::cpu::detail
