// W4A16 on AVX-512 BF16 (packed_kernels.h: int4_bf16_linear): Int4 weights (per channel or groups of a
// multiple of 32 columns, symmetric or with zero points, no g_idx) against x held as two BF16 parts (P below: 16
// significant bits of x, NMSE ~1e-11 against F32 x), or one with BF16 activations (w.act_bf16).
//
// x [m, n_in] is split once a call into its parts and its even and odd columns (xe[k] = x[2k],
// xo[k] = x[2k + 1], zero-padded by a chunk). A 64-column chunk of a weight row is its 32 bytes widened to 32
// 16-bit lanes: lane j holds byte j, column c + 2j in its low nibble and c + 2j + 1 in its high one. vpermw
// looks each nibble up (its low 5 bits index a 32-entry table of BF16 (u & 15) − 8 − zero, exact: |q − z| ≤ 15)
// in the lane, so the low nibbles pair with xe and the high ones with xo in vdpbf16ps (F32 accumulation).
// Per group: four accumulators (low/high × chunk parity) summed in one order, × the group's scale into one of two
// running totals (group parity); y = the horizontal sum. Every row of x gets the same operations whatever m or
// tile: a row of a batch has the bits of that row alone.
// A chunk shorter than 64 columns (groups of 32, the row's end) has its lanes past the group masked to 0; an
// odd n_in's last high nibble meets x's zero padding.
// At m = 1 (decode) on the fast path, kRowsX1 weight rows a pass share each chunk's x loads (rows_int4_64_x1), with
// the operations of one row alone: the same bits.
// W is software-prefetched kPrefetchBytes ahead (gemv.cpp: the hardware prefetcher alone leaves Zen 4's DRAM
// bandwidth unused).
#include <algorithm>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/bf16_parts.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/reduce_add4.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2")))

constexpr int64_t kPrefetchBytes = 8192;
constexpr int kTileM = 4;  // rows of x sharing one decoded chunk
// Weight rows a block: every tile of x rows meets the block's rows (in L1 / L2) before the next block, so a
// prefill's x (m rows, more than L2) is read once a block, not once a weight row.
constexpr int64_t kBlockRows = 16;
constexpr int kRowsX1 = 4;  // weight rows a pass at m = 1 (rows_int4_64_x1)

// x is held as P BF16 parts (template parameter P below), each product with a weight value (an integer of at
// most 5 bits) exact in F32. F32 activations: P = 2 (p0 = bf16(x), p1 = bf16(x − p0): 16 significant bits,
// relative error ≤ 2⁻¹⁷). One part (x rounded to BF16) moved CT W4A16 logits by up to 1.4e-2 against
// transformers' F32 run (tests/rank/ct_fidelity_test: tolerance 1e-4, failed); two pass it, at ~1.4x the time of
// one a chunk in decode; three (24 bits: x exactly) cost ~1.7x. BF16 activations (w.act_bf16: x arrives rounded,
// so p1 would be 0): P = 1.

// a + Σ over the parts of the BF16 pairs w · x (parts `ps` apart).
template <int P>
TP_BF16 __attribute__((always_inline)) inline __m512 dot_x(__m512 a, __m512bh w, const uint16_t* x, int64_t ps) {
#pragma GCC unroll 3
  for (int p = 0; p < P; ++p) a = _mm512_dpbf16_ps(a, w, (__m512bh)_mm512_loadu_si512(x + p * ps));
  return a;
}

// 32 BF16 lanes of (j & 15) − 8 − z.
TP_BF16 inline __m512i nibble_table(float z) {
  const __m512 v = _mm512_sub_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                 _mm512_set1_ps(8.0f + z));
  return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

// 16 F32 -> the BF16 of part `p` (0: bf16(v); 1: bf16(v − part 0); 2: bf16(v − parts 0 and 1)).
TP_BF16 inline __m256i part_of(__m512 v, int p) {
  __m256i b = bf16_of(v);
  for (int k = 0; k < p; ++k) {
    v = _mm512_sub_ps(v, f32_of(b));
    b = bf16_of(v);
  }
  return b;
}

// x rows -> the BF16 parts of the even / odd columns: row i, part p at xe / xo + (i · P + p) · ps, each
// ps ≥ ceil(n_in / 2) + 32 long, zero-padded.
template <int P>
TP_BF16 void split_x(const float* x, int64_t m, int64_t n_in, int64_t ps, uint16_t* xe, uint16_t* xo) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  std::memset(xe, 0, size_t(m * P * ps) * 2);
  std::memset(xo, 0, size_t(m * P * ps) * 2);
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * n_in;
    for (int64_t c = 0; c < n_in; c += 32) {  // the last pass masked (missing columns read as 0)
      const int64_t left = n_in - c;
      const __m512 a = _mm512_maskz_loadu_ps(__mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(left, 16)))), xr + c);
      const __m512 b = left > 16 ? _mm512_maskz_loadu_ps(__mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(left - 16, 16)))), xr + c + 16)
                                 : _mm512_setzero_ps();
      const __m512 e = _mm512_permutex2var_ps(a, ev, b), o = _mm512_permutex2var_ps(a, od, b);
      for (int p = 0; p < P; ++p) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xe + (i * P + p) * ps + c / 2), part_of(e, p));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + (i * P + p) * ps + c / 2), part_of(o, p));
      }
    }
  }
}

// The 64-column chunk at c (c1: the group's end) of a row decoded into BF16 pairs: lo (even columns), hi (odd).
TP_BF16 __attribute__((always_inline)) inline void decode(const uint8_t* row, int64_t c, int64_t c1, __m512i table,
                                                          bool prefetch, __m512bh& lo, __m512bh& hi) {
  const uint8_t* p = row + c / 2;
  if (prefetch) prefetch_weights(reinterpret_cast<const char*>(p) + kPrefetchBytes);
  if (c + 64 <= c1) {
    const __m512i wd = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    lo = (__m512bh)_mm512_permutexvar_epi16(wd, table);
    hi = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wd, 4), table);
  } else {  // a short chunk: lanes past the group are 0 (not −8 − z) against the next group's x
    const __mmask32 lanes = __mmask32(_bzhi_u32(~0u, unsigned((c1 - c + 1) / 2)));
    const __m512i wd = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lanes, p));
    lo = (__m512bh)_mm512_maskz_permutexvar_epi16(lanes, wd, table);
    hi = (__m512bh)_mm512_maskz_permutexvar_epi16(lanes, _mm512_srli_epi16(wd, 4), table);
  }
}

// Group g of one weight row against MT rows of x: tot[i] += (Σ over the group) × scale.
template <int MT, int P>
TP_BF16 __attribute__((always_inline)) inline void group_int4(const uint8_t* row, int64_t c0, int64_t c1, float scale,
                                                              __m512i table, const uint16_t* xe, const uint16_t* xo,
                                                              int64_t half, bool prefetch, __m512 (&tot)[MT]) {
  __m512 a0[MT], a1[MT], a2[MT], a3[MT];
  for (int i = 0; i < MT; ++i) a0[i] = a1[i] = a2[i] = a3[i] = _mm512_setzero_ps();
  __m512bh lo, hi;
  int64_t c = c0;
  for (; c + 128 <= c1; c += 128) {  // two chunks: four independent accumulator chains
    decode(row, c, c1, table, prefetch, lo, hi);
    for (int i = 0; i < MT; ++i) {
      a0[i] = dot_x<P>(a0[i], lo, xe + i * P * half + c / 2, half);
      a1[i] = dot_x<P>(a1[i], hi, xo + i * P * half + c / 2, half);
    }
    decode(row, c + 64, c1, table, prefetch, lo, hi);
    for (int i = 0; i < MT; ++i) {
      a2[i] = dot_x<P>(a2[i], lo, xe + i * P * half + c / 2 + 32, half);
      a3[i] = dot_x<P>(a3[i], hi, xo + i * P * half + c / 2 + 32, half);
    }
  }
  if (c < c1) {  // the last (maybe short) chunk
    decode(row, c, c1, table, prefetch, lo, hi);
    for (int i = 0; i < MT; ++i) {
      a0[i] = dot_x<P>(a0[i], lo, xe + i * P * half + c / 2, half);
      a1[i] = dot_x<P>(a1[i], hi, xo + i * P * half + c / 2, half);
    }
    if (c + 64 < c1) {
      decode(row, c + 64, c1, table, prefetch, lo, hi);
      for (int i = 0; i < MT; ++i) {
        a2[i] = dot_x<P>(a2[i], lo, xe + i * P * half + c / 2 + 32, half);
        a3[i] = dot_x<P>(a3[i], hi, xo + i * P * half + c / 2 + 32, half);
      }
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int i = 0; i < MT; ++i)
    tot[i] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(a0[i], a1[i]), _mm512_add_ps(a2[i], a3[i])), s, tot[i]);
}

// One weight row against MT rows of x (halves of stride `half`): y[i * n_out] for i < MT. Even groups sum into
// t0, odd ones into t1 (two chains of the per-group FMA).
template <int MT, int P>
TP_BF16 inline void row_int4(const PackedWeight& w, int64_t r, int64_t ng, const uint16_t* xe, const uint16_t* xo,
                             int64_t half, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, gs = ng > 1 ? w.group_size : n_in;
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const float* sc = w.scales.data() + r * ng;
  const int8_t* zp = w.zeros.empty() ? nullptr : w.zeros.data() + r * ng;
  const __m512i table0 = nibble_table(0.0f);
  __m512 t0[MT], t1[MT];
  for (int i = 0; i < MT; ++i) t0[i] = t1[i] = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g + 2 <= ng; g += 2) {
    group_int4<MT, P>(row, g * gs, std::min(n_in, g * gs + gs), sc[g], zp ? nibble_table(float(zp[g])) : table0, xe, xo,
                   half, prefetch, t0);
    group_int4<MT, P>(row, (g + 1) * gs, std::min(n_in, (g + 1) * gs + gs), sc[g + 1],
                   zp ? nibble_table(float(zp[g + 1])) : table0, xe, xo, half, prefetch, t1);
  }
  if (g < ng)
    group_int4<MT, P>(row, g * gs, n_in, sc[g], zp ? nibble_table(float(zp[g])) : table0, xe, xo, half, prefetch, t0);
  for (int i = 0; i < MT; ++i) y[i * w.n_out] = _mm512_reduce_add_ps(_mm512_add_ps(t0[i], t1[i]));
}

// A 64-column chunk's sum by lanes: the decoded lo / hi values against x's even / odd parts at e / o (P parts,
// `half` apart) — one chain (lo's products, then hi's) with P = 1, else (lo · e) + (hi · o). chunk64 and
// chunk64_rows both use it: a row's bits do not depend on which of them ran it.
template <int P>
TP_BF16 __attribute__((always_inline)) inline __m512 chunk_sum(__m512bh lo, __m512bh hi, const uint16_t* e,
                                                               const uint16_t* o, int64_t half) {
  if constexpr (P == 1)
    return _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), lo, (__m512bh)_mm512_loadu_si512(e)), hi,
                            (__m512bh)_mm512_loadu_si512(o));
  else
    return _mm512_add_ps(dot_x<P>(_mm512_setzero_ps(), lo, e, half), dot_x<P>(_mm512_setzero_ps(), hi, o, half));
}

// The fast path, n_in and the group size multiples of 64 (or one group a row): no masks, no short chunks. Each
// 64-column chunk's sum is scaled on its own (tot += (lo + hi sums) × scale), into t0 and t1 in turn.
template <int MT, int P>
TP_BF16 __attribute__((always_inline)) inline void chunk64(const uint8_t* row, int64_t c, __m512i table, __m512 s,
                                                           const uint16_t* xe, const uint16_t* xo, int64_t half,
                                                           bool prefetch, __m512 (&t)[MT]) {
  const uint8_t* p = row + c / 2;
  if (prefetch) prefetch_weights(reinterpret_cast<const char*>(p) + kPrefetchBytes);
  const __m512i wd = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512bh lo = (__m512bh)_mm512_permutexvar_epi16(wd, table);
  const __m512bh hi = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wd, 4), table);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i)
    t[i] = _mm512_fmadd_ps(chunk_sum<P>(lo, hi, xe + i * P * half + c / 2, xo + i * P * half + c / 2, half), s, t[i]);
}

template <int MT, int P>
TP_BF16 inline void row_int4_64(const PackedWeight& w, int64_t r, int64_t ng, const uint16_t* xe, const uint16_t* xo,
                                int64_t half, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, gs = ng > 1 ? w.group_size : n_in;
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const float* sc = w.scales.data() + r * ng;
  const int8_t* zp = w.zeros.empty() ? nullptr : w.zeros.data() + r * ng;
  const __m512i table0 = nibble_table(0.0f);
  __m512 t0[MT], t1[MT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) t0[i] = t1[i] = _mm512_setzero_ps();
  if (gs == 64) {  // one chunk a group: groups in pairs
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2) {
      chunk64<MT, P>(row, g * 64, zp ? nibble_table(float(zp[g])) : table0, _mm512_set1_ps(sc[g]), xe, xo, half, prefetch, t0);
      chunk64<MT, P>(row, g * 64 + 64, zp ? nibble_table(float(zp[g + 1])) : table0, _mm512_set1_ps(sc[g + 1]), xe, xo,
                  half, prefetch, t1);
    }
    if (g < ng)
      chunk64<MT, P>(row, g * 64, zp ? nibble_table(float(zp[g])) : table0, _mm512_set1_ps(sc[g]), xe, xo, half, prefetch, t0);
  } else {
    for (int64_t g = 0; g < ng; ++g) {
      const __m512i table = zp ? nibble_table(float(zp[g])) : table0;
      const __m512 s = _mm512_set1_ps(sc[g]);
      const int64_t c1 = g * gs + gs;
      int64_t c = g * gs;
      for (; c + 128 <= c1; c += 128) {
        chunk64<MT, P>(row, c, table, s, xe, xo, half, prefetch, t0);
        chunk64<MT, P>(row, c + 64, table, s, xe, xo, half, prefetch, t1);
      }
      if (c < c1) chunk64<MT, P>(row, c, table, s, xe, xo, half, prefetch, t0);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) y[i * w.n_out] = _mm512_reduce_add_ps(_mm512_add_ps(t0[i], t1[i]));
}

// m = 1 on the fast path: RW weight rows a pass against the one row of x, each 64-column chunk's x parts loaded once
// for the RW rows (at m = 1 the x loads, 4 a chunk, were as many as the vdpbf16ps). Every row gets row_int4_64<1, P>'s
// operations in its order (chunk64: (a + b) × scale into t0 and t1 in turn, or one chain with P = 1), so a row's
// bits are row_int4_64<1, P>'s.
template <int RW, int TT, int P>
TP_BF16 __attribute__((always_inline)) inline void chunk64_rows(const uint8_t* row0, int64_t rb, int64_t c,
                                                                const __m512i (&table)[RW], const __m512 (&s)[RW],
                                                                const uint16_t* xe, const uint16_t* xo, int64_t half,
                                                                const char*& pf, bool prefetch, __m512 (&t)[RW][2]) {
  if (prefetch) {
    for (int64_t b = 0; b < RW * 32; b += 64) prefetch_weights(pf + b);
    pf += RW * 32;
  }
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) {
    const __m512i wd = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0 + j * rb + c / 2)));
    const __m512bh lo = (__m512bh)_mm512_permutexvar_epi16(wd, table[j]);
    const __m512bh hi = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wd, 4), table[j]);
    t[j][TT] = _mm512_fmadd_ps(chunk_sum<P>(lo, hi, xe + c / 2, xo + c / 2, half), s[j], t[j][TT]);  // x: L1, shared
  }
}

// Group g's nibble table (zero points) and scale of each of RW rows (scales / zero points ng apart).
template <int RW>
TP_BF16 __attribute__((always_inline)) inline void group_consts(const float* sc, const int8_t* zp, int64_t ng, int64_t g,
                                                                __m512i table0, __m512i (&table)[RW], __m512 (&s)[RW]) {
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) {
    table[j] = zp ? nibble_table(float(zp[j * ng + g])) : table0;
    s[j] = _mm512_set1_ps(sc[j * ng + g]);
  }
}

template <int RW, int P>
TP_BF16 inline void rows_int4_64_x1(const PackedWeight& w, int64_t r, int64_t ng, const uint16_t* xe,
                                    const uint16_t* xo, int64_t half, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, gs = ng > 1 ? w.group_size : n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const float* sc = w.scales.data() + r * ng;
  const int8_t* zp = w.zeros.empty() ? nullptr : w.zeros.data() + r * ng;
  const __m512i table0 = nibble_table(0.0f);
  __m512 t[RW][2];
  __m512i table[RW];
  __m512 s[RW];
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) t[j][0] = t[j][1] = _mm512_setzero_ps();
  if (gs == 64) {  // one chunk a group: groups in pairs
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2) {
      group_consts<RW>(sc, zp, ng, g, table0, table, s);
      chunk64_rows<RW, 0, P>(row0, rb, g * 64, table, s, xe, xo, half, pf, prefetch, t);
      group_consts<RW>(sc, zp, ng, g + 1, table0, table, s);
      chunk64_rows<RW, 1, P>(row0, rb, g * 64 + 64, table, s, xe, xo, half, pf, prefetch, t);
    }
    if (g < ng) {
      group_consts<RW>(sc, zp, ng, g, table0, table, s);
      chunk64_rows<RW, 0, P>(row0, rb, g * 64, table, s, xe, xo, half, pf, prefetch, t);
    }
  } else {
    for (int64_t g = 0; g < ng; ++g) {
      group_consts<RW>(sc, zp, ng, g, table0, table, s);
      const int64_t c1 = g * gs + gs;
      int64_t c = g * gs;
      for (; c + 128 <= c1; c += 128) {
        chunk64_rows<RW, 0, P>(row0, rb, c, table, s, xe, xo, half, pf, prefetch, t);
        chunk64_rows<RW, 1, P>(row0, rb, c + 64, table, s, xe, xo, half, pf, prefetch, t);
      }
      if (c < c1) chunk64_rows<RW, 0, P>(row0, rb, c, table, s, xe, xo, half, pf, prefetch, t);
    }
  }
  store_row_sums<RW>(t, 1.0f, y);  // × 1: exact
}

template <int P>
TP_BF16 void rows_int4(const PackedWeight& w, int64_t r0, int64_t r1, int64_t m, const uint16_t* xe,
                       const uint16_t* xo, int64_t half, float* y) {
  const int64_t ng = w.n_groups();
  const bool fast = w.n_in % 64 == 0 && (ng == 1 || w.group_size % 64 == 0);
  prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
  if (fast && m == 1) {
    int64_t r = r0;
    for (; r + kRowsX1 <= r1; r += kRowsX1) rows_int4_64_x1<kRowsX1, P>(w, r, ng, xe, xo, half, y + r, true);
    for (; r < r1; ++r) rows_int4_64_x1<1, P>(w, r, ng, xe, xo, half, y + r, true);
    return;
  }
  for (int64_t rb = r0; rb < r1; rb += kBlockRows)
    for (int64_t i0 = 0; i0 < m; i0 += kTileM)
      for (int64_t r = rb; r < std::min(r1, rb + kBlockRows); ++r) {
        const uint16_t* e = xe + i0 * P * half;
        const uint16_t* o = xo + i0 * P * half;
        float* yi = y + i0 * w.n_out + r;
        const bool pf = i0 == 0;
        if (fast) {
          switch (std::min<int64_t>(kTileM, m - i0)) {
            case 1: row_int4_64<1, P>(w, r, ng, e, o, half, yi, pf); break;
            case 2: row_int4_64<2, P>(w, r, ng, e, o, half, yi, pf); break;
            case 3: row_int4_64<3, P>(w, r, ng, e, o, half, yi, pf); break;
            default: row_int4_64<4, P>(w, r, ng, e, o, half, yi, pf); break;
          }
          continue;
        }
        switch (std::min<int64_t>(kTileM, m - i0)) {
          case 1: row_int4<1, P>(w, r, ng, e, o, half, yi, pf); break;
          case 2: row_int4<2, P>(w, r, ng, e, o, half, yi, pf); break;
          case 3: row_int4<3, P>(w, r, ng, e, o, half, yi, pf); break;
          default: row_int4<4, P>(w, r, ng, e, o, half, yi, pf); break;
        }
      }
}

template <int P>
void int4_bf16(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const int64_t half = (w.n_in + 1) / 2 + 32;  // a part's stride
  thread_local std::vector<uint16_t> xe, xo;
  xe.resize(size_t(m * P * half));
  xo.resize(size_t(m * P * half));
  split_x<P>(x, m, w.n_in, half, xe.data(), xo.data());
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
  const uint16_t* e = xe.data();
  const uint16_t* o = xo.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, 1, omp_get_thread_num(), omp_get_num_threads());
    rows_int4<P>(w, r0, r1, m, e, o, half, y);
  }
}

}  // namespace

bool int4_bf16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Int4 || w.act != ActQuant::None || !w.g_idx.empty() ||
      w.rows_layout != RowsLayout::Rows || !cpu_has_avx512bf16())
    return false;
  if (w.n_groups() > 1 && w.group_size % 32 != 0) return false;  // groups start on whole bytes of a chunk
  if (w.act_bf16)
    int4_bf16<1>(x, m, w, y, n_threads);
  else
    int4_bf16<2>(x, m, w, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
