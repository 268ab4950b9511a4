// F32 <-> BF16 on AVX512-BF16, and x held as two BF16 parts (x ≈ bf16(x) + bf16(x − bf16(x)): 16 significant
// bits), as the A16 kernels on AVX512-BF16 hold activations (gemm_int4_bf16.cpp, gemm_fp4_bf16.cpp,
// gemm_bf16_slabs.cpp). Header-only: inline, compiled for AVX512-BF16 wherever included; call it only where the CPU
// has it.
#pragma once
#include <immintrin.h>

namespace tp::cpu::detail {

#define TP_BF16_PARTS __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// 16 F32 -> BF16 (round to nearest even), and BF16 -> F32 (exact).
TP_BF16_PARTS inline __m256i bf16_of(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
TP_BF16_PARTS inline __m512 f32_of(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// 16 F32 -> part 0 = bf16(v) and part 1 = bf16(v − part 0).
TP_BF16_PARTS inline void bf16_parts(__m512 v, __m256i& p0, __m256i& p1) {
  p0 = bf16_of(v);
  p1 = bf16_of(_mm512_sub_ps(v, f32_of(p0)));
}

#undef TP_BF16_PARTS

}  // namespace tp::cpu::detail
