// Test inputs for the GGUF kernels (kernels/cpu/gemm_gguf.h, gemm_gguf_bf16.h): weights of random blocks of a
// GGUF type, activations with outliers, TP slices of a weight, and Σ_k |x_k · w_k| (the scale the kernels'
// F32 summation-order differences are bounded by).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/packed_weight.h"
#include "tests/kernels/fixtures.h"

namespace tp::test {

// Every GGUF block type (the weight types the GGUF kernels take).
inline constexpr DType kGgufTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                       DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL};

// A parametrized GGUF kernel test's shape, and its name as a test parameter ("q4_0_m3_out7_b1").
using GgufShape = std::tuple<DType, int64_t /*m*/, int64_t /*n_out*/, int64_t /*blocks in a row*/>;
inline std::string gguf_shape_name(const GgufShape& s) {
  return std::string(dtype_name(std::get<0>(s))) + "_m" + std::to_string(std::get<1>(s)) + "_out" +
         std::to_string(std::get<2>(s)) + "_b" + std::to_string(std::get<3>(s));
}

// W [n_out, n_in] of GGUF type t, random blocks (make_typed_rows), in the file layout; n_in a multiple of t's
// block (32; 256 for the K types).
inline PackedWeight make_gguf_weight(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  const auto rows = make_typed_rows(t, n_out, n_in, seed);
  PackedWeight w;
  w.format = gguf_weight_format(t);
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * w.row_bytes());
  for (int64_t r = 0; r < n_out; ++r)
    std::memcpy(w.data.data() + r * w.row_bytes(), rows.bytes.data() + r * rows.stride, size_t(w.row_bytes()));
  check_packed_weight(w);
  return w;
}

// x [m, n_in] uniform in [-1, 1] with every 97th element ×8: outliers, so that some activation blocks have a
// large max (a coarser int8 step).
inline std::vector<float> make_gguf_x(int64_t m, int64_t n_in, uint32_t seed) {
  auto x = random_floats(size_t(m * n_in), seed);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8;
  return x;
}

// Rows [r0, r1) and columns [c0, c1) of w (a file-layout GGUF weight; columns on block boundaries): a TP slice.
inline PackedWeight slice_gguf_weight(const PackedWeight& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  PackedWeight s;
  s.format = w.format;
  s.n_out = r1 - r0;
  s.n_in = c1 - c0;
  s.data = AlignedBytes(s.n_out * s.row_bytes());
  const int64_t off = dtype_row_bytes(gguf_block_dtype(w.format), c0);
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(s.data.data() + (r - r0) * s.row_bytes(), w.data.data() + r * w.row_bytes() + off, size_t(s.row_bytes()));
  return s;
}

// Σ_k |x_k · w_k| for every output [m, n_out] (x [m, n_in]; w dequantized by dequantize_rows).
inline std::vector<double> abs_sums(const float* x, int64_t m, const PackedWeight& w) {
  std::vector<float> wd(size_t(w.n_out * w.n_in));
  dequantize_rows(w, 0, w.n_out, wd.data());
  std::vector<double> out(size_t(m * w.n_out));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.n_out; ++r) {
      double s = 0;
      for (int64_t k = 0; k < w.n_in; ++k) s += std::fabs(double(x[i * w.n_in + k]) * wd[size_t(r * w.n_in + k)]);
      out[size_t(i * w.n_out + r)] = s;
    }
  return out;
}

}  // namespace tp::test
