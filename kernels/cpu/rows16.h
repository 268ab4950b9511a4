// MXFP4 / NVFP4 decode in GEMM form on AVX512-BF16 (gemm_fp4_rows16.cpp), on weights in the Rows16 layout
// (common/fp4_layout.h): rows in blocks of 16, so that a decoded vector is 16 weight rows × 2 columns and a
// vdpbf16ps against a broadcast pair of x sums each row in its own F32 lane — no horizontal sums, one FMA by the
// 16 rows' block scales per block of columns. cpu::Weight puts FP4 weights in that layout at load where this
// kernel is the CPU's FP4 decode (prepare_fp4_weight); fp4_linear (packed_kernels.h) then sends every m below
// the prefill's to it. Measured against gemm_fp4_bf16.cpp's row-major kernel in
// bench/results/zen5-kernels-20261204.md.
#pragma once
#include <cstdint>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

// y [m, n_out] = x [m, n_in] · Wᵀ as packed_linear_reference computes it (x rounded to BF16 first with act_bf16),
// for every m; a row of x gets the same operations whatever m, the rows next to it or the threads, so a row of a
// batch has the bits it has alone. Returns false (nothing written) unless w is in layout Rows16 and the CPU has
// AVX512-BF16.
bool fp4_rows16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// Row r of w (layout Rows16) as common/fp4_layout.h's fp4_rows16_row gives it — n_in / 2 code bytes in the Rows
// layout into codes, n_in / block scale bytes into scales — on AVX-512 (call only where the CPU has AVX512-BF16):
// the prefill's row decode (gemm_bf16_slabs.cpp fp4_row) on Rows16 weights.
void fp4_rows16_row_fast(const PackedWeight& w, int64_t r, uint8_t* codes, uint8_t* scales);

// Whether prepare_fp4_weight would put w in Rows16: MXFP4 / NVFP4 in Rows, weight-only, n_in a multiple of 32,
// scale bytes Rows16 takes (fp4_rows16_scales_ok), and a CPU whose FP4 decode is the AVX512-BF16 one
// (prefer_bf16_a16: AMD; on Intel the VNNI kernel reads Rows).
bool fp4_rows16_wanted(const PackedWeight& w);
// w into Rows16, in place, where fp4_rows16_wanted; else left as it is.
void prepare_fp4_weight(PackedWeight* w);

}  // namespace tp::cpu::detail
