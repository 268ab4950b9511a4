// Four 512-bit F32 lane sums at once, each with the bits of _mm512_reduce_add_ps of that vector alone (GCC's order:
// the 256-bit halves added, then the 128-bit halves, then lanes (0 + 2, 1 + 3), then 0 + 1; float addition is
// commutative, so the transposed steps below add the same pairs). 14 vector ops for the four instead of ~8 each:
// the decode kernels' passes of 4 weight rows end with it (store_row_sums) (on Zen 5 a pass over 576-column rows spent ~10% of its
// time in the four reductions). Header-only; call it only where the CPU has AVX-512.
#pragma once
#include <immintrin.h>

namespace tp::cpu::detail {

// {Σ a, Σ b, Σ c, Σ d}.
__attribute__((target("avx512f"))) inline __m128 reduce_add4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // 128-bit blocks [a0 a1 a2 a3]: a's 256-bit halves summed -> [a0+a2, a1+a3, b0+b2, b1+b3].
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // Then the 128-bit halves: [a, b, c, d] as 4 lanes each.
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  // Within each block: lanes (0 + 2, 1 + 3), then 0 + 1.
  const __m512 h = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
  const __m512 s = _mm512_add_ps(h, _mm512_permute_ps(h, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// A pass of RW weight rows' two running totals each (t[j][0] + t[j][1], summed over lanes) × post into y[0, RW): four
// rows at a time through reduce_add4 when RW is a multiple of 4, else one at a time — the same bits either way.
template <int RW>
__attribute__((target("avx512f"), always_inline)) inline void store_row_sums(const __m512 (&t)[RW][2], float post,
                                                                             float* y) {
  if constexpr (RW % 4 == 0) {
    for (int j = 0; j < RW; j += 4) {
      const __m128 s = reduce_add4(_mm512_add_ps(t[j][0], t[j][1]), _mm512_add_ps(t[j + 1][0], t[j + 1][1]),
                                   _mm512_add_ps(t[j + 2][0], t[j + 2][1]), _mm512_add_ps(t[j + 3][0], t[j + 3][1]));
      _mm_storeu_ps(y + j, _mm_mul_ps(s, _mm_set1_ps(post)));
    }
  } else {
    for (int j = 0; j < RW; ++j) y[j] = _mm512_reduce_add_ps(_mm512_add_ps(t[j][0], t[j][1])) * post;
  }
}

}  // namespace tp::cpu::detail
