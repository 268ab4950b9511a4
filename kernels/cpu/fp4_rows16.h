// MXFP4 / NVFP4 weights in GEMM form for the AVX512-BF16 decode (gemm_fp4_rows16.cpp): rows in blocks of 16, so
// that a decoded vector is 16 weight rows × 2 columns and a vdpbf16ps against a broadcast pair of x sums each row in
// its own F32 lane — no horizontal sums, one FMA by the 16 rows' block scales per block of columns. Not yet the
// layout a loaded model's weights take: built from a PackedWeight here (the kernel's tests and gemm_gguf_bench
// `+r16`), measured against gemm_fp4_bf16.cpp's row-major kernel in bench/results/zen5-kernels-20261204.md.
#pragma once
#include <cstdint>
#include <vector>

#include "common/packed_weight.h"

namespace tp::cpu {

struct Fp4Rows16 {
  WeightFormat format = WeightFormat::Nvfp4;  // Nvfp4 or Mxfp4
  int64_t n_out = 0, n_in = 0;
  float global_scale = 1.0f;  // NVFP4
  // [ceil(n_out / 16)][n_in / 8][64 bytes]: per block of 16 rows and 8 columns k0.., 32 little-endian 16-bit words,
  // word 2r + t holding in its nibble n (bits 4n..4n+3) the e2m1 code of row r, column k0 + 2n + t. Rows past
  // n_out: code 0.
  std::vector<uint8_t> data;
  // [ceil(n_out / 16)][n_in / block][16]: the block scale bytes (E4M3 / E8M0) of the 16 rows (past n_out: 0 for
  // NVFP4, 127 = 1.0 for MXFP4).
  std::vector<uint8_t> scale_bytes;
  bool act_bf16 = false;  // as PackedWeight::act_bf16: x rounded to BF16 (one part), else F32 x as two parts
  bool scale_edges = false;  // a scale the fast conversion does not take (fp4_scales.h: fp4_scale_edges)

  int64_t row_blocks() const { return (n_out + 15) / 16; }
  int64_t block_cols() const { return format == WeightFormat::Mxfp4 ? 32 : 16; }
};

// w (Nvfp4 or Mxfp4, act None, n_in a multiple of 32) in GEMM form; throws tp::Error for anything else.
Fp4Rows16 fp4_rows16_from(const PackedWeight& w);

// y [m, n_out] = x [m, n_in] · Wᵀ as packed_linear_reference computes it (x rounded to BF16 first with act_bf16),
// for every m; a row of x gets the same operations whatever m, the rows next to it or the threads, so a row of a
// batch has the bits it has alone. Returns false (nothing written) without AVX512-BF16 or with scale_edges.
bool fp4_rows16_linear(const float* x, int64_t m, const Fp4Rows16& w, float* y, int n_threads);

}  // namespace tp::cpu
