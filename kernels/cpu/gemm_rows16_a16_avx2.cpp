// W4A16 decode in GEMM form on AVX2 (packed_kernels.h rows16_a16_avx2): Int4 weights in Rows16 (common/rows16_layout.h:
// per 16 rows and 8 columns a 64-byte line, rows 0-7 in its first 32 bytes and 8-15 in the next; row i's 4 bytes hold
// columns 0, 4, 1, 5 in their low nibbles and 2, 6, 3, 7 in the high ones), against x as the three int8 levels of
// gemm_a16_avx2_levels.cpp (a16_x_levels_in_order: s = 2^k, X = q1 · 2¹⁴ + q2 · 2⁷ + q3, x = s · 2⁻¹⁴ · X + e, |e| ≤
// max|x| · 2⁻²¹), permuted into the words' column order (rows16_q4_x_order).
// Per chunk and half (8 rows × 8 columns): & 0x0f and >> 4 give the unsigned codes u, and per level two vpmaddubsw
// against the level's 4 bytes of those columns, broadcast, add each row's products into its own two int16 lanes —
// no horizontal sums. A 32-column block's 4 chunks stay in int16 (level 1: |lane| ≤ 4 · 2 · 2 · 15 · 127 = 30480),
// then (A1 · 2⁷ + A2) · 2⁷ + A3 by vpmaddwd with the powers (one int32 lane a row) is added into the segment's sum.
// A segment is 64 columns of one scale group (32 where the group or the row ends sooner): Σ u · X over it is at most
// 64 · 15 · (127 · 2¹⁴ + 64 · 2⁷ + 64) < 2³¹, and D = Σ u · X − (8 + z) · ΣX (ΣX: the segment's sum of X, made once a
// row of x) = Σ (u − 8 − z) · X exactly in wrapping int32; D to F32 × the 16 rows' scales of the group (one FMA a
// half) into the rows' totals; y = total × s · 2⁻¹⁴. A zero row of x gives 0, a row with a NaN or an infinity NaN.
// The integer sums are those of gemm_a16_avx2_levels.cpp (its segments are a lane's columns: the F32 sums differ,
// within the A16 bound). Every row of x gets the same operations whatever m, the rows beside it or the threads.
// BF16 x (act_bf16, the BF16 runtime): x as two int8 levels per 32 columns instead (row_block_bf16), ~1.2x the rate,
// two rows of x a pass at m > 1.
// Why: the Rows kernel spends 9 vector ops a row and 32 columns and a group's finish a row (~31 ops a 64 weights: Zen
// 3 from cache 14 G weights/s, compute-bound at a third of the DRAM roofline); here 16 rows × 32 columns take 8 loads,
// 24 ops for the codes, 24 broadcasts, 48 vpmaddubsw and 48 vpaddw, and the finish is per 16 rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/rows16_avx2.h"

namespace tp::cpu::detail {

// The kernel is compiled for AVX2 + FMA as a region (lambdas do not take a function's target attribute); the entry
// below checks the CPU first.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

constexpr int64_t kSeg = 64;              // columns a segment at most (the int32 bound above)
constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16_avx2.cpp)

// One row of x: its 3 levels in the words' column order, ΣX of each segment, y's factor s · 2⁻¹⁴.
struct Levels {
  const int8_t* q[3];
  const int32_t* sx;
  float scale;
};

// The segments of a row: [c0, c1) within group g, each ≤ kSeg columns. f(c0, c1, g).
template <class F>
inline void for_segments(int64_t n_in, int64_t gs, F&& f) {
  for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs)
    for (int64_t s = c0; s < std::min(n_in, c0 + gs); s += kSeg) f(s, std::min({n_in, c0 + gs, s + kSeg}), g);
}

// (8 + z) · ΣX for 8 rows (z: their zero points at zp; 0 without, kZeros false): what Σ u X exceeds Σ (u − 8 − z) X.
template <bool kZeros>
inline __m256i zero_offset(const int8_t* zp, __m256i sxv) {
  if constexpr (!kZeros) return _mm256_slli_epi32(sxv, 3);
  const __m256i z = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zp)));
  return _mm256_mullo_epi32(_mm256_add_epi32(z, _mm256_set1_epi32(8)), sxv);
}

// Row block rb against one row of x's levels: y[16 rb + r], rows past n_out left out.
template <bool kZeros>
void row_block(const PackedWeight& w, int64_t ng, int64_t gs, int64_t rb, const Levels& xl, float* y,
               bool prefetch) {
  const int64_t n_in = w.n_in;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const float* sc = w.scales.data() + rb * ng * 16;
  const int8_t* zp = kZeros ? w.zeros.data() + rb * ng * 16 : nullptr;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i p14 = _mm256_set1_epi16(1 << 14), p7 = _mm256_set1_epi16(1 << 7);
  __m256 tot[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const int32_t* sx = xl.sx;
  for_segments(n_in, gs, [&](int64_t c0, int64_t c1, int64_t g) {
    __m256i seg[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int64_t b = c0; b < c1; b += 32) {
      __m256i acc[2][3];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) acc[h][0] = acc[h][1] = acc[h][2] = _mm256_setzero_si256();
      const uint8_t* p = wd + b * 8;  // the block's 4 lines (64 bytes a chunk of 8 columns)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
        __m256i q0[2], q1[2];
        rows16_q4_codes(p + c * 64, q0, q1);
#pragma GCC unroll 3
        for (int l = 0; l < 3; ++l) {
          const __m256i x0 = rows16_bcast4(xl.q[l] + b + c * 8), x1 = rows16_bcast4(xl.q[l] + b + c * 8 + 4);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h)
            acc[h][l] = _mm256_add_epi16(acc[h][l], _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0),
                                                                     _mm256_maddubs_epi16(q1[h], x1)));
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        seg[h] = _mm256_add_epi32(seg[h], _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(acc[h][0], p14),
                                                                            _mm256_madd_epi16(acc[h][1], p7)),
                                                           _mm256_madd_epi16(acc[h][2], ones)));
    }
    const __m256i sxv = _mm256_set1_epi32(*sx++);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i off = zero_offset<kZeros>(zp + g * 16 + h * 8, sxv);
      tot[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(seg[h], off)), _mm256_loadu_ps(sc + g * 16 + h * 8),
                               tot[h]);
    }
  });
  const __m256 f = _mm256_set1_ps(xl.scale);
  for (int h = 0; h < 2; ++h) rows16_store8(_mm256_mul_ps(tot[h], f), rb * 16 + h * 8, w.n_out, y);
}

// BF16 x (act_bf16): row block rb against MT rows of x (xr[0 .. MT), the codes decoded once for them) as two int8
// levels per 32-column block (rows16_x_levels: within 2⁻¹³ of the block's largest value, BF16's values within 2⁵ of
// it exact). Per block: the 4 chunks' products in int16 (|lane| ≤ 4 · 4 · 15 · 64 = 15360), D = A1 · 2⁷ + A2 −
// (8 + z) · ΣX by vpmaddwd = Σ (u − 8 − z) X exactly, × the group's scales × the block's 2^(k_b − k0) into the rows'
// totals; y = total × X's unit. Each row of x gets the same operations whatever MT.
template <bool kZeros, int MT>
void row_block_bf16(const PackedWeight& w, int64_t ng, int64_t gs, int64_t rb, const Rows16XRow* xr, float* y,
                    bool prefetch) {
  const int64_t n_in = w.n_in;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const float* sc = w.scales.data() + rb * ng * 16;
  const int8_t* zp = kZeros ? w.zeros.data() + rb * ng * 16 : nullptr;
  const __m256i ones = _mm256_set1_epi16(1), p7 = _mm256_set1_epi16(1 << 7);
  __m256 tot[MT][2];
#pragma GCC unroll 2
  for (int i = 0; i < MT; ++i) tot[i][0] = tot[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_in / 32; ++b) {
    const int64_t g = b * 32 / gs;
    __m256i acc[MT][2][2];
    const uint8_t* p = wd + b * 256;  // the block's 4 lines
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
      __m256i q0[2], q1[2];
      rows16_q4_codes(p + c * 64, q0, q1);
#pragma GCC unroll 2
      for (int i = 0; i < MT; ++i)
#pragma GCC unroll 2
        for (int l = 0; l < 2; ++l) {
          const int8_t* xq = xr[i].q[l] + b * 32 + c * 8;
          const __m256i x0 = rows16_bcast4(xq), x1 = rows16_bcast4(xq + 4);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1));
            acc[i][h][l] = c == 0 ? t : _mm256_add_epi16(acc[i][h][l], t);
          }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < MT; ++i) {
      const __m256i sxv = _mm256_set1_epi32(xr[i].sx[b]);
      const __m256 fb = _mm256_set1_ps(xr[i].f[b]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i off = zero_offset<kZeros>(zp + g * 16 + h * 8, sxv);
        const __m256i d = _mm256_add_epi32(_mm256_madd_epi16(acc[i][h][0], p7), _mm256_madd_epi16(acc[i][h][1], ones));
        tot[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(d, off)),
                                    _mm256_mul_ps(_mm256_loadu_ps(sc + g * 16 + h * 8), fb), tot[i][h]);
      }
    }
  }
  for (int i = 0; i < MT; ++i) rows16_store_x_row(tot[i], xr[i], rb, w.n_out, y + i * w.n_out);
}

}  // namespace
#pragma GCC pop_options

namespace {

// rows16_a16_avx2 with BF16 x (act_bf16): x rounded to BF16, two int8 levels per 32 columns (row_block_bf16).
bool bf16_x(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, int64_t ng, int64_t gs) {
  const Rows16XRow* xl = rows16_x_rows(x, m, w.n_in, 32, 2, true, 1.0f);
  const bool zeros = !w.zeros.empty();
  rows16_for_row_blocks(w, m, 2, n_threads, kPrefetchBytes, [&](int64_t rb, int64_t i, int64_t n, bool pf) {
    float* yi = y + i * w.n_out;
    if (zeros && n == 2) row_block_bf16<true, 2>(w, ng, gs, rb, xl + i, yi, pf);
    else if (zeros) row_block_bf16<true, 1>(w, ng, gs, rb, xl + i, yi, pf);
    else if (n == 2) row_block_bf16<false, 2>(w, ng, gs, rb, xl + i, yi, pf);
    else row_block_bf16<false, 1>(w, ng, gs, rb, xl + i, yi, pf);
  });
  return true;
}

}  // namespace

bool rows16_a16_avx2(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Int4 || w.act != ActQuant::None || !w.g_idx.empty() || w.n_in % 32 != 0 ||
      m >= kA16Avx2LevelsMaxM || w.rows_layout != RowsLayout::Rows16 || !cpu_has_avx2())
    return false;
  const int64_t n_in = w.n_in, ng = w.n_groups(), gs = ng > 1 ? w.group_size : n_in;
  if (gs % 32 != 0) return false;
  if (w.act_bf16) return bf16_x(x, m, w, y, n_threads, ng, gs);
  int64_t n_seg = 0;
  for_segments(n_in, gs, [&](int64_t, int64_t, int64_t) { ++n_seg; });
  thread_local std::vector<int8_t> lv, q;
  thread_local std::vector<int32_t> sx;
  thread_local std::vector<Levels> xs;
  lv.resize(size_t(3 * n_in));
  q.resize(size_t(m * 3 * n_in));
  sx.resize(size_t(m * n_seg));
  xs.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    Levels& l = xs[size_t(i)];
    l.scale = a16_x_levels_in_order(x + i * n_in, n_in, lv.data());
    int32_t* s = sx.data() + i * n_seg;
    for_segments(n_in, gs, [&](int64_t c0, int64_t c1, int64_t) {
      int32_t t = 0;
      for (int64_t c = c0; c < c1; ++c) t += int32_t(lv[size_t(c)]) * 16384 + int32_t(lv[size_t(n_in + c)]) * 128 + lv[size_t(2 * n_in + c)];
      *s++ = t;
    });
    for (int k = 0; k < 3; ++k) {
      l.q[k] = q.data() + (i * 3 + k) * n_in;
      rows16_q4_x_order(lv.data() + k * n_in, n_in, q.data() + (i * 3 + k) * n_in);
    }
    l.sx = sx.data() + i * n_seg;
  }
  const Levels* xl = xs.data();  // (the thread_local vectors are this thread's: the team reads them through pointers)
  const bool zeros = !w.zeros.empty();
  rows16_for_row_blocks(w, m, 1, n_threads, kPrefetchBytes, [&](int64_t rb, int64_t i, int64_t, bool pf) {
    if (zeros) row_block<true>(w, ng, gs, rb, xl[i], y + i * w.n_out, pf);
    else row_block<false>(w, ng, gs, rb, xl[i], y + i * w.n_out, pf);
  });
  return true;
}

}  // namespace tp::cpu::detail
