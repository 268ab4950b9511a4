// The prefill tiles of the AVX-512 VNNI GGUF kernel (kernels/cpu/gemm_gguf_prefill.inc, m ≥ 16): every row of a
// batch has the bits of that row computed alone (m = 1: the decode tiles), and the batch matches the portable
// kernel within the between-kernels bound of test_gemm_gguf.cpp (|y_a − y_b| ≤ 1e-5 · Σ_k |x_k · w_k|).
// Shapes: every layout the prefill tiles read (Q4_0 file; Q8_0 file and Q8_0Quads; Q5_0 file and Q5_0Quads;
// Q4_1 file) and, through the same checks, the ones they leave to the decode tiles (Q8_0Groups, Q4_0Groups,
// K-quants); rows of 1, 3, 5, 9 (288 inputs: 576 split over 2 ranks), 18 (576), 24 (768: 1536 / 2) and 48
// (1536) blocks — odd pairs, every remainder of a quad, whole groups; n_out 1, 6, 37 (no whole 4-row panel,
// one panel + 2 rows, 9 panels + 1 row); m 16, 17, 19, 22 (every remainder of the 4-row x tiles) and 131 (past a
// block of x rows: 128 rows a block here, 84 at 1536 inputs); 1 and 2 threads. Skipped without AVX-512 VNNI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "common/gguf_layout.h"
#include "kernels/cpu/gemm_gguf.h"
#include "tests/kernels/fixtures.h"

namespace tp::cpu::detail {
namespace {

constexpr double kKernelRel = 1e-5;

struct Case {
  DType t;
  GgufLayout l;  // File: as the file; else regrouped into l
  const char* name;
};

PackedWeight make_weight(const Case& c, int64_t n_out, int64_t n_in, uint32_t seed) {
  const auto rows = test::make_typed_rows(c.t, n_out, n_in, seed);
  PackedWeight w;
  w.format = gguf_weight_format(c.t);
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * w.row_bytes());
  const int64_t rb = w.row_bytes();
  for (int64_t r = 0; r < n_out; ++r) {
    const uint8_t* src = rows.bytes.data() + r * rows.stride;
    if (c.l == GgufLayout::File)
      std::memcpy(w.data.data() + r * rb, src, size_t(rb));
    else
      gguf_row_from_file_layout(c.l, src, n_in, w.data.data() + r * rb);
  }
  w.gguf_layout = c.l;
  check_packed_weight(w);
  return w;
}

std::vector<float> make_x(int64_t m, int64_t n_in, uint32_t seed) {
  auto x = test::random_floats(size_t(m * n_in), seed);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8;  // blocks with a large max, as test_gemm_gguf.cpp
  return x;
}

const Case kCases[] = {
    {DType::Q4_0, GgufLayout::File, "q4_0"},           {DType::Q8_0, GgufLayout::File, "q8_0"},
    {DType::Q8_0, GgufLayout::Q8_0Quads, "q8_0_quads"}, {DType::Q5_0, GgufLayout::File, "q5_0"},
    {DType::Q5_0, GgufLayout::Q5_0Quads, "q5_0_quads"}, {DType::Q4_1, GgufLayout::File, "q4_1"},
    {DType::Q8_0, GgufLayout::Q8_0Groups, "q8_0_groups"}, {DType::Q4_0, GgufLayout::Q4_0Groups, "q4_0_groups"},
    {DType::Q4_K, GgufLayout::File, "q4_k"},           {DType::Q6_K, GgufLayout::File, "q6_k"},
};

using Shape = std::tuple<int /*case*/, int64_t /*32-blocks a row*/, int64_t /*n_out*/>;
class GemmGgufPrefill : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmGgufPrefill, EveryRowHasTheBitsOfThatRowAloneAndMatchesPortable) {
  if (!gguf_kernel_available(GgufKernel::Avx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const auto [ci, nb32, n_out] = GetParam();
  const Case& c = kCases[ci];
  const int64_t n_in = 32 * nb32;
  if (n_in % dtype_block_elems(c.t) != 0) GTEST_SKIP() << "not whole 256-blocks";
  const PackedWeight w = make_weight(c, n_out, n_in, uint32_t(5 + nb32 + n_out));
  constexpr int64_t kM = 131;
  const auto x = make_x(kM, n_in, uint32_t(17 + nb32));
  std::vector<float> alone(size_t(kM * n_out));
  for (int64_t i = 0; i < kM; ++i) gemm_gguf(x.data() + i * n_in, 1, w, alone.data() + i * n_out, 1, GgufKernel::Avx512Vnni);
  for (int threads : {1, 2})
    for (int64_t m : {16, 17, 19, 22, 131}) {
      std::vector<float> y(size_t(m * n_out), NAN);
      gemm_gguf(x.data(), m, w, y.data(), threads, GgufKernel::Avx512Vnni);
      for (int64_t i = 0; i < m * n_out; ++i)
        ASSERT_EQ(std::memcmp(&y[size_t(i)], &alone[size_t(i)], sizeof(float)), 0)
            << c.name << " threads " << threads << " m " << m << ": row " << i / n_out << " output " << i % n_out
            << " batched " << y[size_t(i)] << " alone " << alone[size_t(i)];
    }
  // The batch against the portable kernel (the file layout's bytes; F32 sums in another order).
  std::vector<float> portable(size_t(kM * n_out), NAN), wd(size_t(n_out * n_in));
  gemm_gguf(x.data(), kM, w, portable.data(), 2, GgufKernel::Portable);
  dequantize_rows(w, 0, n_out, wd.data());
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      double scale = 0;
      for (int64_t k = 0; k < n_in; ++k) scale += std::fabs(double(x[size_t(i * n_in + k)]) * wd[size_t(r * n_in + k)]);
      const size_t o = size_t(i * n_out + r);
      ASSERT_LE(std::fabs(double(alone[o]) - portable[o]), kKernelRel * scale + 1e-30)
          << c.name << " row " << i << " output " << r << ": " << alone[o] << " vs portable " << portable[o];
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmGgufPrefill,
                         ::testing::Combine(::testing::Range(0, int(std::size(kCases))),
                                            ::testing::Values(1, 3, 5, 9, 18, 24, 48), ::testing::Values(1, 6, 37)),
                         [](const auto& info) {
                           return std::string(kCases[std::get<0>(info.param)].name) + "_b" +
                                  std::to_string(std::get<1>(info.param)) + "_out" + std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace tp::cpu::detail
