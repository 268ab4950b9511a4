// GGUF Q4_0 and Q4_1 in GEMM form on AVX2 (rows16.h rows16_avx2_linear; the layout: common/rows16_layout.h Rows16), the
// 4-bit decode and prefill of CPUs without AVX-512 VNNI (AMD Zen 1-3, Intel before Ice Lake). x is quantized as the
// file layout's kernels quantize it (gemm_gguf.h: Q8_0 for Q4_0, Q8_1 for Q4_1; q in [−127, 127]) and permuted once
// a call into the words' column order (rows16_q4_x_order). Per 8-column chunk of a block of 16 weight rows one
// 64-byte line holds rows 0-7 in its first 32 bytes and rows 8-15 in the next (row i's 4 bytes: columns 0, 4, 1, 5 in
// the low nibbles, 2, 6, 3, 7 in the high ones): & 0x0f and >> 4 give the unsigned codes, and two vpmaddubsw against
// x's 4 bytes of those columns, broadcast, sum each row's products in its own two int16 lanes — no horizontal sums.
// The 4 chunks of a 32-column block add into one int16 vector (|lane| ≤ 4 · 2 · 2 · 15 · 127 = 30480: no overflow,
// no saturation), a vpmaddwd by 1 makes one int32 lane a row, and the block's step is the file layout's
// (gemm_gguf_avx2_blocks.inc): S − 8 Σq (Q4_0) to F32, × d_w · d_x into the row's chain by one FMA (Q4_1: + m_w · s_x
// by a second). The integer sums are exact and the float operations of each output are those of the file layout's
// AVX2 kernel in the same order: the same bits, at every m and thread count (a row of a batch has the bits it has
// alone).
// Why: the file layout's decode reads 8 rows' 18-byte blocks side by side and gathers them into lanes (~60 vector ops
// a 8 rows × 32 columns: compute-bound below the DRAM roofline on Zen 3); here 16 rows × 32 columns take 8 loads, 24
// ops for the codes, 8 broadcasts of x, 16 vpmaddubsw, 16 vpaddw and the two halves' block steps, and a row block is
// one contiguous stream for the prefetcher instead of 8. Zen 3, 1 thread, gemm_gguf_bench on SmolLM2's 4 shapes
// (file layout -> this; alternated): decode from cache Q4_0 19-21 -> 29-35 GB/s, Q4_1 18-20 -> 29-37; from DRAM
// Q4_0 12-17 -> 16-23 (the 49152 x 576 lm_head 16-17 -> 21-23, mem_bandwidth 24), Q4_1 12-18 -> 17-24; prefill
// m = 512 from cache the same within noise (Q4_0 72-82 / 72-80 GMAC/s, Q4_1 70-79 / 67-77).
// A row block's lines are read once a tile of kTileM rows of x (m = 1: one row), both halves of each in one pass.
#include <algorithm>
#include <cstring>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"

namespace tp::cpu::detail {

namespace {

#define TP_AVX2_R16 __attribute__((target("avx2,fma,f16c")))

// Rows of x a pass (both halves: 2 int16 sums and 2 F32 chains a row of x, the 4 code vectors and 2 of x in
// registers). Zen 3, 1 thread, m = 512 from cache (gemm_gguf_bench, GMAC/s, SmolLM2's 3 shapes; the file layout's panel
// path beside it 72-82): 2 rows × both halves 72-79; 3 / 4 / 5 / 6 rows × one half a pass 64-69 / 65-71 / 57-67 / 40-51.
constexpr int kTileM = 2;
constexpr int64_t kPrefetchBytes = 8192;  // W software-prefetched this far ahead (as gemm_rows16_int8.cpp)

TP_AVX2_R16 inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Row block rb (its halves h = 0, 1: rows 8 h .. 8 h + 7) against MT rows of x from row i0 (a: the Q8_0 / Q8_1 acts;
// xq: their q in the words' column order): y[i · n_out + 16 rb + 8 h + r], rows past n_out left out.
template <bool Q41, int MT>
TP_AVX2_R16 void row_block(const PackedWeight& w, int64_t rb, const GgufActs& a, const int8_t* xperm, int64_t i0,
                           float* y, bool prefetch) {
  const int64_t n_in = w.n_in, nb = n_in / 32;
  const uint8_t* wd = w.data.data() + rb * (n_in / 8) * 64;
  constexpr int64_t sbb = Q41 ? 64 : 32;  // scale bytes a block of 16 rows: d (Q4_1: then m), F16
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
    xm[i] = Q41 ? a.s.data() + (i0 + i) * nb : nullptr;
  }
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  __m256 tot[2][MT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* e = sbs + b * sbb;
    if (prefetch && (Q41 || b % 2 == 0)) prefetch_weights(e + (Q41 ? kPrefetchBytes / 4 : kPrefetchBytes / 8));
    __m256i acc[2][MT];
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < MT; ++i) acc[h][i] = _mm256_setzero_si256();
    const uint8_t* p = wd + b * 4 * 64;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      if (prefetch) prefetch_weights(p + c * 64 + kPrefetchBytes);
      __m256i q0[2], q1[2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 64 + h * 32));
        q0[h] = _mm256_and_si256(wv, lo4);
        q1[h] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), lo4);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        const __m256i x0 = bcast4(xq[i] + b * 32 + c * 8), x1 = bcast4(xq[i] + b * 32 + c * 8 + 4);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h)
          acc[h][i] = _mm256_add_epi16(acc[h][i],
                                       _mm256_add_epi16(_mm256_maddubs_epi16(q0[h], x0), _mm256_maddubs_epi16(q1[h], x1)));
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + h * 16)));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        __m256i s = _mm256_madd_epi16(acc[h][i], ones);
        if constexpr (!Q41) s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * xs[i][b]));
        tot[h][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(xd[i][b])), tot[h][i]);
      }
      if constexpr (Q41) {  // + m · s, s the x block's d Σq
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 32 + h * 16)));
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) tot[h][i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xm[i][b]), tot[h][i]);
      }
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int64_t r0 = rb * 16 + h * 8, n = std::min<int64_t>(8, w.n_out - r0);
    if (n <= 0) continue;
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      float* out = y + i * w.n_out + r0;
      if (n == 8) {
        _mm256_storeu_ps(out, tot[h][i]);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, tot[h][i]);
        std::memcpy(out, t, size_t(n) * sizeof(float));
      }
    }
  }
}

template <bool Q41>
void run(const GgufActs& a, const int8_t* xperm, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in * 8;  // a row block's codes
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb) {
      int64_t i0 = 0;
      for (; i0 + kTileM <= m; i0 += kTileM) row_block<Q41, kTileM>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
      if (i0 < m) row_block<Q41, 1>(w, rb, a, xperm, i0, y + i0 * w.n_out, i0 == 0);
    }
  }
}

}  // namespace

bool rows16_avx2_wanted(const PackedWeight& w) {
  if (w.format == WeightFormat::Int4)  // W4A16 on AVX2-only CPUs: rows16_a16_avx2 (gemm_rows16_a16_avx2.cpp)
    return w.act == ActQuant::None && w.g_idx.empty() && w.n_in % 32 == 0 &&
           (w.n_groups() == 1 || w.group_size % 32 == 0) && packed_best_isa() == PackedIsa::Avx2;
  return (w.format == WeightFormat::GgufQ4_0 || w.format == WeightFormat::GgufQ4_1) && !w.act_bf16 &&
         !cpu_has_avx512vnni() && gguf_kernel_available(GgufKernel::Avx2);
}

bool rows16_avx2_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool q41 = w.format == WeightFormat::GgufQ4_1;
  if ((w.format != WeightFormat::GgufQ4_0 && !q41) || w.act_bf16 || w.rows_layout != RowsLayout::Rows16 ||
      !gguf_kernel_available(GgufKernel::Avx2))
    return false;
  thread_local GgufActs a;
  quantize_gguf_acts(x, m, w.n_in, gguf_act_type(w.format), &a);
  thread_local std::vector<int8_t> xperm;
  xperm.resize(size_t(m * w.n_in));
  rows16_q4_x_order(a.q.data(), m * w.n_in, xperm.data());
  if (q41)
    run<true>(a, xperm.data(), m, w, y, n_threads);
  else
    run<false>(a, xperm.data(), m, w, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
