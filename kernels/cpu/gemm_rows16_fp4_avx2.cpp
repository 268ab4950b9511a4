// MXFP4 / NVFP4 decode in GEMM form on AVX2 (packed_kernels.h rows16_fp4_avx2): E2M1 weights in Rows16
// (common/rows16_layout.h: per 16 rows and 8 columns a 64-byte line, rows 0-7 in its first 32 bytes and 8-15 in the
// next; row i's 4 bytes hold columns 0, 4, 1, 5 in their low nibbles and 2, 6, 3, 7 in the high ones; the 16 rows'
// scale bytes of each block together) against x as int8 levels per scale block (NVFP4 16 columns, MXFP4 32).
// x, per row and block b: rows16_x_levels (rows16_avx2.h), d = 2^k_b with max|x| / d in [32, 64), X = x / d ·
// 2^(7 (L − 1)) rounded, held as L int8 levels (L = 3 for F32 x: within 2⁻²⁰ of the block's largest value; L = 2
// for BF16 x, act_bf16: 2⁻¹³, the values within 2⁵ of the block's largest exact — see rows16_fp4_avx2 below).
// The codes, by one vpshufb table, as u = 2 v + 12 (v the E2M1 value: u in 0 .. 24); per chunk and half (8 rows × 8
// columns) and level two vpmaddubsw against the level's 4 bytes of those columns, broadcast, add each row's products
// into its own two int16 lanes — no horizontal sums (|lane| ≤ 4 chunks · 4 · 24 · 64 = 24576). A block's levels by
// vpmaddwd with their powers into one int32 lane a row: Σ u X (≤ 32 · 24 · 2^(7 L − 1) < 2³¹), and D = Σ u X − 12
// ΣX (ΣX: the block's sum of X, made once a row of x) = 2 Σ v X exactly; D to F32 × (the 16 rows' block scales ×
// 2^(k_b − k0), k0 the row's largest k_b) into the rows' totals (one FMA a half and block); y = total ×
// 2^(k0 − 7 (L − 1)) / 2 (NVFP4: × 2⁸ × the global scale: its E4M3 scales are read as F16s of value / 2⁸, exact).
// A zero row of x gives 0, a row with a NaN or an infinity NaN. Every row of x gets the same operations whatever m,
// the rows beside it or the threads. Scale bytes the fast conversions do not take are kept out of Rows16
// (fp4_rows16_scales_ok): such weights stay in Rows for gemm_fp4_avx2.cpp.
// Why: gemm_fp4_avx2.cpp (Rows) spends ~13 vector ops a row and 32 columns on F32 widening and 6 F32 ops on the sums,
// and a horizontal sum a row: SmolLM2 NVFP4 / MXFP4 decode ran at ~41% of the DRAM roofline on a Zen 3 core
// (bench/results/decode-quant-zen3-20261206-0245.md); here 16 rows × 32 columns take 8 loads, 40 ops for the codes,
// 16 · L vpmaddubsw and as many vpaddw, and the finish is per 16 rows: from cache and DRAM 1.7-2.2x its rate with
// F32 x, 2.3-2.9x with BF16 x (Zen 3, gemm_gguf_bench).
#include <algorithm>
#include <cmath>
#include <limits>

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

constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16_avx2.cpp)

// E2M1 code -> u = 2 v + 12: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negative (both 128-bit lanes).
inline __m256i u_table() {
  return _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12,
                          11, 10, 9, 8, 6, 4, 0);
}

// The 16 rows' block scales from their 16 bytes at sb, rows 0-7 in s[0], 8-15 in s[1]: MXFP4's E8M0 as an F32's
// exponent, NVFP4's E4M3 as an F16 of value / 2⁸ (exact; Rows16 holds no edge bytes).
template <bool kNv>
inline void block_scales(const uint8_t* sb, __m256 (&s)[2]) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb));
  if constexpr (kNv) {
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(short(0xbfff)));
    s[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    s[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  } else {
    s[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(b), 23));
    s[1] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)), 23));
  }
}

// Row block rb against MT rows of x (xr[0 .. MT), kLevels levels; MT 2 with two levels: the codes decoded once for
// both): y[i · n_out + 16 rb + r], rows past n_out left out. Each row of x gets the same operations whatever MT.
template <bool kNv, int kLevels, int MT>
void row_block(const PackedWeight& w, int64_t rb, const Rows16XRow* xr, float* y, bool prefetch) {
  constexpr int64_t bs = kNv ? 16 : 32, kChunks = bs / 8;
  const int64_t n_in = w.n_in, nb = n_in / bs;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sb = w.scale_bytes.data() + rb * nb * 16;
  const __m256i table = u_table(), ones = _mm256_set1_epi16(1), p7 = _mm256_set1_epi16(1 << 7),
                p14 = _mm256_set1_epi16(1 << 14);
  __m256 tot[MT][2];
#pragma GCC unroll 2
  for (int i = 0; i < MT; ++i) tot[i][0] = tot[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i acc[MT][2][kLevels];
    const uint8_t* p = wd + b * kChunks * 64;
#pragma GCC unroll 4
    for (int64_t c = 0; c < kChunks; ++c) {
      if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
      __m256i q0[2], q1[2];
      rows16_q4_codes(p + c * 64, q0, q1);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) q0[h] = _mm256_shuffle_epi8(table, q0[h]), q1[h] = _mm256_shuffle_epi8(table, q1[h]);
#pragma GCC unroll 2
      for (int i = 0; i < MT; ++i)
#pragma GCC unroll 3
        for (int l = 0; l < kLevels; ++l) {
          const int8_t* xq = xr[i].q[l] + b * bs + c * 8;
          const __m256i x0 = rows16_bcast4(xq), x1 = rows16_bcast4(xq + 4);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1));
            acc[i][h][l] = c == 0 ? s : _mm256_add_epi16(acc[i][h][l], s);
          }
        }
    }
    if (prefetch && b % 4 == 0) prefetch_weights(sb + b * 16 + kPrefetchBytes / 8);
    __m256 s[2];
    block_scales<kNv>(sb + b * 16, s);
#pragma GCC unroll 2
    for (int i = 0; i < MT; ++i) {
      const __m256 fb = _mm256_set1_ps(xr[i].f[b]);
      const __m256i off = _mm256_set1_epi32(12 * xr[i].sx[b]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i d;
        if constexpr (kLevels == 3)
          d = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(acc[i][h][0], p14), _mm256_madd_epi16(acc[i][h][1], p7)),
                               _mm256_madd_epi16(acc[i][h][2], ones));
        else
          d = _mm256_add_epi32(_mm256_madd_epi16(acc[i][h][0], p7), _mm256_madd_epi16(acc[i][h][1], ones));
        tot[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(d, off)), _mm256_mul_ps(s[h], fb), tot[i][h]);
      }
    }
  }
  for (int i = 0; i < MT; ++i) rows16_store_x_row(tot[i], xr[i], rb, w.n_out, y + i * w.n_out);
}

// Two levels: rows of x two at a time (the codes decoded once for both; 8 int16 accumulators fit the 16 registers),
// three: one at a time.
template <bool kNv, int kLevels>
void run(const Rows16XRow* xs, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  constexpr int kTile = kLevels == 2 ? 2 : 1;
  rows16_for_row_blocks(w, m, kTile, n_threads, kPrefetchBytes, [&](int64_t rb, int64_t i, int64_t n, bool pf) {
    if (n == 2) row_block<kNv, kLevels, 2>(w, rb, xs + i, y + i * w.n_out, pf);
    else row_block<kNv, kLevels, 1>(w, rb, xs + i, y + i * w.n_out, pf);
  });
}

}  // namespace
#pragma GCC pop_options

bool rows16_fp4_avx2(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Mxfp4 && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None ||
      w.n_in % 32 != 0 || w.rows_layout != RowsLayout::Rows16 || !cpu_has_avx2())
    return false;
  const bool nv = w.format == WeightFormat::Nvfp4;
  // The int8 levels of x: 3 (within 2⁻²⁰ of the block's largest value: the packed suite's 1e-10 of the F32 kernels) for
  // F32 activations; 2 (2⁻¹³) for BF16 ones (act_bf16: x rounded to BF16 first, 8 significant bits — the values within
  // 2⁵ of their block's largest are then held exactly, the rest within 2⁻¹³ of it), ~1.3x the rate of 3: Zen 3,
  // GEMM_BENCH_HOT=1 gemm_gguf_bench 1 24 0 nvfp4+r16,mxfp4+r16 (F32 x) built with either, alternated twice, from
  // cache GB/s NVFP4 / MXFP4 9.5-12.4 / 11.3-13.6 (3) against 15.3-16.3 / 17.4-19.1 (2); lm_head (49152 × 576, from
  // DRAM) 12.6-12.9 / 14.3-14.8 against 16.3-17.3 / 18.7-19.7.
  const int levels = w.act_bf16 ? 2 : 3;
  // u = 2 v + 12: D = 2 Σ v X; NVFP4's scales read as value / 2⁸, × its global scale
  const float unit = nv ? 128.0f * w.global_scale : 0.5f;
  const Rows16XRow* xp = rows16_x_rows(x, m, w.n_in, nv ? 16 : 32, levels, w.act_bf16, unit);
  if (nv && levels == 2) run<true, 2>(xp, m, w, y, n_threads);
  else if (nv) run<true, 3>(xp, m, w, y, n_threads);
  else if (levels == 2) run<false, 2>(xp, m, w, y, n_threads);
  else run<false, 3>(xp, m, w, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
