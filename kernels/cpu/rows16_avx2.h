// Pieces the AVX2 kernels of the Rows16 layout share (gemm_rows16_avx2.cpp: GGUF; gemm_rows16_a16_avx2.cpp: W4A16).
// Header-only: inline, compiled for AVX2 wherever included; call them only where the CPU has AVX2.
#pragma once
#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace tp::cpu::detail {

#define TP_ROWS16_AVX2 __attribute__((target("avx2,fma,f16c")))

// 4 bytes of x (int8) broadcast to the 8 int32 lanes: one vpmaddubsw operand against 8 rows' 4 codes.
TP_ROWS16_AVX2 inline __m256i rows16_bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The unsigned codes of a 4-bit line (16 rows × 8 columns, common/rows16_layout.h) at p, for each half h (rows 8 h ..
// 8 h + 7: the line's bytes 32 h ..): q0 the low nibbles (columns 0, 4, 1, 5 of each row), q1 the high ones (2, 6, 3,
// 7).
TP_ROWS16_AVX2 inline void rows16_q4_codes(const uint8_t* p, __m256i (&q0)[2], __m256i (&q1)[2]) {
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  for (int h = 0; h < 2; ++h) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + h * 32));
    q0[h] = _mm256_and_si256(wv, lo4);
    q1[h] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), lo4);
  }
}

// The 8 outputs v of rows r0 .. r0 + 7 into out[r0 ..], the rows from n_out on left out (a block's last rows).
TP_ROWS16_AVX2 inline void rows16_store8(__m256 v, int64_t r0, int64_t n_out, float* out) {
  const int64_t n = n_out - r0;
  if (n >= 8) {
    _mm256_storeu_ps(out + r0, v);
  } else if (n > 0) {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    std::memcpy(out + r0, t, size_t(n) * sizeof(float));
  }
}

}  // namespace tp::cpu::detail
