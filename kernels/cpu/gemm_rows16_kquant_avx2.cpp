// GGUF Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (the K-quants of llama.cpp's Q2_K, Q3_K_M, Q4_K_M and Q5_K_M mixes) in GEMM
// form on AVX2 (rows16.h rows16_avx2_k_linear; the layouts: common/rows16_layout.h Rows16) — Q4_K's and Q6_K's decode
// and prefill on CPUs without AVX-512 VNNI (AMD Zen 1-3, Intel before Ice Lake), Q5_K's, Q2_K's and Q3_K's on every CPU
// with AVX2 (they have no other SIMD kernel). x is Q8_K as the file layout's kernels quantize it (gemm_gguf.h: int8 a
// 256-column block, d F32, Σq a 16 columns). Per 8-column chunk of a block of 16 weight rows one 64-byte line holds
// rows 0-7 in its first 32 bytes and rows 8-15 in the next, 4 bytes a row, and one vpmaddubsw of a half's 32 bytes
// against x's 4 bytes of those columns, broadcast, sums each row's products in its own two int16 lanes (as
// gemm_rows16_avx2.cpp's Q4_0): no horizontal sums. A vpmaddwd by the rows' scale in both int16 lanes of the row's
// dword then makes sc · Σ q q_x in one int32 lane a row.
//   Q4_K (x = d sc q − dmin m a 32-column sub-block, q 4 bits): codes as Q4_0's (columns 0, 4, 1, 5 of a chunk in the
//   low nibbles, 2, 6, 3, 7 in the high ones; x permuted once a call, rows16_q4_x_order); a sub-block's 4 chunks add
//   in int16 (≤ 4 · 2 · 2 · 15 · 127 = 30480), × sc into the block's int32 total; the mins' Σ m_s Σq_x (Σq_x of
//   sub-blocks 2p, 2p + 1 as the halves of one int32, made once a call) by 4 vpmaddwd a block.
//   Q6_K (x = d sc (q − 32) a 16-column sub-block, q 6 bits): low nibbles as Q5_0's (columns 0-3 low, 4-7 high, in
//   column order), bits 4 and 5 from the block's two planes, merged once a 32 columns into two bytes-vectors whose bit
//   pairs (2c, 2c + 1) are bits (4, 5) of chunk c's low / high columns; a chunk's int16 sums (≤ 2 · 2 · 63 · 127 =
//   32004) × sc at once; the −32 offset as 32 Σ sc_s Σq_x (pairs of sub-blocks by vpmaddwd) off the block's total.
//   Q5_K (x = d sc q − dmin m a 32-column sub-block, q 5 bits): codes as Q5_0's (low nibbles in column order, the fifth
//   bits from the sub-block's plane: rows16_q5_bytes), a sub-block's int16 sums × sc every 2 chunks (≤ 2 · 2 · 2 · 31
//   · 127 = 31496), then Q4_K's mins and float step (k4_block_step). Its integers are the portable kernel's; the float
//   operations Q4_K's (one FMA for the scales, one for the mins, where the portable kernel multiplies and adds).
//   Q2_K (x = d sc q − dmin m a 16-column sub-block, q 2 bits, sc and m 4): a line a sub-block, 4 columns a row in each
//   bit pair (q2k_block); the mins as Q6_K's offset (pairs of sub-blocks by vpmaddwd); Q5_K's float step.
//   Q3_K (x = d (sc − 32) (q − 4) a 16-column sub-block, q 3 bits): Q2_K's lines with a line of third bits a sub-block
//   (q3k_block), the int8 sc and the −4 offset as Q6_K's (int8_sc_block_step).
// The block's int32 totals are those of gemm_rows16_int8.cpp's VNNI kernels (exact integers) and the float operations
// theirs — Q4_K: fma(float(Σ), d_w d_x, tot), then −float(Σ mins) · dmin_w d_x by fnmadd; Q6_K: fma(float(Σ), d_w
// d_x, tot) — so each output has the VNNI kernel's bits, whatever m, the tiles and the threads (a row of a batch has
// the bits it has alone). (The file layout's AVX2 kernels, gemm_gguf_simd.inc tile_q4_k / tile_q6_k, sum 8 column
// lanes of a row in F32: another rounding, within the suite's kernel bound of each other.)
// Why: the file layout's tiles read a row's 144 / 210-byte blocks one row at a time and reduce across lanes (Zen 3, 1
// thread, gemm_gguf_bench 576 x 1536 from cache: Q4_K 12 GB/s, Q6_K 15.6 — compute-bound under the DRAM roofline);
// here a row block is one contiguous stream and a vector op serves 8 rows. Zen 3, 1 thread, that shape: from cache
// Q4_K 13 -> 30 GB/s, Q6_K 16 -> 23; from DRAM 10 -> 18 and 11.5 -> 18.6 (46-52% -> 83-84% of the roofline); m = 512
// 26 -> 61 and 28 -> 48 GMAC/s; SmolLM2 Q4_K_M decode 1.04-1.31x (bench/results/zen3-kquant-rows16-avx2-20261206.md).
#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/rows16_avx2.h"

namespace tp::cpu::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16_avx2.cpp)
constexpr int64_t kQ4KScaleBytes = 320;   // a block's entries of 16 rows: d, dmin, then sc | m << 8 of 8 sub-blocks
constexpr int64_t kQ6KScaleBytes = 1312;  // d (F16), sc (16 sub-blocks × 16 rows), 8 × two 64-byte planes
constexpr int64_t kQ5KScaleBytes = 832;   // Q4_K's entries, then 8 64-byte planes of the fifth bits
constexpr int64_t kQ2KScaleBytes = 320;   // d, dmin (F16), then 16 sub-blocks × 16 rows' sc | m << 4 bytes
constexpr int64_t kQ3KScaleBytes = 800;   // d (F16), int8 sc (16 sub-blocks × 16 rows), 16 32-byte third-bit lines

// Each dword's low byte in both of its int16 lanes (the row's scale as vpmaddwd's other operand): per 128-bit lane.
inline __m256i dup_low_byte(__m256i v) {
  const __m256i idx = _mm256_setr_epi8(0, -1, 0, -1, 4, -1, 4, -1, 8, -1, 8, -1, 12, -1, 12, -1,  //
                                       0, -1, 0, -1, 4, -1, 4, -1, 8, -1, 8, -1, 12, -1, 12, -1);
  return _mm256_shuffle_epi8(v, idx);
}

// Every element of a tile of accumulators (F32 totals, int32 / int16 sums) zero.
template <int NH, int MT>
inline void zero_all(__m256 (&a)[NH][MT]) {
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < MT; ++i) a[h][i] = _mm256_setzero_ps();
}
template <int NH, int MT>
inline void zero_all(__m256i (&a)[NH][MT]) {
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < MT; ++i) a[h][i] = _mm256_setzero_si256();
}

// A block's n scale bytes at e, software-prefetched 4 blocks ahead.
inline void prefetch_scales(const uint8_t* e, int64_t n) {
  for (int64_t k = 0; k < n; k += 64) prefetch_weights(e + k + 4 * n);
}

// Rows 8 h .. 8 h + 7's 16-bit entries at p (8 of them) as dwords: entry r in dword r's low 16 bits.
inline __m256i entries8(const uint8_t* p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// MT rows of Q8_K x from row i0: their q (from q: Q8_K's own or its copy in the words' order), d a 256 columns and Σq a
// 16 columns.
template <int MT>
struct XRows {
  const int8_t* q[MT];
  const float* d[MT];
  const int16_t* bs[MT];
  XRows(const GgufActs& a, const int8_t* q0, int64_t i0) {
    const int64_t n_in = a.n_in;
    for (int i = 0; i < MT; ++i) {
      q[i] = q0 + (i0 + i) * n_in;
      d[i] = a.d.data() + (i0 + i) * (n_in / 256);
      bs[i] = a.bsums.data() + (i0 + i) * (n_in / 16);
    }
  }
};

// The totals of halves H0 .. H0 + NH − 1 of row block rb (tot[h][i]: rows 16 rb + 8 (H0 + h) .. + 7 against row i of
// x) into y[i · n_out + ..], the rows from n_out on left out.
template <int MT, int H0, int NH>
inline void store_halves(const __m256 (&tot)[NH][MT], int64_t rb, int64_t n_out, float* y) {
#pragma GCC unroll 2
  for (int h = 0; h < NH; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) rows16_store8(tot[h][i], rb * 16 + (H0 + h) * 8, n_out, y + i * n_out);
}

// A block's float step with scales and mins (Q4_K, Q5_K, Q2_K): tot + float(it) · (d_w d_x) − float(mt) · (dmin_w d_x),
// it the block's Σ_s sc_s Σ q q_x, mt its Σ_s m_s Σq_x.
inline __m256 scale_min_step(__m256 tot, __m256i it, __m256i mt, __m256 dw, __m256 dmin, float dx) {
  const __m256 d = _mm256_set1_ps(dx);
  tot = _mm256_fmadd_ps(_mm256_cvtepi32_ps(it), _mm256_mul_ps(dw, d), tot);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mt), _mm256_mul_ps(dmin, d), tot);
}

// Q4_K's and Q5_K's step at the end of block b (its 16 rows' entries at e: d, dmin, sc | m << 8): the mins' Σ m_s Σq_x
// from sxp (per 256 columns of each row of x, 4 int32, each two sub-blocks' Σq as its int16 halves), then tot +=
// float(it) · (d_w d_x) and −= float(Σ mins) · (dmin_w d_x) for halves H0 .. H0 + NH − 1 of MT rows of x from row i0.
template <int MT, int H0, int NH>
inline void k4_block_step(const uint8_t* e, const __m256i (&it)[NH][MT], const int32_t* sxp, const float* const* xd,
                          int64_t i0, int64_t nb, int64_t b, __m256 (&tot)[NH][MT]) {
#pragma GCC unroll 2
  for (int h = 0; h < NH; ++h) {
    const int64_t ho = (H0 + h) * 16;
    __m256i mp[4];  // dword r: (m of sub-block 2p, m of 2p + 1) of row 8 h + r
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m128i s0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + (2 + 2 * p) * 32 + ho));
      const __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + (3 + 2 * p) * 32 + ho));
      mp[p] = _mm256_srli_epi16(_mm256_set_m128i(_mm_unpackhi_epi16(s0, s1), _mm_unpacklo_epi16(s0, s1)), 8);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + ho)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + ho)));
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      const int32_t* s = sxp + ((i0 + i) * nb + b) * 4;
      const __m256i mt = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(mp[0], _mm256_set1_epi32(s[0])),
                                                           _mm256_madd_epi16(mp[1], _mm256_set1_epi32(s[1]))),
                                          _mm256_add_epi32(_mm256_madd_epi16(mp[2], _mm256_set1_epi32(s[2])),
                                                           _mm256_madd_epi16(mp[3], _mm256_set1_epi32(s[3]))));
      tot[h][i] = scale_min_step(tot[h][i], it[h][i], mt, dw, dmin, xd[i][b]);
    }
  }
}

// Row block rb's halves H0 .. H0 + NH − 1 (rows 8 h .. 8 h + 7) of Q4_K against MT rows of x from row i0 (xperm: Q8_K's
// q in the words' column order; sxp: per 256 columns 4 int32, each two sub-blocks' Σq as its int16 halves): y[i ·
// n_out + 16 rb + 8 h + r], the rows past n_out left out.
template <int MT, int H0, int NH>
void q4k_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, const int32_t* sxp,
               int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * kQ4KScaleBytes;
  const XRows<MT> xr(a, xperm, i0);
  const int8_t* const* xq = xr.q;
  const float* const* xd = xr.d;
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  __m256 tot[NH][MT];
  zero_all(tot);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * kQ4KScaleBytes;
    if (prefetch) prefetch_scales(e, kQ4KScaleBytes);
    __m256i it[NH][MT];
    zero_all(it);
    for (int64_t sub = 0; sub < 8; ++sub) {
      const uint8_t* p = wd + (b * 32 + sub * 4) * 64;
      const int64_t col = b * 256 + sub * 32;
      __m256i acc[NH][MT];
      zero_all(acc);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
        __m256i q0[NH], q1[NH];
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 64 + (H0 + h) * 32));
          q0[h] = _mm256_and_si256(wv, lo4);
          q1[h] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), lo4);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const __m256i x0 = rows16_bcast4(xq[i] + col + c * 8), x1 = rows16_bcast4(xq[i] + col + c * 8 + 4);
#pragma GCC unroll 2
          for (int h = 0; h < NH; ++h)
            acc[h][i] = _mm256_add_epi16(
                acc[h][i], _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1)));
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h) {
        const __m256i sc = dup_low_byte(entries8(e + (2 + sub) * 32 + (H0 + h) * 16));
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) it[h][i] = _mm256_add_epi32(it[h][i], _mm256_madd_epi16(acc[h][i], sc));
      }
    }
    k4_block_step<MT, H0, NH>(e, it, sxp, xd, i0, nb, b, tot);
  }
  store_halves<MT, H0, NH>(tot, rb, w.n_out, y);
}

// Q5_K row block rb's halves H0 .. H0 + NH − 1 (rows 8 h .. 8 h + 7) against MT rows of x from row i0 (Q8_K, column
// order; sxp as Q4_K's): its codes as Q5_0's with the fifth bits from the sub-block's plane (rows16_q5_bytes), a
// sub-block's int16 sums widened × sc every 2 chunks (≤ 2 · 2 · 2 · 31 · 127 = 31496), then Q4_K's block step.
// y[i · n_out + 16 rb + 8 h + r], the rows past n_out left out.
template <int MT, int H0, int NH>
void q5k_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int32_t* sxp, int64_t i0, float* y,
               bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * kQ5KScaleBytes;
  const XRows<MT> xr(a, a.q.data(), i0);
  const int8_t* const* xq = xr.q;
  const float* const* xd = xr.d;
  __m256 tot[NH][MT];
  zero_all(tot);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * kQ5KScaleBytes;
    if (prefetch) prefetch_scales(e, kQ5KScaleBytes);
    __m256i it[NH][MT];
    zero_all(it);
    for (int64_t sub = 0; sub < 8; ++sub) {
      const uint8_t* p = wd + (b * 32 + sub * 4) * 64;
      const int64_t col = b * 256 + sub * 32;
      __m256i hp[NH], sc[NH], acc[NH][MT];
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h) {
        hp[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + kQ4KScaleBytes + sub * 64 + (H0 + h) * 32));
        sc[h] = dup_low_byte(entries8(e + (2 + sub) * 32 + (H0 + h) * 16));
        for (int i = 0; i < MT; ++i) acc[h][i] = _mm256_setzero_si256();
      }
      const auto chunk = [&]<int C>() {
        if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
        __m256i q0[NH], q1[NH];
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + C * 64 + (H0 + h) * 32));
          q0[h] = rows16_q5_bytes<C, 0>(wv, hp[h]);
          q1[h] = rows16_q5_bytes<C, 1>(wv, hp[h]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const __m256i x0 = rows16_bcast4(xq[i] + col + C * 8), x1 = rows16_bcast4(xq[i] + col + C * 8 + 4);
#pragma GCC unroll 2
          for (int h = 0; h < NH; ++h) {
            acc[h][i] = _mm256_add_epi16(
                acc[h][i], _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1)));
            if constexpr (C % 2 == 1) {  // widen: 2 chunks of 5-bit codes fill the int16 headroom
              it[h][i] = _mm256_add_epi32(it[h][i], _mm256_madd_epi16(acc[h][i], sc[h]));
              acc[h][i] = _mm256_setzero_si256();
            }
          }
        }
      };
      chunk.template operator()<0>();
      chunk.template operator()<1>();
      chunk.template operator()<2>();
      chunk.template operator()<3>();
    }
    k4_block_step<MT, H0, NH>(e, it, sxp, xd, i0, nb, b, tot);
  }
  store_halves<MT, H0, NH>(tot, rb, w.n_out, y);
}

// One 16-column sub-block of Q2_K / Q3_K: its 4 code vectors a half (q[h][k]: the rows' columns 4k .. 4k + 3, unsigned)
// against x's 4 bytes of those columns, broadcast, summed in int16 by 4 vpmaddubsw, then × the rows' scales sc[h] (in
// both int16 lanes of each dword) by vpmaddwd into it[h][i], for MT rows of x (xq, from column col).
template <int MT, int NH>
inline void sub_block_4x4(const __m256i (&q)[NH][4], const __m256i (&sc)[NH], const int8_t* const* xq, int64_t col,
                          __m256i (&it)[NH][MT]) {
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    __m256i x[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) x[k] = rows16_bcast4(xq[i] + col + 4 * k);
#pragma GCC unroll 2
    for (int h = 0; h < NH; ++h) {
      const __m256i acc =
          _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q[h][0], x[0]), _mm256_maddubs_epi16(q[h][1], x[1])),
                           _mm256_add_epi16(_mm256_maddubs_epi16(q[h][2], x[2]), _mm256_maddubs_epi16(q[h][3], x[3])));
      it[h][i] = _mm256_add_epi32(it[h][i], _mm256_madd_epi16(acc, sc[h]));
    }
  }
}

// Q2_K row block rb's halves H0 .. H0 + NH − 1 (rows 8 h .. 8 h + 7) against MT rows of x from row i0 (Q8_K, column
// order): per 16-column sub-block one line (byte 4i + j, bits 2k, 2k + 1: row i's column 4k + j), its 4 code vectors
// by shifts, 4 vpmaddubsw against x's 4 bytes of those columns (int16 ≤ 4 · 2 · 3 · 127 = 3048) × sc by vpmaddwd into
// the block's int32 total; the mins Σ_s m_s Σq_x(s) by pairs of sub-blocks (as Q6_K's offset); then the scale-min step.
// y[i · n_out + 16 rb + 8 h + r], the rows past n_out left out.
template <int MT, int H0, int NH>
void q2k_block(const PackedWeight& w, int64_t rb, const GgufActs& a, int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 16) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * kQ2KScaleBytes;
  const XRows<MT> xr(a, a.q.data(), i0);
  const int8_t* const* xq = xr.q;
  const float* const* xd = xr.d;
  const int16_t* const* xb = xr.bs;
  const __m256i lo2 = _mm256_set1_epi8(3), lo4 = _mm256_set1_epi32(15);
  __m256 tot[NH][MT];
  zero_all(tot);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * kQ2KScaleBytes;
    if (prefetch) prefetch_scales(e, kQ2KScaleBytes);
    __m256i it[NH][MT];
    zero_all(it);
#pragma GCC unroll 2
    for (int64_t s = 0; s < 16; ++s) {
      const uint8_t* p = wd + (b * 16 + s) * 64;
      const int64_t col = b * 256 + s * 16;
      if (prefetch) prefetch_weights(p + kPrefetchBytes);
      __m256i q[NH][4], sc[NH];
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (H0 + h) * 32));
        q[h][0] = _mm256_and_si256(wv, lo2);
        q[h][1] = _mm256_and_si256(_mm256_srli_epi16(wv, 2), lo2);
        q[h][2] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), lo2);
        q[h][3] = _mm256_and_si256(_mm256_srli_epi16(wv, 6), lo2);
        const __m256i s32 = _mm256_and_si256(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + 64 + 16 * s + (H0 + h) * 8))),
            lo4);
        sc[h] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));  // the row's sc in both int16 lanes
      }
      sub_block_4x4<MT, NH>(q, sc, xq, col, it);
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; ++h) {
      __m256i mt[MT];  // Σ_s m_s Σq_x(s): sub-blocks in pairs (m_s, m_s+1 as a dword's int16 lanes)
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) mt[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int s = 0; s < 16; s += 2) {
        const __m128i s0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + 64 + s * 16 + (H0 + h) * 8));
        const __m128i s1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + 64 + (s + 1) * 16 + (H0 + h) * 8));
        const __m256i mp = _mm256_srli_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s0, s1)), 4);
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          int32_t xs;
          std::memcpy(&xs, xb[i] + b * 16 + s, 4);
          mt[i] = _mm256_add_epi32(mt[i], _mm256_madd_epi16(mp, _mm256_set1_epi32(xs)));
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + (H0 + h) * 16)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + (H0 + h) * 16)));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) tot[h][i] = scale_min_step(tot[h][i], it[h][i], mt[i], dw, dmin, xd[i][b]);
    }
  }
  store_halves<MT, H0, NH>(tot, rb, w.n_out, y);
}

// 8 rows' int8 scales at p (Q6_K's, Q3_K's) as dwords, each row's in both int16 lanes of its dword (vpmaddwd's other
// operand against its int16 sums).
inline __m256i int8_sc_dwords(const uint8_t* p) {
  return _mm256_shuffle_epi8(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
                             _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4,
                                              5, 8, 9, 8, 9, 12, 13, 12, 13));
}

// Q6_K's and Q3_K's step at the end of block b (its 16 rows' F16 d at e, their int8 sc of 16 sub-blocks at e + 32 + 16
// s): the codes' offset 2^kShift (Q6_K 32, Q3_K 4) as 2^kShift Σ_s sc_s Σq_x(s) (sub-blocks in pairs: sc_s, sc_s+1 as a
// dword's int16 lanes; x's two adjacent int16 sums one dword) off it, then tot += float(it − offset) · (d_w d_x), for
// halves H0 .. H0 + NH − 1 of MT rows of x.
template <int MT, int H0, int NH, int kShift>
inline void int8_sc_block_step(const uint8_t* e, const __m256i (&it)[NH][MT], const int16_t* const* xb,
                               const float* const* xd, int64_t b, __m256 (&tot)[NH][MT]) {
#pragma GCC unroll 2
  for (int h = 0; h < NH; ++h) {
    __m256i off[MT];
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) off[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 16; s += 2) {
      const __m128i s0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + 32 + s * 16 + (H0 + h) * 8));
      const __m128i s1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + 32 + (s + 1) * 16 + (H0 + h) * 8));
      const __m256i sp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        int32_t xs;
        std::memcpy(&xs, xb[i] + b * 16 + s, 4);
        off[i] = _mm256_add_epi32(off[i], _mm256_madd_epi16(sp, _mm256_set1_epi32(xs)));
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + (H0 + h) * 16)));
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      const __m256i total = _mm256_sub_epi32(it[h][i], _mm256_slli_epi32(off[i], kShift));
      tot[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw, _mm256_set1_ps(xd[i][b])), tot[h][i]);
    }
  }
}

// Q3_K row block rb's halves H0 .. H0 + NH − 1 (rows 8 h .. 8 h + 7) against MT rows of x from row i0 (Q8_K, column
// order): per 16-column sub-block Q2_K's line of the codes' low 2 bits and a 32-byte line of their third bits (half h's
// in nibble h of byte 4i + j: bit k for column 4k + j), merged into 4 vectors of the codes q in [0, 7]; 4 vpmaddubsw
// (int16 ≤ 4 · 2 · 7 · 127 = 7112) × the int8 sc by vpmaddwd into the block's int32 total; then Q6_K's step with the
// offset 4. y[i · n_out + 16 rb + 8 h + r], the rows past n_out left out.
template <int MT, int H0, int NH>
void q3k_block(const PackedWeight& w, int64_t rb, const GgufActs& a, int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 16) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * kQ3KScaleBytes;
  const XRows<MT> xr(a, a.q.data(), i0);
  const int8_t* const* xq = xr.q;
  const float* const* xd = xr.d;
  const int16_t* const* xb = xr.bs;
  const __m256i lo2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), lo4 = _mm256_set1_epi8(0x0f);
  __m256 tot[NH][MT];
  zero_all(tot);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * kQ3KScaleBytes;
    if (prefetch) prefetch_scales(e, kQ3KScaleBytes);
    __m256i it[NH][MT];
    zero_all(it);
#pragma GCC unroll 2
    for (int64_t s = 0; s < 16; ++s) {
      const uint8_t* p = wd + (b * 16 + s) * 64;
      const int64_t col = b * 256 + s * 16;
      if (prefetch) prefetch_weights(p + kPrefetchBytes);
      const __m256i hl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + 288 + 32 * s));
      __m256i q[NH][4], sc[NH];
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (H0 + h) * 32));
        const __m256i hn = H0 + h == 0 ? _mm256_and_si256(hl, lo4) : _mm256_and_si256(_mm256_srli_epi16(hl, 4), lo4);
        q[h][0] = _mm256_or_si256(_mm256_and_si256(wv, lo2), _mm256_and_si256(_mm256_slli_epi16(hn, 2), four));
        q[h][1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wv, 2), lo2),
                                  _mm256_and_si256(_mm256_slli_epi16(hn, 1), four));
        q[h][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wv, 4), lo2), _mm256_and_si256(hn, four));
        q[h][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wv, 6), lo2),
                                  _mm256_and_si256(_mm256_srli_epi16(hn, 1), four));
        sc[h] = int8_sc_dwords(e + 32 + 16 * s + (H0 + h) * 8);
      }
      sub_block_4x4<MT, NH>(q, sc, xq, col, it);
    }
    int8_sc_block_step<MT, H0, NH, 2>(e, it, xb, xd, b, tot);
  }
  store_halves<MT, H0, NH>(tot, rb, w.n_out, y);
}

// Q6_K's bit planes of a half's 32 columns merged: x (bit 2k: plane 0's bit 2k, bit 2k + 1: plane 1's) serves the
// chunks' low columns, y (the planes' odd bits alike) their high ones; chunk c's bits sit at 2c, 2c + 1 of each.
struct Q6Planes {
  __m256i x, y;
};
inline Q6Planes q6_planes(const uint8_t* p0, const uint8_t* p1) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1));
  const __m256i even = _mm256_set1_epi8(0x55), odd = _mm256_set1_epi8(char(0xaa));
  return {_mm256_or_si256(_mm256_and_si256(a, even), _mm256_slli_epi16(_mm256_and_si256(b, even), 1)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 1), even), _mm256_and_si256(b, odd))};
}

// Bits 2C, 2C + 1 of each byte of v moved to bits 4, 5 (the rest cleared; 16-bit shifts: what crosses into a
// neighbour byte lands outside bits 4, 5).
template <int C>
inline __m256i q6_high_bits(__m256i v) {
  const __m256i m = _mm256_set1_epi8(0x30);
  if constexpr (C < 2)
    return _mm256_and_si256(_mm256_slli_epi16(v, 4 - 2 * C), m);
  else if constexpr (C == 2)
    return _mm256_and_si256(v, m);
  else
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * C - 4), m);
}

// Row block rb's halves H0 .. H0 + NH − 1 (rows 8 h .. 8 h + 7) of Q6_K against MT rows of x from row i0 (Q8_K, column
// order): y[i · n_out + 16 rb + 8 h + r], the rows past n_out left out.
template <int MT, int H0, int NH>
void q6k_block(const PackedWeight& w, int64_t rb, const GgufActs& a, int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * kQ6KScaleBytes;
  const XRows<MT> xr(a, a.q.data(), i0);
  const int8_t* const* xq = xr.q;
  const float* const* xd = xr.d;
  const int16_t* const* xb = xr.bs;
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  __m256 tot[NH][MT];
  zero_all(tot);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * kQ6KScaleBytes;
    if (prefetch) prefetch_scales(e, kQ6KScaleBytes);
    __m256i it[NH][MT];
    zero_all(it);
    for (int64_t g = 0; g < 8; ++g) {  // 32-column groups: two 16-column sub-blocks of 2 chunks
      const uint8_t* p = wd + (b * 32 + g * 4) * 64;
      const int64_t col = b * 256 + g * 32;
      Q6Planes pl[NH];
      __m256i sc[NH];
#pragma GCC unroll 2
      for (int h = 0; h < NH; ++h)
        pl[h] = q6_planes(e + 288 + g * 128 + (H0 + h) * 32, e + 288 + g * 128 + 64 + (H0 + h) * 32);
      const auto chunk = [&]<int C>() {
        if constexpr (C % 2 == 0)  // sub-block 2g + C / 2: the rows' int8 sc in both int16 lanes of their dwords
#pragma GCC unroll 2
          for (int h = 0; h < NH; ++h) sc[h] = int8_sc_dwords(e + 32 + (2 * g + C / 2) * 16 + (H0 + h) * 8);
        if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
        __m256i q0[NH], q1[NH];
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + C * 64 + (H0 + h) * 32));
          q0[h] = _mm256_or_si256(_mm256_and_si256(wv, lo4), q6_high_bits<C>(pl[h].x));
          q1[h] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wv, 4), lo4), q6_high_bits<C>(pl[h].y));
        }
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const __m256i x0 = rows16_bcast4(xq[i] + col + C * 8), x1 = rows16_bcast4(xq[i] + col + C * 8 + 4);
#pragma GCC unroll 2
          for (int h = 0; h < NH; ++h)
            it[h][i] = _mm256_add_epi32(it[h][i], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0),
                                                                                     _mm256_maddubs_epi16(q1[h], x1)),
                                                                    sc[h]));
        }
      };
      chunk.template operator()<0>();
      chunk.template operator()<1>();
      chunk.template operator()<2>();
      chunk.template operator()<3>();
    }
    int8_sc_block_step<MT, H0, NH, 5>(e, it, xb, xd, b, tot);
  }
  store_halves<MT, H0, NH>(tot, rb, w.n_out, y);
}

// Rows of x a pass beyond the first (prefill): one half of a row block at a time.
constexpr int kTileM = 3;
// Q6_K decode (m = 1) with both halves a pass, each line read once (else one half a pass, as the prefill): Zen 3, 1
// thread, 576 x 1536, alternated 4 times on a loaded machine, GB/s from cache / DRAM, medians 14.9 / 11.7 -> 15.8
// / 13.2.
constexpr bool kQ6KBothHalves = true;

// The m rows of x in tiles of up to kTileM rows: f.template operator()<MT>(i0) for each tile.
template <class F>
void tiles(int64_t m, F&& f) {
  int64_t i0 = 0;
  for (; i0 + kTileM <= m; i0 += kTileM) f.template operator()<kTileM>(i0);
  if (m - i0 == 2) f.template operator()<2>(i0);
  if (m - i0 == 1) f.template operator()<1>(i0);
}

}  // namespace
#pragma GCC pop_options

bool rows16_avx2_k_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool k4 = w.format == WeightFormat::GgufQ4_K, k5 = w.format == WeightFormat::GgufQ5_K;
  const bool k2 = w.format == WeightFormat::GgufQ2_K, k3 = w.format == WeightFormat::GgufQ3_K;
  if ((!k4 && !k5 && !k2 && !k3 && w.format != WeightFormat::GgufQ6_K) || w.act_bf16 ||
      w.rows_layout != RowsLayout::Rows16 || !gguf_kernel_available(GgufKernel::Avx2))
    return false;
  thread_local GgufActs a;
  quantize_gguf_acts(x, m, w.n_in, GgufActType::Q8_K, &a);
  const int64_t nb = w.n_in / 256;
  thread_local std::vector<int8_t> xperm;  // Q4_K: q in the words' column order
  thread_local std::vector<int32_t> sxp;   // Q4_K / Q5_K: per block 4 pairs of sub-blocks' Σq (low, high int16)
  if (k4) {
    xperm.resize(size_t(m * w.n_in));
    rows16_q4_x_order(a.q.data(), m * w.n_in, xperm.data());
  }
  if (k4 || k5) {
    sxp.resize(size_t(m * nb * 4));
    for (int64_t k = 0; k < m * nb * 4; ++k) {
      const int16_t* s = a.bsums.data() + 4 * k;
      sxp[size_t(k)] = int32_t(uint32_t(uint16_t(s[0] + s[1])) | uint32_t(uint16_t(s[2] + s[3])) << 16);
    }
  }
  const GgufActs& acts = a;
  const int8_t* xp = xperm.data();
  const int32_t* sp = sxp.data();
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in * (k2 || k3 ? 4 : 8);  // a row block's codes (Q2_K, Q3_K: 2 bits a column)
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb) {
      if (k3 && m == 1) {
        q3k_block<1, 0, 2>(w, rb, acts, 0, y, true);
      } else if (k3) {
        tiles(m, [&]<int MT>(int64_t i0) { q3k_block<MT, 0, 1>(w, rb, acts, i0, y + i0 * w.n_out, i0 == 0); });
        tiles(m, [&]<int MT>(int64_t i0) { q3k_block<MT, 1, 1>(w, rb, acts, i0, y + i0 * w.n_out, false); });
      } else if (k2 && m == 1) {
        q2k_block<1, 0, 2>(w, rb, acts, 0, y, true);
      } else if (k2) {
        tiles(m, [&]<int MT>(int64_t i0) { q2k_block<MT, 0, 1>(w, rb, acts, i0, y + i0 * w.n_out, i0 == 0); });
        tiles(m, [&]<int MT>(int64_t i0) { q2k_block<MT, 1, 1>(w, rb, acts, i0, y + i0 * w.n_out, false); });
      } else if (k5 && m == 1) {
        q5k_block<1, 0, 2>(w, rb, acts, sp, 0, y, true);
      } else if (k5) {
        tiles(m, [&]<int MT>(int64_t i0) { q5k_block<MT, 0, 1>(w, rb, acts, sp, i0, y + i0 * w.n_out, i0 == 0); });
        tiles(m, [&]<int MT>(int64_t i0) { q5k_block<MT, 1, 1>(w, rb, acts, sp, i0, y + i0 * w.n_out, false); });
      } else if (k4 && m == 1) {  // both halves a pass: each line read once
        q4k_block<1, 0, 2>(w, rb, acts, xp, sp, 0, y, true);
      } else if (k4) {
        tiles(m, [&]<int MT>(int64_t i0) { q4k_block<MT, 0, 1>(w, rb, acts, xp, sp, i0, y + i0 * w.n_out, i0 == 0); });
        tiles(m, [&]<int MT>(int64_t i0) { q4k_block<MT, 1, 1>(w, rb, acts, xp, sp, i0, y + i0 * w.n_out, false); });
      } else if (m == 1 && kQ6KBothHalves) {
        q6k_block<1, 0, 2>(w, rb, acts, 0, y, true);
      } else {
        tiles(m, [&]<int MT>(int64_t i0) { q6k_block<MT, 0, 1>(w, rb, acts, i0, y + i0 * w.n_out, i0 == 0); });
        tiles(m, [&]<int MT>(int64_t i0) { q6k_block<MT, 1, 1>(w, rb, acts, i0, y + i0 * w.n_out, false); });
      }
    }
  }
  return true;
}

}  // namespace tp::cpu::detail
