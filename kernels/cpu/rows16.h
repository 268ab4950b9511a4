// 4-bit decode in GEMM form on AVX512-BF16 (gemm_rows16.cpp) — MXFP4, NVFP4, Int4 (W4A16) weights (GGUF Q4_0 / Q4_1 /
// Q4_K with BF16 x, act_bf16; and GGUF Q8_0 / Q5_0 / Q6_K / Q4_0 / Q4_1 / Q4_K on AVX-512 VNNI, gemm_rows16_int8.cpp) in the Rows16 layout (common/rows16_layout.h): rows in blocks of 16, so that a decoded vector is 16 weight rows × 2
// columns and a vdpbf16ps against a broadcast pair of x sums each row in its own F32 lane — no horizontal sums,
// one FMA by the 16 rows' scales per block / group of columns. cpu::Weight puts such weights in that layout at
// load where this kernel is the CPU's 4-bit decode (prepare_rows16_weight); fp4_linear, int_a16_linear
// (packed_kernels.h) and gemm_gguf (gemm_gguf.h) then send every m to it (a prefill's m too: at m = 64 it ran 1.7-2.4x the slab + oneDNN
// prefill, at m = 512 1.0-1.1x, Zen 5, BF16 x). Measured against the row-major kernels
// (gemm_fp4_bf16.cpp, gemm_int4_bf16.cpp) in bench/results/zen5-kernels-20261204.md.
#pragma once
#include <cstdint>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

// y [m, n_out] = x [m, n_in] · Wᵀ as packed_linear_reference computes it (x rounded to BF16 first with act_bf16),
// for every m; a row of x gets the same operations whatever m, the rows next to it or the threads, so a row of a
// batch has the bits it has alone. Returns false (nothing written) unless w is in layout Rows16 and the CPU has
// AVX512-BF16.
bool rows16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// GGUF Q8_0, Q5_0, Q6_K, Q4_0, Q4_1, Q4_K and IQ4_NL in Rows16 (gemm_rows16_int8.cpp, AVX-512 VNNI; rows16_linear
// sends them there, the Q4 ones and IQ4_NL without act_bf16): x quantized to int8 as the file layout's kernels do
// (gemm_gguf.h: a 32-column block, Q4_1's Q8_1, Q6_K's and Q4_K's a 256), int8 dot products; the same integer sums,
// each row of a batch with the bits it has alone. Returns false (nothing written) unless w is one of them in Rows16 and the CPU has AVX-512 VNNI.
bool rows16_int8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// GGUF Q4_0, Q4_1, Q5_0 and Q8_0 in Rows16 on AVX2 (gemm_rows16_avx2.cpp; rows16_linear sends them there where AVX-512
// VNNI is missing; IQ4_NL there too, Q5_1 on every CPU with AVX2: its only SIMD kernel): x quantized as the file layout's kernels do,
// vpmaddubsw sums; the bits of the file layout's AVX2 kernel (gemm_gguf_avx2_blocks.inc) for every output, whatever m
// and the threads (IQ4_NL: the portable kernel's integers, one FMA a block; each row of a batch with the bits it has
// alone). Returns false (nothing written) unless w is one of them in Rows16 without act_bf16 and the CPU has AVX2 + FMA
// + F16C.
bool rows16_avx2_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// GGUF Q2_K, Q3_K, Q4_K, Q5_K and Q6_K in Rows16 on AVX2 (gemm_rows16_kquant_avx2.cpp; rows16_linear sends Q4_K / Q6_K
// there where AVX-512 VNNI is missing, Q5_K, Q2_K and Q3_K on every CPU with AVX2: their only SIMD kernel): x quantized
// as Q8_K, vpmaddubsw sums; Q4_K / Q6_K with the bits of rows16_int8_linear (the same integer block totals and float
// operations), the others with the portable kernel's integers; each output's bits whatever m and the threads. Returns false (nothing written) unless w
// is one of them in Rows16 without act_bf16 and the CPU has AVX2 + FMA + F16C.
bool rows16_avx2_k_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// Whether w is one this CPU decodes in Rows16 on AVX2: GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 (rows16_avx2_linear) and Q4_K /
// Q6_K (rows16_avx2_k_linear), on AVX2 without AVX-512 VNNI; GGUF IQ4_NL, Q5_1 (rows16_avx2_linear), Q5_K, Q2_K and
// Q3_K (rows16_avx2_k_linear) on every CPU with AVX2;
// W4A16 Int4 without g_idx, groups a multiple of 32 or per channel (packed_kernels.h rows16_a16_avx2; AVX2 without
// AVX-512); or MXFP4 / NVFP4 without activation quantization (rows16_fp4_avx2; AVX2 without AVX-512).
bool rows16_avx2_wanted(const PackedWeight& w);

// n values of x (a multiple of 8: int8 acts, int8 levels or F32) in the 4-bit Rows16 words' column order: each 8 as
// 0, 4, 1, 5, 2, 6, 3, 7.
template <class T>
void rows16_q4_x_order(const T* q, int64_t n, T* out) {
  for (int64_t k = 0; k < n; k += 8)
    for (int j = 0; j < 4; ++j) out[k + 2 * j] = q[k + j], out[k + 2 * j + 1] = q[k + 4 + j];
}

// The row-block kernels' tile of rows of x: f.template operator()<MT>() with MT = min(8, rows_left), 1..8.
template <class F>
void with_tile_rows(int64_t rows_left, F&& f) {
  switch (rows_left < 8 ? rows_left : 8) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 3: f.template operator()<3>(); break;
    case 4: f.template operator()<4>(); break;
    case 5: f.template operator()<5>(); break;
    case 6: f.template operator()<6>(); break;
    case 7: f.template operator()<7>(); break;
    default: f.template operator()<8>(); break;
  }
}

// Whether prepare_rows16_weight would put w in Rows16: Int4 / MXFP4 / NVFP4 / GGUF Q4_0 / Q4_1 / Q8_0 in Rows that
// Rows16 can hold (rows16_refusal), on a CPU whose 4-bit decode is the AVX512-BF16 one (prefer_bf16_a16: AMD; on Intel the
// VNNI kernels read Rows); GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K / IQ4_NL, Int4, MXFP4 and NVFP4 also on AVX2
// (rows16_avx2_wanted).
bool rows16_wanted(const PackedWeight& w);
// Whether this CPU puts Int4 weights in Rows16 (AVX512-BF16 and prefer_bf16_a16): then groups of any multiple of 16
// columns run on the GEMM form (common/act_order.h holds an act-order slice's groups in 16s for it).
bool rows16_takes_int4();
// w into Rows16, in place, where rows16_wanted (GGUF weights then run on the int8 form, ~1.3x the BF16 form's rate
// with x as llama.cpp quantizes it; with act_bf16 set by hand on the BF16 form); else left as it is.
void prepare_rows16_weight(PackedWeight* w);

}  // namespace tp::cpu::detail
