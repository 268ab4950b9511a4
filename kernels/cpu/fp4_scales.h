// FP4 block scales of one weight row to F32, on AVX-512 (+ F16C): what the 4-bit decode kernels multiply each
// block's sum by (gemm_a16_vnni.cpp, gemm_int4_bf16.cpp). Header-only: inline, compiled for AVX-512 wherever
// included; call it only where the CPU has AVX-512 (packed_best_isa() == Avx512).
#pragma once
#include <algorithm>
#include <cstdint>

#include <immintrin.h>

namespace tp::cpu::detail {

#define TP_FP4_SCALES __attribute__((target("avx512f,avx512bw,avx512vl,bmi2,f16c")))

// Whether any of the n bytes at sb is a scale the fast conversion below does not take: MXFP4's E8M0 0 (2⁻¹²⁷, a
// subnormal) and 255 (NaN); NVFP4's E4M3 NaN (0x7f, 0xff).
TP_FP4_SCALES inline bool fp4_scale_edges(const uint8_t* sb, int64_t n, bool mx) {
  __mmask64 any = 0;
  for (int64_t k = 0; k < n; k += 64) {
    const __mmask64 lanes = n - k >= 64 ? ~__mmask64(0) : _bzhi_u64(~0ull, unsigned(n - k));
    const __m512i b = _mm512_maskz_loadu_epi8(lanes, sb + k);
    if (mx)
      any |= _mm512_mask_cmpeq_epi8_mask(lanes, b, _mm512_setzero_si512()) |
             _mm512_mask_cmpeq_epi8_mask(lanes, b, _mm512_set1_epi8(char(0xff)));
    else
      any |= _mm512_mask_cmpeq_epi8_mask(lanes, _mm512_and_si512(b, _mm512_set1_epi8(0x7f)), _mm512_set1_epi8(0x7f));
  }
  return any != 0;
}

// n scale bytes sb -> F32 in out[n] (several rows' scales in one call where they lie together): MXFP4's E8M0
// exactly (0: 2⁻¹²⁷, 255: NaN); NVFP4's E4M3 × 2⁻⁸ exactly (the byte's bits moved into an F16, vcvtph2ps; 0x7f /
// 0xff: NaN) — the caller puts the 2⁸ into y's factor. Without edge bytes (fp4_scale_edges) 32 NVFP4 scales take
// ~7 vector ops (the per-value edge handling doubled that: a pass of 4 rows of 576 columns spent a third of its
// time here on Zen 5).
TP_FP4_SCALES inline void fp4_scales(const uint8_t* sb, int64_t n, bool mx, float* out) {
  if (!fp4_scale_edges(sb, n, mx)) {
    if (mx) {
      for (int64_t k = 0; k < n; k += 16) {
        const __mmask16 lanes = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n - k))));
        const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, sb + k));
        _mm512_mask_storeu_ps(out + k, lanes, _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
      }
    } else {
      for (int64_t k = 0; k < n; k += 32) {
        const __mmask32 lanes = __mmask32(_bzhi_u32(~0u, unsigned(std::min<int64_t>(32, n - k))));
        const __m512i ws = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(lanes, sb + k));
        const __m512i h = _mm512_and_si512(_mm512_slli_epi16(ws, 7), _mm512_set1_epi16(short(0xbfff)));
        _mm512_mask_storeu_ps(out + k, __mmask16(lanes), _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
        _mm512_mask_storeu_ps(out + k + 16, __mmask16(lanes >> 16), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)));
      }
    }
    return;
  }
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 lanes = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n - k))));
    const __m128i b = _mm_maskz_loadu_epi8(lanes, sb + k);
    __m512 v;
    if (mx) {
      const __m512i e = _mm512_cvtepu8_epi32(b);
      __m512i bits = _mm512_slli_epi32(e, 23);
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7fc00000));
      v = _mm512_castsi512_ps(bits);
    } else {
      const __m256i ws = _mm256_cvtepi8_epi16(b);  // sign-extended: << 7 puts the sign in bits 14 and 15
      __m256i h = _mm256_and_si256(_mm256_slli_epi16(ws, 7), _mm256_set1_epi16(short(0xbfff)));
      const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(ws, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
      h = _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7e00));
      v = _mm512_cvtph_ps(h);
    }
    _mm512_mask_storeu_ps(out + k, lanes, v);
  }
}

#undef TP_FP4_SCALES

}  // namespace tp::cpu::detail
