// F32 -> BF16 rounding of arrays (bf16_round.h): 16 values a step on AVX-512, 8 on AVX2 (the BF16 runtime's x of
// every packed-weight call on AVX2-only CPUs: the scalar loop was ~2% of an NVFP4 decode step on Zen 3), the scalar
// rule elsewhere and for the tail.
#include "kernels/cpu/bf16_round.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "common/dtype.h"
#include "kernels/cpu/gemv.h"

namespace tp::cpu::detail {

namespace {

// f32_to_bf16 of 16 floats at once, in the upper halves of 32-bit lanes (the lower halves zero): u + 0x7fff +
// (bit 16 of u); NaNs: u | 0x400000 (quiet).
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i rounded_bf16_lanes(__m512i u) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  const __m512i r = _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u)));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_bf16_avx512(const float* x, int64_t n,
                                                                             uint16_t* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i r = rounded_bf16_lanes(_mm512_castps_si512(_mm512_loadu_ps(x + k)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  for (; k < n; ++k) out[k] = f32_to_bf16(x[k]);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_bf16_f32_avx512(const float* x, int64_t n,
                                                                                 float* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_ps(out + k, _mm512_castsi512_ps(rounded_bf16_lanes(_mm512_castps_si512(_mm512_loadu_ps(x + k)))));
  for (; k < n; ++k) out[k] = bf16_to_f32(f32_to_bf16(x[k]));
}

// The same rule on AVX2, 8 lanes (AVX2 has no unsigned compare: |u| > inf as a signed one, both non-negative).
__attribute__((target("avx2"))) inline __m256i rounded_bf16_lanes8(__m256i u) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  return _mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u)));
}

__attribute__((target("avx2"))) void round_bf16_avx2(const float* x, int64_t n, uint16_t* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i r = _mm256_srli_epi32(rounded_bf16_lanes8(_mm256_castps_si256(_mm256_loadu_ps(x + k))), 16);
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));  // 16 bits: no saturation
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), p);
  }
  for (; k < n; ++k) out[k] = f32_to_bf16(x[k]);
}

__attribute__((target("avx2"))) void round_bf16_f32_avx2(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(out + k, _mm256_castsi256_ps(rounded_bf16_lanes8(_mm256_castps_si256(_mm256_loadu_ps(x + k)))));
  for (; k < n; ++k) out[k] = bf16_to_f32(f32_to_bf16(x[k]));
}

}  // namespace

void round_bf16(const float* x, int64_t n, uint16_t* out) {
  if (cpu_has_avx512f()) {
    round_bf16_avx512(x, n, out);
    return;
  }
  if (cpu_has_avx2()) {
    round_bf16_avx2(x, n, out);
    return;
  }
  for (int64_t k = 0; k < n; ++k) out[k] = f32_to_bf16(x[k]);
}

void round_bf16_f32(const float* x, int64_t n, float* out) {
  if (cpu_has_avx512f()) {
    round_bf16_f32_avx512(x, n, out);
    return;
  }
  if (cpu_has_avx2()) {
    round_bf16_f32_avx2(x, n, out);
    return;
  }
  for (int64_t k = 0; k < n; ++k) out[k] = bf16_to_f32(f32_to_bf16(x[k]));
}

}  // namespace tp::cpu::detail
