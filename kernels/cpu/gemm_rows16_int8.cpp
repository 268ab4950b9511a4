// GGUF Q8_0, Q5_0, Q6_K, Q4_0, Q4_1, Q4_K and IQ4_NL in GEMM form on AVX-512 VNNI (rows16.h; the layouts:
// common/rows16_layout.h Rows16). x is
// quantized as llama.cpp pairs it with Q8_0 weights (gemm_gguf.h: per row and 32-column block, q_x in [−127, 127],
// d_x rounded to F16, Σ q_x), as the file layout's kernels do. Per block of 16 weight rows and 4 columns one 64-byte
// load holds the 16 rows' bytes q_w + 128, an int32 lane a row, and one vpdpbusd against x's 4 bytes of those
// columns, broadcast, adds Σ (q_w + 128) q_x into lane r (weight row r) — no horizontal sums. A 32-column block is
// 8 such loads on two chains (even and odd chunks; one chain ran at the instruction's latency at m = 1), the first
// started at −128 Σ q_x, so their sum is Σ q_w q_x exactly (|·| ≤ 32 · 255 · 127: no overflow); converted to F32 it
// goes × d_w (the 16 rows' F16 d) · d_x into the running total by one FMA. kTileM rows of x share each load; a row's
// operations do not depend on the tile, m or the threads, so a row of a batch has the bits it has alone. The integer
// sums are those of every other Q8_0 kernel; only the F32 sum over blocks may round differently.
// Q5_0 (q in 0..31, x = d (q − 16)): a 64-byte load holds 16 rows × 8 columns of low nibbles (byte 4i + j: columns
// k0 + j and k0 + 4 + j), the block's fifth-bit plane (64 bytes beside d) bit 2c + h of byte 4i + j; per half h the
// nibbles (& 0x0f, or >> 4 first) and that bit moved to bit 4 (a 16-bit shift: bit 4 of each byte comes from the same
// byte) make the unsigned bytes q, one vpdpbusd a row of x; the chains start at −16 Σ q_x. Q6_K likewise with two
// planes (bits 4 and 5) and x as Q8_K (its Σq a 16 columns for the −32 offset); its int8 scales a 16 columns multiply
// the integer sums (q6_k_row_block). Q4_0 / Q4_1 (x = d (q − 8), d q + m) read the 4-bit formats' 16-row words as
// they are (the BF16 form's layout): row i's lane holds columns 0, 4, 1, 5 of a chunk of 8 in its bytes' low nibbles
// and 2, 6, 3, 7 in the high ones, so x's int8 is permuted once a call into that order and & 0x0f / >> 4 give the
// unsigned bytes q for two vpdpbusd; Q4_0's chains start at −8 Σ q_x, Q4_1's at 0 with m · s_x (Q8_1's s) added
// after; Q4_K's x is Q8_K (q4_k_row_block). ~1.3x the BF16 form at m = 16-64 from cache, 1.4-1.6x at m = 1
// (bench/results/zen5-kernels-20261204.md). IQ4_NL (x = d kIq4Values[q], Q4_0's layout) as Q4_0 with each nibble
// looked up by vpshufb as the unsigned byte kIq4Values[q] + 128, the chains started at −128 Σ q_x (as Q8_0's).
#include <algorithm>
#include <cstring>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/dtype.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"

namespace tp::cpu::detail {

namespace {

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2,f16c")))

constexpr int kTileM = 8;                 // rows of x a pass (as gemm_rows16.cpp)
constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16.cpp)

TP_VNNI inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Row block rb's totals for MT rows of x into y[i · n_out + 16 rb + r], the rows past n_out left out.
template <int MT>
TP_VNNI inline void store_totals(const __m512* tot, int64_t n_out, int64_t rb, float* y) {
  const int64_t r0 = rb * 16;
  const __mmask16 rows = __mmask16(_bzhi_u32(0xffff, unsigned(std::min<int64_t>(16, n_out - r0))));
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) _mm512_mask_storeu_ps(y + i * n_out + r0, rows, tot[i]);
}

// The 64 bytes q of Q5_0 codes for half h of chunk c of a block: nibbles from w, fifth bits from the plane hp.
template <int C, int H>
TP_VNNI inline __m512i q5_bytes(__m512i w, __m512i hp) {
  constexpr int s = 2 * C + H;  // the bit of hp's byte to bring to bit 4
  const __m512i nib = H ? _mm512_srli_epi16(w, 4) : w;
  const __m512i hb = _mm512_and_si512(s >= 4 ? _mm512_srli_epi16(hp, s - 4) : _mm512_slli_epi16(hp, 4 - s),
                                      _mm512_set1_epi8(0x10));
  return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x0f), 0xec);  // (nib & 0x0f) | hb
}

// Chunk C (columns 8C .. 8C + 7) of a Q5_0 block at p (its fifth-bit plane hp) against MT rows of x (xq: their int8,
// col: the block's first column): halves 0 and 1 into the chains c0, c1.
template <int C, int MT>
TP_VNNI inline void q5_chunk(const uint8_t* p, __m512i hp, const int8_t* const* xq, int64_t col, __m512i* c0, __m512i* c1,
                             bool prefetch) {
  if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
  const __m512i wv = _mm512_loadu_si512(p + C * 64);
  const __m512i q0 = q5_bytes<C, 0>(wv, hp), q1 = q5_bytes<C, 1>(wv, hp);
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    c0[i] = _mm512_dpbusd_epi32(c0[i], q0, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8)));
    c1[i] = _mm512_dpbusd_epi32(c1[i], q1, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8 + 4)));
  }
}

// IQ4_NL's values + 128 (unsigned bytes, 1 .. 241) in each 16-byte lane: vpshufb's table for its nibbles.
TP_VNNI inline __m512i iq4_nl_table() {
  alignas(16) uint8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = uint8_t(kIq4Values[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// Q4_0 / Q4_1 chunk C (8 columns) of a block at p, in the 4-bit formats' 16-row words (row i's lane: bytes 4i..4i+3
// hold columns 0, 4, 1, 5 in their low nibbles and 2, 6, 3, 7 in their high ones) against MT rows of x (xq: x with
// each 8 columns in that order, col: the block's first column) into the chains c0, c1. NL (IQ4_NL): each nibble
// looked up in nl (iq4_nl_table) first, the unsigned bytes kIq4Values[q] + 128.
template <int C, int MT, bool NL = false>
TP_VNNI inline void q4_chunk(const uint8_t* p, const int8_t* const* xq, int64_t col, __m512i* c0, __m512i* c1,
                             bool prefetch, __m512i nl = __m512i()) {
  if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
  const __m512i wv = _mm512_loadu_si512(p + C * 64), lo4 = _mm512_set1_epi8(0x0f);
  __m512i q0 = _mm512_and_si512(wv, lo4), q1 = _mm512_and_si512(_mm512_srli_epi16(wv, 4), lo4);
  if constexpr (NL) q0 = _mm512_shuffle_epi8(nl, q0), q1 = _mm512_shuffle_epi8(nl, q1);
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    c0[i] = _mm512_dpbusd_epi32(c0[i], q0, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8)));
    c1[i] = _mm512_dpbusd_epi32(c1[i], q1, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8 + 4)));
  }
}

enum Kind { kQ8_0, kQ5_0, kQ4_0, kQ4_1, kIq4Nl };

// Row block rb against MT rows of x from row i0 of a (Q8_0 activations; Q8_1 for Q4_1; Q4_0 / Q4_1 / IQ4_NL: xq the
// acts' q in the words' column order, q4_chunk): y[i · n_out + 16 rb + r].
template <int K, int MT>
TP_VNNI void row_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, int64_t i0, float* y,
                       bool prefetch) {
  constexpr bool Q5 = K == kQ5_0, NL = K == kIq4Nl, Q4 = K == kQ4_0 || K == kQ4_1 || NL;
  const int64_t n_in = w.n_in, nb = n_in / 32, chunks = Q5 || Q4 ? n_in / 8 : n_in / 4;
  const uint8_t* wd = w.data.data() + rb * chunks * 64;
  // scale bytes a block of 16 rows (Q5_0: d, then the fifth bits; Q4_1: d, then m)
  constexpr int64_t sbb = Q5 ? 96 : K == kQ4_1 ? 64 : 32;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * sbb;
  const int8_t* xq[MT];
  const float* xd[MT];
  const int32_t* xs[MT];
  const float* xm[MT];  // Q4_1: s of each block (llama.cpp's d Σq, F16)
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    xq[i] = (Q4 ? xperm : a.q.data()) + (i0 + i) * n_in;
    xd[i] = a.d.data() + (i0 + i) * nb;
    xs[i] = a.qsum.data() + (i0 + i) * nb;
    xm[i] = K == kQ4_1 ? a.s.data() + (i0 + i) * nb : nullptr;
  }
  const __m512i nl = NL ? iq4_nl_table() : __m512i();  // IQ4_NL: the codes' table, once a row block
  __m512 tot[MT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * sbb;
    // Q8_0: d 32 bytes a block, codes 512 (every other block); Q5_0: 96 bytes, codes 256 (every block); Q4_0 / Q4_1:
    // 32 / 64 bytes, codes 256 (every other block / every block)
    if (prefetch && (Q5 || K == kQ4_1 || b % 2 == 0))
      prefetch_weights(e + (Q5 ? kPrefetchBytes * 3 / 8 : K == kQ4_1 ? kPrefetchBytes / 4 : Q4 ? kPrefetchBytes / 8
                                                                                             : kPrefetchBytes / 16));
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e)));
    __m512i c0[MT], c1[MT];
    constexpr int kOffset = Q5 ? -16 : K == kQ4_0 ? -8 : K == kQ4_1 ? 0 : -128;  // q_w's offset: the chains start there
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      c0[i] = _mm512_set1_epi32(kOffset * xs[i][b]);
      c1[i] = _mm512_setzero_si512();
    }
    const uint8_t* p = wd + b * (Q5 || Q4 ? 4 : 8) * 64;
    if constexpr (Q4) {  // 4 chunks of 8 columns
      q4_chunk<0, MT, NL>(p, xq, b * 32, c0, c1, prefetch, nl);
      q4_chunk<1, MT, NL>(p, xq, b * 32, c0, c1, prefetch, nl);
      q4_chunk<2, MT, NL>(p, xq, b * 32, c0, c1, prefetch, nl);
      q4_chunk<3, MT, NL>(p, xq, b * 32, c0, c1, prefetch, nl);
    } else if constexpr (Q5) {  // 4 chunks of 8 columns: halves 0 (columns 8c + 0..3) and 1 (8c + 4..7)
      const __m512i hp = _mm512_loadu_si512(e + 32);
      q5_chunk<0, MT>(p, hp, xq, b * 32, c0, c1, prefetch);
      q5_chunk<1, MT>(p, hp, xq, b * 32, c0, c1, prefetch);
      q5_chunk<2, MT>(p, hp, xq, b * 32, c0, c1, prefetch);
      q5_chunk<3, MT>(p, hp, xq, b * 32, c0, c1, prefetch);
    } else {
#pragma GCC unroll 4
      for (int ch = 0; ch < 8; ch += 2) {
        if (prefetch) {
          prefetch_weights(p + ch * 64 + kPrefetchBytes);
          prefetch_weights(p + ch * 64 + 64 + kPrefetchBytes);
        }
        const __m512i w0 = _mm512_loadu_si512(p + ch * 64), w1 = _mm512_loadu_si512(p + ch * 64 + 64);
#pragma GCC unroll 8
        for (int i = 0; i < MT; ++i) {
          c0[i] = _mm512_dpbusd_epi32(c0[i], w0, _mm512_set1_epi32(load_i32(xq[i] + b * 32 + ch * 4)));
          c1[i] = _mm512_dpbusd_epi32(c1[i], w1, _mm512_set1_epi32(load_i32(xq[i] + b * 32 + ch * 4 + 4)));
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i)
      tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(c0[i], c1[i])), _mm512_mul_ps(dw, _mm512_set1_ps(xd[i][b])),
                               tot[i]);
    if constexpr (K == kQ4_1) {  // + m · s, s the x block's d Σq
      const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + 32)));
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) tot[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xm[i][b]), tot[i]);
    }
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

// MT rows of Q8_K acts from row i0 (x [·, n_in]): their q from q_base (the acts' q, or a copy in another column
// order), their d (one a 256-column block) and Σq of each 16 columns.
template <int MT>
TP_VNNI inline void q8_k_rows(const GgufActs& a, const int8_t* q_base, int64_t i0, int64_t n_in, const int8_t** xq,
                              const float** xd, const int16_t** xs) {
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    xq[i] = q_base + (i0 + i) * n_in;
    xd[i] = a.d.data() + (i0 + i) * (n_in / 256);
    xs[i] = a.bsums.data() + (i0 + i) * (n_in / 16);
  }
}

// Q4_K row block rb against MT rows of x from row i0 (Q8_K activations: int8 a 256-column block, d F32, Σq a 16;
// xperm: their q in the words' column order, q4_chunk): per 32-column sub-block s the chains' sum (Σ q q_x) × the
// rows' sc_s and m_s × Σ q_x of the sub-block go into two int32 totals of the block (exact: |·| < 2^25), then
// d_w d_x × the first − dmin_w d_x × the second into the F32 total, as llama.cpp sums Q4_K against Q8_K.
template <int MT>
TP_VNNI void q4_k_row_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, int64_t i0,
                            float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * 320;  // 10 entries of 16 rows a block: d, dmin, sc | m << 8
  const int8_t* xq[MT];
  const float* xd[MT];
  const int16_t* xs[MT];
  q8_k_rows<MT>(a, xperm, i0, n_in, xq, xd, xs);
  __m512 tot[MT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * 320;
    if (prefetch)
      for (int k = 0; k < 320; k += 64) prefetch_weights(e + k + 4 * 320);
    __m512i it[MT], mt[MT];
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) it[i] = mt[i] = _mm512_setzero_si512();
    for (int64_t sub = 0; sub < 8; ++sub) {
      const uint8_t* p = wd + (b * 32 + sub * 4) * 64;
      const int64_t col = b * 256 + sub * 32;
      const __m512i scm = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + (2 + sub) * 32)));
      const __m512i sc = _mm512_and_si512(scm, _mm512_set1_epi32(0xff)), mn = _mm512_srli_epi32(scm, 8);
      __m512i c0[MT], c1[MT];
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) c0[i] = c1[i] = _mm512_setzero_si512();
      q4_chunk<0, MT>(p, xq, col, c0, c1, prefetch);
      q4_chunk<1, MT>(p, xq, col, c0, c1, prefetch);
      q4_chunk<2, MT>(p, xq, col, c0, c1, prefetch);
      q4_chunk<3, MT>(p, xq, col, c0, c1, prefetch);
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) {
        it[i] = _mm512_add_epi32(it[i], _mm512_mullo_epi32(_mm512_add_epi32(c0[i], c1[i]), sc));
        const int32_t sx = int32_t(xs[i][col / 16]) + int32_t(xs[i][col / 16 + 1]);
        mt[i] = _mm512_add_epi32(mt[i], _mm512_mullo_epi32(mn, _mm512_set1_epi32(sx)));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + 32)));
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      const __m512 dx = _mm512_set1_ps(xd[i][b]);
      tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[i]), _mm512_mul_ps(dw, dx), tot[i]);
      tot[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mt[i]), _mm512_mul_ps(dmin, dx), tot[i]);
    }
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

// Q6_K: the 64 bytes q (6 bits) for half h of chunk c of a 32-column group: nibbles from w, bits 4 and 5 from the
// planes p0, p1 (bit 2c + h of each byte moved to bit 4 / 5).
template <int C, int H>
TP_VNNI inline __m512i q6_bytes(__m512i w, __m512i p0, __m512i p1) {
  constexpr int s = 2 * C + H;
  const __m512i nib = H ? _mm512_srli_epi16(w, 4) : w;
  const __m512i b4 = s >= 4 ? _mm512_srli_epi16(p0, s - 4) : _mm512_slli_epi16(p0, 4 - s);
  const __m512i b5 = _mm512_and_si512(s >= 5 ? _mm512_srli_epi16(p1, s - 5) : _mm512_slli_epi16(p1, 5 - s),
                                      _mm512_set1_epi8(0x20));
  const __m512i hb = _mm512_ternarylogic_epi32(b4, b5, _mm512_set1_epi8(0x10), 0xec);  // (b4 & 0x10) | b5
  return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x0f), 0xec);              // (nib & 0x0f) | hb
}

// Q6_K chunk C (8 columns) of a 32-column group at p (planes p0, p1) against MT rows of x (col: the chunk's group's
// first column) into the chains c0, c1.
template <int C, int MT>
TP_VNNI inline void q6_chunk(const uint8_t* p, __m512i p0, __m512i p1, const int8_t* const* xq, int64_t col, __m512i* c0,
                             __m512i* c1, bool prefetch) {
  if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
  const __m512i wv = _mm512_loadu_si512(p + C * 64);
  const __m512i q0 = q6_bytes<C, 0>(wv, p0, p1), q1 = q6_bytes<C, 1>(wv, p0, p1);
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
    c0[i] = _mm512_dpbusd_epi32(c0[i], q0, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8)));
    c1[i] = _mm512_dpbusd_epi32(c1[i], q1, _mm512_set1_epi32(load_i32(xq[i] + col + C * 8 + 4)));
  }
}

// Q6_K row block rb against MT rows of x from row i0 of a (Q8_K activations: int8 a 256-column block, d F32, Σq a
// 16): per 16-column sub-block the chains start at −32 Σq_x, their sum × the rows' int8 sc added into an int32 total
// of the block (exact: |·| < 2^28), then × d_w d_x into the F32 total by one FMA, as llama.cpp sums Q6_K.
template <int MT>
TP_VNNI void q6_k_row_block(const PackedWeight& w, int64_t rb, const GgufActs& a, int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 256;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * 1312;
  const int8_t* xq[MT];
  const float* xd[MT];
  const int16_t* xs[MT];
  q8_k_rows<MT>(a, a.q.data(), i0, n_in, xq, xd, xs);
  __m512 tot[MT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * 1312;
    if (prefetch)
      for (int k = 0; k < 1312; k += 64) prefetch_weights(e + k + 1312);  // the next block's scales and planes
    __m512i it[MT];
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) it[i] = _mm512_setzero_si512();
    for (int64_t g = 0; g < 8; ++g) {  // 32-column groups: two 16-column sub-blocks of 2 chunks
      const __m512i p0 = _mm512_loadu_si512(e + 288 + g * 128), p1 = _mm512_loadu_si512(e + 288 + g * 128 + 64);
      const uint8_t* p = wd + (b * 32 + g * 4) * 64;
      const int64_t col = b * 256 + g * 32;
      __m512i c0[MT], c1[MT];
      const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + (2 * g) * 16)));
      const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + (2 * g + 1) * 16)));
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) c0[i] = _mm512_set1_epi32(-32 * xs[i][col / 16]), c1[i] = _mm512_setzero_si512();
      q6_chunk<0, MT>(p, p0, p1, xq, col, c0, c1, prefetch);
      q6_chunk<1, MT>(p, p0, p1, xq, col, c0, c1, prefetch);
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) {
        it[i] = _mm512_add_epi32(it[i], _mm512_mullo_epi32(_mm512_add_epi32(c0[i], c1[i]), sc0));
        c0[i] = _mm512_set1_epi32(-32 * xs[i][col / 16 + 1]), c1[i] = _mm512_setzero_si512();
      }
      q6_chunk<2, MT>(p, p0, p1, xq, col, c0, c1, prefetch);
      q6_chunk<3, MT>(p, p0, p1, xq, col, c0, c1, prefetch);
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) it[i] = _mm512_add_epi32(it[i], _mm512_mullo_epi32(_mm512_add_epi32(c0[i], c1[i]), sc1));
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e)));
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i)
      tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it[i]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[i][b])), tot[i]);
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

}  // namespace

bool rows16_int8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool q5 = w.format == WeightFormat::GgufQ5_0, k6 = w.format == WeightFormat::GgufQ6_K;
  const bool q40 = w.format == WeightFormat::GgufQ4_0, q41 = w.format == WeightFormat::GgufQ4_1;
  const bool nl = w.format == WeightFormat::GgufIq4Nl;
  const bool k4 = w.format == WeightFormat::GgufQ4_K, q4 = q40 || q41 || k4 || nl;
  if ((!q5 && !k6 && !q4 && w.format != WeightFormat::GgufQ8_0) || w.rows_layout != RowsLayout::Rows16 ||
      !cpu_has_avx512vnni())
    return false;
  thread_local GgufActs a;
  quantize_gguf_acts(x, m, w.n_in, gguf_act_type(w.format), &a);
  thread_local std::vector<int8_t> xperm;  // Q4_0 / Q4_1 / Q4_K, IQ4_NL: each 8 columns of q in the words' order 0, 4, 1, 5, 2, 6, 3, 7
  if (q4) {
    xperm.resize(size_t(m * w.n_in));
    rows16_q4_x_order(a.q.data(), m * w.n_in, xperm.data());
  }
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
  const GgufActs& acts = a;
  const int8_t* xp = xperm.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in * 16 / (q5 || k6 || q4 ? 2 : 1);  // a row block's codes
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb)
      for (int64_t i0 = 0; i0 < m; i0 += kTileM) {
        float* yi = y + i0 * w.n_out;
        const bool pf = i0 == 0;
        static_assert(kTileM == 8, "with_tile_rows takes tiles of up to 8 rows");
        if (k6)
          with_tile_rows(m - i0, [&]<int MT>() { q6_k_row_block<MT>(w, rb, acts, i0, yi, pf); });
        else if (k4)
          with_tile_rows(m - i0, [&]<int MT>() { q4_k_row_block<MT>(w, rb, acts, xp, i0, yi, pf); });
        else if (q5)
          with_tile_rows(m - i0, [&]<int MT>() { row_block<kQ5_0, MT>(w, rb, acts, nullptr, i0, yi, pf); });
        else if (q40)
          with_tile_rows(m - i0, [&]<int MT>() { row_block<kQ4_0, MT>(w, rb, acts, xp, i0, yi, pf); });
        else if (q41)
          with_tile_rows(m - i0, [&]<int MT>() { row_block<kQ4_1, MT>(w, rb, acts, xp, i0, yi, pf); });
        else if (nl)
          with_tile_rows(m - i0, [&]<int MT>() { row_block<kIq4Nl, MT>(w, rb, acts, xp, i0, yi, pf); });
        else
          with_tile_rows(m - i0, [&]<int MT>() { row_block<kQ8_0, MT>(w, rb, acts, nullptr, i0, yi, pf); });
      }
  }
  return true;
}

}  // namespace tp::cpu::detail
