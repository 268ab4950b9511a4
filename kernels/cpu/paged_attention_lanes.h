// Private to paged_attention_avx512.cpp (the lane kernels: both pieces) and paged_attention_amx.cpp (transpose16;
// its softmax over 64-position super-chunks takes chunk_softmax's steps per row, over more positions a step).
// Include it after defining TP_KV_TARGET (a target with at least avx512f/bw/vl/dq); everything here has internal
// linkage, compiled for the including TU's target. Build the including TU with -ffp-contract=off (every FMA here is
// written out).
#pragma once
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/simd_exp.h"

namespace tp::cpu::detail {
namespace {

constexpr int kChunkLanes = 16;

// 16x16 F32 transpose in registers: r[i] lane j <- r[j] lane i.
TP_KV_TARGET inline void transpose16(__m512* r) {
  __m512 t[kChunkLanes], u[kChunkLanes];
  for (int i = 0; i < 8; ++i) {  // 32-bit pairs within 128-bit lanes
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // 64-bit pairs: u[4i + c] holds column 4k + c of rows 4i..4i+3 in lane k
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {  // 128-bit lanes: gather column c (+4, +8, +12) of the four row groups
    t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
  }
}

// The online softmax of one chunk for 16 query rows (lanes): s[j] the scaled scores of chunk position j,
// visible[j] the lanes that see it; m, l [16] the rows' running max and sum, updated. Leaves in pt [16, 16] the
// weights P^T[j] (0 where unseen) and returns the factor c = e^(m_old − m_new) that rescales the rows' outputs.
TP_KV_TARGET inline __m512 chunk_softmax(__m512* s, const __mmask16* visible, float* pt, float* m, float* l) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512 m_old = _mm512_loadu_ps(m);
  __m512 mx = m_old;
  #pragma GCC unroll 16
  for (int j = 0; j < kChunkLanes; ++j) {
    s[j] = _mm512_mask_blend_ps(visible[j], neg_inf, s[j]);
    mx = _mm512_max_ps(mx, s[j]);
  }
  // Lanes that have seen nothing yet keep max -inf; subtract 0 there instead (their weights are masked to 0).
  const __m512 sub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, neg_inf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
  const __m512 c = exp16(_mm512_sub_ps(m_old, sub));  // m_old = -inf: ~1e-38 × (l = 0, acc = 0)
  __m512 lsum = _mm512_mul_ps(_mm512_loadu_ps(l), c);
  #pragma GCC unroll 16
  for (int j = 0; j < kChunkLanes; ++j) {
    const __m512 p = _mm512_maskz_mov_ps(visible[j], exp16(_mm512_sub_ps(s[j], sub)));
    lsum = _mm512_add_ps(lsum, p);
    _mm512_storeu_ps(pt + j * kChunkLanes, p);
  }
  _mm512_storeu_ps(m, mx);
  _mm512_storeu_ps(l, lsum);
  return c;
}

}  // namespace
}  // namespace tp::cpu::detail
