// Pieces the AVX2 kernels of the Rows16 layout share (gemm_rows16_avx2.cpp: GGUF; gemm_rows16_a16_avx2.cpp: W4A16;
// gemm_rows16_fp4_avx2.cpp: MXFP4 / NVFP4). Inline, compiled for AVX2 wherever included, but for rows16_x_levels;
// call them only where the CPU has AVX2.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include <immintrin.h>
#include <omp.h>

#include "common/packed_weight.h"
#include "kernels/cpu/gemv.h"

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

// Q5_0's 32 bytes q of half H (columns 4H + j) of chunk C, for 8 rows (the layout of Q5_0 / Q5_1 / Q5_K: common/
// rows16_layout.h): the low nibbles from w, the fifth bits from the 32 columns' plane hp (bit 2C + H of each byte moved
// to bit 4; 16-bit shifts keep each byte's bit in its byte).
template <int C, int H>
TP_ROWS16_AVX2 inline __m256i rows16_q5_bytes(__m256i w, __m256i hp) {
  constexpr int s = 2 * C + H;
  const __m256i nib = _mm256_and_si256(H ? _mm256_srli_epi16(w, 4) : w, _mm256_set1_epi8(0x0f));
  const __m256i hb = s >= 4 ? _mm256_srli_epi16(hp, s - 4) : _mm256_slli_epi16(hp, 4 - s);
  return _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
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

// Each of this call's threads' 16-row blocks of w (split by thread_rows), W's stream started with a prefetch of
// prefetch_bytes, each block against the m rows of x, tile at a time: block(rb, i, n, prefetch) for rows i .. i + n
// (n = tile but the last) — prefetch: the first tile (the one that meets W first). The decode kernels' loop over
// 4-bit Rows16 data (n_in / 2 bytes a row).
template <class F>
void rows16_for_row_blocks(const PackedWeight& w, int64_t m, int64_t tile, int n_threads, int64_t prefetch_bytes,
                           F&& block) {
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in * 8;  // a row block's codes
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, prefetch_bytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb)
      for (int64_t i = 0; i < m; i += tile) block(rb, i, std::min(tile, m - i), i == 0);
  }
}

// One row of x (n_in a multiple of 32) as `levels` (2 or 3) int8 levels per block of bs columns (16 or 32) —
// rows16_x_levels.cpp; the x of the FP4 and (BF16 x) W4A16 kernels: per block b, d_b = 2^k_b with max|x| / d_b in
// [32, 64), X = x / d_b · 2^(7 (L − 1)) rounded, held as X = q1 · 2^(7 (L − 1)) + .. + q_L (each level within ±64):
// |x − d_b · 2^(−7 (L − 1)) · X| ≤ 2^(−7 L + 1) of the block's largest |x| (L = 2: 2⁻¹³, BF16 x's values within 2⁵ of
// it exact; 3: 2⁻²⁰). lv: levels × n_in bytes, sx and f: n_in / bs entries (written; the result points into them).
// Not inline: AVX2 + FMA, the caller checks the CPU.
struct Rows16XRow {
  const int8_t* q[3];     // the levels, n_in bytes each, in the 4-bit words' column order (rows16_q4_x_order)
  const int32_t* sx;      // each block's ΣX (|ΣX| < 2²⁶)
  const float* f;         // each block's 2^(k_b − k0), k0 the row's largest k_b (0: a block 2^-126 below it, or zero)
  float post_a, post_b;   // x = post_a · post_b · f_b · X: X's unit 2^(k0 − 7 (L − 1)) as two factors in F32's range
  bool finite;            // false: a NaN or an infinity in the row (then every level, sx and f 0)
};
Rows16XRow rows16_x_levels(const float* x, int64_t n_in, int64_t bs, int levels, int8_t* lv, int32_t* sx, float* f);
// m rows of x (n_in apart) each as rows16_x_levels makes it — rounded to BF16 first where bf16 (act_bf16, as the
// reference) — in this thread's buffers, each row's post_a × unit (a kernel's constant factor, exact as a power of
// two): the m rows. Valid until this thread's next call (an OpenMP team may read them meanwhile).
const Rows16XRow* rows16_x_rows(const float* x, int64_t m, int64_t n_in, int64_t bs, int levels, bool bf16,
                                float unit);

// Row block rb's 16 totals (tot[h]: rows 8 h .. 8 h + 7) against the row of x xr, in X's units, into y[16 rb ..]: ×
// post_a × post_b (NaN where xr is not finite), the rows from n_out on left out.
TP_ROWS16_AVX2 inline void rows16_store_x_row(const __m256 (&tot)[2], const Rows16XRow& xr, int64_t rb, int64_t n_out,
                                             float* y) {
  const __m256 fa = _mm256_set1_ps(xr.post_a), fb = _mm256_set1_ps(xr.post_b);
  for (int h = 0; h < 2; ++h) {
    __m256 v = _mm256_mul_ps(_mm256_mul_ps(tot[h], fa), fb);
    if (!xr.finite) v = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
    rows16_store8(v, rb * 16 + h * 8, n_out, y);
  }
}

}  // namespace tp::cpu::detail
