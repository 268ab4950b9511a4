// GGUF Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in GEMM form on AVX2 (rows16.h rows16_avx2_linear; the layouts:
// common/rows16_layout.h Rows16), their decode and prefill on CPUs without AVX-512 VNNI (AMD Zen 1-3, Intel before Ice
// Lake) — Q5_1's (Q5_0's codes, Q4_1's min) and IQ4_NL's (row_block_iq4: Q4_0's lines, its codes' values by a vpshufb
// table, Q8_0's signed products) on every CPU with AVX2: they have no other SIMD kernel. Q8_0's lines hold 4 columns of
// 16 rows (row_block_q8). x is quantized as the file layout's kernels quantize it (gemm_gguf.h: Q8_0 for Q4_0 / Q5_0 /
// IQ4_NL, Q8_1 for Q4_1 / Q5_1; q in [−127, 127]). Per
// 8-column chunk of a block of 16 weight rows one 64-byte line holds rows 0-7 in its first 32 bytes and rows 8-15 in
// the next, 4 bytes a row: Q4_0 / Q4_1 columns 0, 4, 1, 5 in the low nibbles and 2, 6, 3, 7 in the high ones (x
// permuted once a call into that order: rows16_q4_x_order), Q5_0 columns 0-3 low and 4-7 high with the fifth bits
// from the block's planes (rows16_q5_bytes). The unsigned codes of 4 columns a row against x's 4 bytes of those columns,
// broadcast, make one vpmaddubsw that sums each row's products in its own two int16 lanes — no horizontal sums.
// A 32-column block's 4 chunks add into one int16 vector (4-bit: |lane| ≤ 4 · 2 · 2 · 15 · 127 = 30480; Q5_0 is
// widened every 2 chunks, ≤ 31496: no overflow, no saturation), a vpmaddwd by 1 makes one int32 lane a row, and the
// block's step is the file layout's (gemm_gguf_avx2_blocks.inc): S − k Σq (k = 8 Q4_0, 16 Q5_0) to F32, × d_w · d_x
// into the row's chain by one FMA (Q4_1, Q5_1: + m_w · s_x by a second). The integer sums are exact and the float
// operations of each output are those of the file layout's AVX2 kernel in the same order: the same bits, at every m
// and thread count (a row of a batch has the bits it has alone; Q5_1 and IQ4_NL, which have no file-layout AVX2 kernel,
// the portable kernel's integers, one FMA a block).
// Why: the file layout's decode reads 8 rows' blocks side by side and gathers them into lanes (~60 vector ops a 8
// rows × 32 columns of Q4_0: compute-bound below the DRAM roofline on Zen 3); here 16 rows × 32 columns of Q4_0 take
// 8 loads, 24 ops for the codes, 8 broadcasts of x, 16 vpmaddubsw, 16 vpaddw and the two halves' block steps, and a
// row block is one contiguous stream for the prefetcher instead of 8. Zen 3, 1 thread, gemm_gguf_bench on SmolLM2's 4
// shapes (file layout -> this; alternated): decode from cache Q4_0 19-21 -> 29-35 GB/s, Q4_1 18-20 -> 29-37, Q5_0
// 11-13 -> 23-26; from DRAM Q4_0 12-17 -> 16-23 (the 49152 x 576 lm_head 16-17 -> 21-23, mem_bandwidth 24), Q4_1
// 12-18 -> 17-24; prefill m = 512 from cache the same within noise (GMAC/s: Q4_0 68-82 / 71-80, Q4_1 67-79 / 64-77,
// Q5_0 65-75 / 71-81). Q8_0, already near the roofline from cache: decode from cache 26-29 -> 39-43 GB/s, from DRAM
// (a loaded machine) 16-19 -> 17-21; prefill 49-54 / 50-52. Q5_1 (held as Q8_0 before it had this kernel: 8.5 bits a
// weight for 6), GEMM_BENCH_HOT=1 on a loaded machine: decode from cache 17.5-22.5 GB/s (Q4_1 in Rows16 in the same
// runs 18.1-21.1), prefill 47-53 GMAC/s (47-52).
// A row block's lines are read once a tile of kTileM rows of x (m = 1: one row), both halves of each in one pass;
// Q5_0 / Q5_1 with m > 1 from a panel of their codes made once a row block (panel_codes).
#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "common/dtype.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/rows16_avx2.h"

namespace tp::cpu::detail {

// The kernel is compiled for AVX2 + FMA + F16C as a region (lambdas do not take a function's target attribute); the
// entries below, outside it, check the CPU first.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

// Rows of x a pass (both halves: 2 int16 sums and 2 F32 chains a row of x, the 4 code vectors and 2 of x in
// registers). Zen 3, 1 thread, m = 512 from cache (gemm_gguf_bench, GMAC/s, SmolLM2's 3 shapes; the file layout's panel
// path beside it 72-82): 2 rows × both halves 72-79; 3 / 4 / 5 / 6 rows × one half a pass 64-69 / 65-71 / 57-67 / 40-51.
constexpr int kTileM = 2;
// Q8_0's (its codes take no registers between lines): m = 512 from cache 46-51 GMAC/s at 2 rows of x, 50-52 at 3 (the
// file layout's 49-54).
constexpr int kTileQ8 = 3;
constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16_int8.cpp)

enum Kind { kQ4_0, kQ4_1, kQ5_0, kQ8_0, kIq4Nl, kQ5_1 };

// Q5_0 / Q5_1: fifth bits in planes; Q4_1 / Q5_1: a min (x = d q + m); a row block's scale bytes a block (d; the
// min's m; the planes) and where its planes start.
constexpr bool is_q5(int k) { return k == kQ5_0 || k == kQ5_1; }
constexpr bool has_min(int k) { return k == kQ4_1 || k == kQ5_1; }
constexpr int64_t scale_block_bytes(int k) { return 32 + (has_min(k) ? 32 : 0) + (is_q5(k) ? 64 : 0); }
constexpr int64_t planes_at(int k) { return has_min(k) ? 64 : 32; }

// Chunk C (8 columns) of a block: the codes of both halves of the rows (q0: the chunk's first 4 columns in x's order,
// q1 the next 4), from the line at p (Q5_0: its plane hp of each half); from a panel (kPanel) the 128 bytes q0, q1
// of half 0 then of half 1 that panel_codes wrote there.
template <int K, int C, bool kPanel = false>
inline void chunk_codes(const uint8_t* p, const __m256i (&hp)[2], __m256i (&q0)[2], __m256i (&q1)[2]) {
  if constexpr (!kPanel && !is_q5(K)) {
    rows16_q4_codes(p + C * 64, q0, q1);
    return;
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    if constexpr (kPanel) {
      q0[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + C * 128 + h * 64));
      q1[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + C * 128 + h * 64 + 32));
    } else {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + C * 64 + h * 32));
      q0[h] = rows16_q5_bytes<C, 0>(wv, hp[h]);
      q1[h] = rows16_q5_bytes<C, 1>(wv, hp[h]);
    }
  }
}

// Row block rb's totals (half h: rows 8 h .. 8 h + 7) for MT rows of x into y[i · n_out + 16 rb + 8 h + r], the rows
// past n_out left out.
template <int MT>
inline void store_totals(const __m256 (&tot)[2][MT], int64_t n_out, int64_t rb, float* y) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) rows16_store8(tot[h][i], rb * 16 + h * 8, n_out, y + i * n_out);
}

// A block's step for both halves of MT rows of x, no offset (Q8_0, IQ4_NL): tot += float(S) · (d_w · d_x), d_w the 16
// rows' F16 d at e (rows 8 h .. 8 h + 7 at e + 16 h), S the block's int32 sums acc, d_x = xd[i][b].
template <int MT>
inline void block_step(const uint8_t* e, const __m256i (&acc)[2][MT], const float* const (&xd)[MT], int64_t b,
                       __m256 (&tot)[2][MT]) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + h * 16)));
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i)
      tot[h][i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][i]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[i][b])), tot[h][i]);
  }
}

// Q8_0 row block rb (16 rows × 4 columns a 64-byte line, byte 4i + j = q + 128 of row i, column j; d as Q4_0's)
// against MT rows of x from row i0 (Q8_0 acts, columns in order): per line and half the signed q (^ 0x80), and
// vpmaddubsw(|q|, x's 4 bytes with q's signs) — |pair| ≤ 2 · 128 · 127 = 32512 — widened by vpmaddwd at once into the
// block's int32 sum S = Σ q q_x; then the block's step (no offset).
template <int MT>
void row_block_q8(const PackedWeight& w, int64_t rb, const GgufActs& a, int64_t i0, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 32;
  const uint8_t* wd = w.data.data() + rb * (n_in / 4) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * 32;
  const int8_t* xq[MT];
  const float* xd[MT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) xq[i] = a.q.data() + (i0 + i) * n_in, xd[i] = a.d.data() + (i0 + i) * nb;
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(char(0x80));
  __m256 tot[2][MT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * 32;
    if (prefetch && b % 2 == 0) prefetch_weights(e + kPrefetchBytes / 16);
    __m256i acc[2][MT];
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < MT; ++i) acc[h][i] = _mm256_setzero_si256();
    const uint8_t* p = wd + b * 8 * 64;
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
      __m256i q[2], u[2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        q[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 64 + h * 32)), flip);
        u[h] = _mm256_abs_epi8(q[h]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        const __m256i xv = rows16_bcast4(xq[i] + b * 32 + c * 4);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h)
          acc[h][i] = _mm256_add_epi32(
              acc[h][i], _mm256_madd_epi16(_mm256_maddubs_epi16(u[h], _mm256_sign_epi8(xv, q[h])), ones));
      }
    }
    block_step<MT>(e, acc, xd, b, tot);
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

// IQ4_NL row block rb (Q4_0's lines and d; a code q's value v = kIq4Values[q], a signed byte by one vpshufb) against
// MT rows of x from row i0 (Q8_0 acts, xq in the Q4 words' order): per chunk, half and 4 columns vpmaddubsw(|v|, x's 4
// bytes with v's signs) — |pair| ≤ 2 · 127 · 127 = 32258, so each is widened at once by vpmaddwd into the block's
// int32 sum S = Σ v q_x — then the block's step (no offset): tot += S · (d_w · d_x), as the portable kernel's.
// Why: held as Q8_0 (what IQ4_NL / IQ4_XS were before) an IQ4_XS file streamed 136 MiB a token where llama.cpp reads
// ~85 (SmolLM2 decode 1.00x llama.cpp's); here 4.5 bits a weight. The sign trick costs 8 ops a row of x per half and
// chunk where Q4_0 takes 4 (Zen 3, 1 thread, gemm_gguf_bench GEMM_BENCH_HOT=1 on a loaded machine, SmolLM2's 3
// shapes: decode from cache 12.4-15.3 GB/s against Q4_0's 15.4-28.7 in the same runs, prefill m = 512 34-38 GMAC/s
// against 44-67; tiles of 3 or 4 rows of x no faster than 2): a SmolLM2 IQ4_XS decode 2.3x our BF16 and 1.5x
// llama.cpp's (bench/results/decode-quant-zen3-20261207-0157.md).
template <int MT>
void row_block_iq4(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, int64_t i0, float* y,
                   bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 32;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * 32;
  const int8_t* xq[MT];
  const float* xd[MT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) xq[i] = xperm + (i0 + i) * n_in, xd[i] = a.d.data() + (i0 + i) * nb;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
  __m256 tot[2][MT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * 32;
    if (prefetch && b % 2 == 0) prefetch_weights(e + kPrefetchBytes / 8);
    __m256i acc[2][MT];
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < MT; ++i) acc[h][i] = _mm256_setzero_si256();
    const uint8_t* p = wd + b * 4 * 64;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
      __m256i q0[2], q1[2];
      rows16_q4_codes(p + c * 64, q0, q1);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v0 = _mm256_shuffle_epi8(table, q0[h]), v1 = _mm256_shuffle_epi8(table, q1[h]);
        const __m256i u0 = _mm256_abs_epi8(v0), u1 = _mm256_abs_epi8(v1);
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const __m256i x0 = rows16_bcast4(xq[i] + b * 32 + c * 8), x1 = rows16_bcast4(xq[i] + b * 32 + c * 8 + 4);
          acc[h][i] = _mm256_add_epi32(
              acc[h][i], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(x0, v0)), ones),
                                          _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(x1, v1)), ones)));
        }
      }
    }
    block_step<MT>(e, acc, xd, b, tot);
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

// Row block rb (its halves h = 0, 1: rows 8 h .. 8 h + 7) against MT rows of x from row i0 (a: the Q8_0 / Q8_1 acts;
// xq: their q in the order the codes come in — Q4's words' order, Q5's columns as they are): y[i · n_out + 16 rb +
// 8 h + r], rows past n_out left out. Q5_0 / Q5_1 (codes ≤ 31) widen their int16 sums every 2 chunks (≤ 2 · 2 · 2 · 31
// · 127 = 31496); Q5_1 is Q5_0's codes with Q4_1's min term (x = d q + m: + m · s, no offset).
template <int K, int MT, bool kPanel = false>
void row_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, int64_t i0, float* y,
               bool prefetch, const uint8_t* panel = nullptr) {
  constexpr bool Mn = has_min(K), Q5 = is_q5(K);
  const int64_t n_in = w.n_in, nb = n_in / 32;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  // scale bytes a block of 16 rows: d (F16; Q4_1 / Q5_1: then m; Q5_0 / Q5_1: then the fifth-bit planes, 64 bytes)
  constexpr int64_t sbb = scale_block_bytes(K);
  constexpr int kOffset = K == kQ5_0 ? 16 : K == kQ4_0 ? 8 : 0;  // the codes' offset: value = d (q − k)
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * sbb;
  const int8_t* xq[MT];
  const float* xd[MT];
  const int32_t* xs[MT];
  const float* xm[MT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    xq[i] = xperm + (i0 + i) * n_in;
    xd[i] = a.d.data() + (i0 + i) * nb;
    xs[i] = a.qsum.data() + (i0 + i) * nb;
    xm[i] = Mn ? a.s.data() + (i0 + i) * nb : nullptr;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 tot[2][MT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * sbb;
    if (prefetch && (sbb >= 64 || b % 2 == 0)) prefetch_weights(e + kPrefetchBytes * sbb / 256);
    __m256i hp[2];
    if constexpr (Q5 && !kPanel)
      for (int h = 0; h < 2; ++h)
        hp[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + planes_at(K) + h * 32));
    __m256i acc[2][MT], s32[2][MT];
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < MT; ++i) acc[h][i] = s32[h][i] = _mm256_setzero_si256();
    const uint8_t* p = kPanel ? panel + b * 4 * 128 : wd + b * 4 * 64;
    const auto chunk = [&]<int C>() {
      if (prefetch) prefetch_weights(p + C * 64 + kPrefetchBytes);
      __m256i q0[2], q1[2];
      chunk_codes<K, C, kPanel>(p, hp, q0, q1);
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        const __m256i x0 = rows16_bcast4(xq[i] + b * 32 + C * 8), x1 = rows16_bcast4(xq[i] + b * 32 + C * 8 + 4);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          acc[h][i] = _mm256_add_epi16(acc[h][i],
                                       _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1)));
          if (Q5 && C % 2 == 1) {  // widen: 2 chunks of 5-bit codes fill the int16 headroom
            s32[h][i] = _mm256_add_epi32(s32[h][i], _mm256_madd_epi16(acc[h][i], ones));
            acc[h][i] = _mm256_setzero_si256();
          }
        }
      }
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
    chunk.template operator()<2>();
    chunk.template operator()<3>();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + h * 16)));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        __m256i sum = Q5 ? s32[h][i] : _mm256_madd_epi16(acc[h][i], ones);
        if constexpr (kOffset != 0) sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(kOffset * xs[i][b]));
        tot[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_set1_ps(xd[i][b])), tot[h][i]);
      }
      if constexpr (Mn) {  // + m · s, s the x block's d Σq
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + h * 16)));
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xm[i][b]), tot[h][i]);
      }
    }
  }
  store_totals<MT>(tot, w.n_out, rb, y);
}

// Row block rb's codes, as chunk_codes makes them, into panel [n_in / 8][2 halves][q0, q1] (32-byte aligned): with
// several rows of x Q5_0's are made once a row block, not once a tile (9 ops a half and chunk). Zen 3, 1 thread, m =
// 512 from cache (gemm_gguf_bench, SmolLM2's 3 shapes, GMAC/s; the file layout's panel path 61-75): made a tile 48-56,
// once 72-79; Q4_0 / Q4_1's (3 ops) read back from the panel 53-62 against 72-80 made a tile.
template <int K>
void panel_codes(const PackedWeight& w, int64_t rb, uint8_t* panel) {
  const int64_t n_in = w.n_in, nb = n_in / 32;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  constexpr int64_t sbb = scale_block_bytes(K);
  const uint8_t* sbs = w.scale_bytes.data() + rb * nb * sbb;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i hp[2];
    if constexpr (is_q5(K))
      for (int h = 0; h < 2; ++h)
        hp[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbs + b * sbb + planes_at(K) + h * 32));
    const auto chunk = [&]<int C>() {
      __m256i q0[2], q1[2];
      chunk_codes<K, C>(wd + b * 4 * 64, hp, q0, q1);
      uint8_t* o = panel + (b * 4 + C) * 128;
      for (int h = 0; h < 2; ++h) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + h * 64), q0[h]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + h * 64 + 32), q1[h]);
      }
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
    chunk.template operator()<2>();
    chunk.template operator()<3>();
  }
}

template <int K>
void run(const GgufActs& a, const int8_t* xperm, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in * (K == kQ8_0 ? 16 : 8);  // a row block's codes
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    thread_local std::vector<uint8_t> panel;  // Q5, m > 1: this thread's row block's codes (32-byte aligned below)
    if (is_q5(K) && m > 1) panel.resize(size_t(w.n_in * 16 + 32));
    uint8_t* pc = panel.data() + (32 - reinterpret_cast<uintptr_t>(panel.data()) % 32) % 32;
    for (int64_t rb = b0; rb < b1; ++rb) {
      if constexpr (K == kQ8_0) {
        int64_t i0 = 0;
        for (; i0 + kTileQ8 <= m; i0 += kTileQ8) row_block_q8<kTileQ8>(w, rb, a, i0, y + i0 * w.n_out, i0 == 0);
        if (m - i0 == 2) row_block_q8<2>(w, rb, a, i0, y + i0 * w.n_out, i0 == 0);
        if (m - i0 == 1) row_block_q8<1>(w, rb, a, i0, y + i0 * w.n_out, i0 == 0);
        continue;
      }
      if constexpr (K == kIq4Nl) {
        int64_t i0 = 0;
        for (; i0 + kTileM <= m; i0 += kTileM) row_block_iq4<kTileM>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
        if (i0 < m) row_block_iq4<1>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
        continue;
      }
      if (!is_q5(K) || m == 1) {  // Q4: its codes in registers from the lines (3 ops a half and chunk)
        int64_t i0 = 0;
        for (; i0 + kTileM <= m; i0 += kTileM) row_block<K, kTileM>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
        if (i0 < m) row_block<K, 1>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
        continue;
      }
      panel_codes<K>(w, rb, pc);
      int64_t i0 = 0;
      for (; i0 + kTileM <= m; i0 += kTileM)
        row_block<K, kTileM, true>(w, rb, a, xperm, i0, y + i0 * w.n_out, false, pc);
      if (i0 < m) row_block<K, 1, true>(w, rb, a, xperm, i0, y + i0 * w.n_out, false, pc);
    }
  }
}

}  // namespace
#pragma GCC pop_options

bool rows16_avx2_wanted(const PackedWeight& w) {
  if (w.format == WeightFormat::Int4)  // W4A16 on AVX2-only CPUs: rows16_a16_avx2 (gemm_rows16_a16_avx2.cpp)
    return w.act == ActQuant::None && w.g_idx.empty() && w.n_in % 32 == 0 &&
           (w.n_groups() == 1 || w.group_size % 32 == 0) && packed_best_isa() == PackedIsa::Avx2;
  if (w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4)  // rows16_fp4_avx2 (gemm_rows16_fp4_avx2.cpp)
    return w.act == ActQuant::None && packed_best_isa() == PackedIsa::Avx2;
  // IQ4_NL and Q5_1: their only SIMD kernel (gemm_gguf.h), on every CPU with AVX2
  if (gguf_rows16_only(w.format)) return !w.act_bf16 && gguf_kernel_available(GgufKernel::Avx2);
  return (w.format == WeightFormat::GgufQ4_0 || w.format == WeightFormat::GgufQ4_1 || w.format == WeightFormat::GgufQ5_0 ||
          w.format == WeightFormat::GgufQ8_0 || w.format == WeightFormat::GgufQ4_K || w.format == WeightFormat::GgufQ6_K) &&
         !w.act_bf16 && !cpu_has_avx512vnni() && gguf_kernel_available(GgufKernel::Avx2);
}

bool rows16_avx2_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const WeightFormat f = w.format;
  if ((f != WeightFormat::GgufQ4_0 && f != WeightFormat::GgufQ4_1 && f != WeightFormat::GgufQ5_0 &&
       f != WeightFormat::GgufQ5_1 && f != WeightFormat::GgufQ8_0 && f != WeightFormat::GgufIq4Nl) ||
      w.act_bf16 || w.rows_layout != RowsLayout::Rows16 || !gguf_kernel_available(GgufKernel::Avx2))
    return false;
  thread_local GgufActs a;
  quantize_gguf_acts(x, m, w.n_in, gguf_act_type(f), &a);
  if (f == WeightFormat::GgufQ5_0) {  // Q5_0's, Q5_1's and Q8_0's codes come in column order
    run<kQ5_0>(a, a.q.data(), m, w, y, n_threads);
  } else if (f == WeightFormat::GgufQ5_1) {
    run<kQ5_1>(a, a.q.data(), m, w, y, n_threads);
  } else if (f == WeightFormat::GgufQ8_0) {
    run<kQ8_0>(a, a.q.data(), m, w, y, n_threads);
  } else {  // Q4_0 / Q4_1 / IQ4_NL: x in the words' order
    thread_local std::vector<int8_t> xperm;
    xperm.resize(size_t(m * w.n_in));
    rows16_q4_x_order(a.q.data(), m * w.n_in, xperm.data());
    if (f == WeightFormat::GgufQ4_1)
      run<kQ4_1>(a, xperm.data(), m, w, y, n_threads);
    else if (f == WeightFormat::GgufIq4Nl)
      run<kIq4Nl>(a, xperm.data(), m, w, y, n_threads);
    else
      run<kQ4_0>(a, xperm.data(), m, w, y, n_threads);
  }
  return true;
}

}  // namespace tp::cpu::detail
