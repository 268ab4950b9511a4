// A16 decode on AVX-512 (packed_kernels.h: a16_avx512_decode): Int8 weights (groups a multiple of 32 columns or per
// channel, zero points, no g_idx) against F32 x, for m < kA16Avx512MaxM rows of x — gemm_a16_avx2.cpp's decode at
// twice the width. Weight rows kRw at a time (contiguous, software-prefetched ahead), each block against every row
// of x (the rows stay in L1 for the next row of x); a 32-column block of a row is 2 vectors of 16 values
// (vpmovsxbd, − zero in int32 where the weight has zero points, vcvtdq2ps), 2 FMAs with x (one x load serves the
// kRw rows) into the group's sum; per group the sum × the group's scale is added to the row's total (one FMA), and
// y = the total's lane sum.
// Products are the A16 kernels' (F32 value · x, exact), summed in F32 in another order: within their bound. Every
// row of x gets the same operations whatever m: a row of a batch has the bits of that row alone.
// Int4 (gemm_int4_bf16.cpp) and FP8 (gemm_fp8_bf16.cpp) have their own AVX512-BF16 kernels.
#include <algorithm>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

constexpr int kRw = 4;                    // weight rows a block
// How far ahead of the block being read W is prefetched: 4096 (Zen 4); 2048 on Intel (the AMX Xeon of
// bench/results/xeon-amx-kernels-20261203.md §11: CT-W8A16 tg64 +4%).
const int64_t kPrefetchBytes = cpu_is_intel() ? 2048 : 4096;

// Rows [r, r + RW) against one row of x: y[r + j] for j < RW.
template <int RW, bool kZeros>
TP_AVX512 void rows_int8(const PackedWeight& w, int64_t ng, int64_t gs, int64_t r, const float* x, float* y,
                         bool prefetch) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const float* sc = w.scales.data() + r * ng;
  __m512 total[RW];
  for (int j = 0; j < RW; ++j) total[j] = _mm512_setzero_ps();
  for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs) {
    const int64_t c1 = std::min(n_in, c0 + gs);
    __m512 acc[RW][2];
    __m512i zoff[RW];
    for (int j = 0; j < RW; ++j) {
      acc[j][0] = acc[j][1] = _mm512_setzero_ps();
      if constexpr (kZeros) zoff[j] = _mm512_set1_epi32(int(w.zeros[size_t((r + j) * ng + g)]));
    }
    for (int64_t c = c0; c < c1; c += 32) {
      if (prefetch) {
        for (int64_t k = 0; k < RW * 32; k += 64) prefetch_weights(pf + k);
        pf += RW * 32;
      }
      const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
      for (int j = 0; j < RW; ++j) {
        const uint8_t* p = row0 + j * rb + c;
        __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
        if constexpr (kZeros) {
          q0 = _mm512_sub_epi32(q0, zoff[j]);
          q1 = _mm512_sub_epi32(q1, zoff[j]);
        }
        acc[j][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), x0, acc[j][0]);
        acc[j][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), x1, acc[j][1]);
      }
    }
    for (int j = 0; j < RW; ++j)
      total[j] = _mm512_fmadd_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_set1_ps(sc[j * ng + g]), total[j]);
  }
  for (int j = 0; j < RW; ++j) y[r + j] = _mm512_reduce_add_ps(total[j]);
}

template <bool kZeros>
void run_int8(const PackedWeight& w, const float* x, int64_t m, float* y, int n_threads) {
  const int64_t n_in = w.n_in, ng = w.n_groups(), gs = w.group_size;
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
    int64_t r = r0;
    for (; r + kRw <= r1; r += kRw)
      for (int64_t i = 0; i < m; ++i) rows_int8<kRw, kZeros>(w, ng, gs, r, x + i * n_in, y + i * w.n_out, i == 0);
    for (; r < r1; ++r)
      for (int64_t i = 0; i < m; ++i) rows_int8<1, kZeros>(w, ng, gs, r, x + i * n_in, y + i * w.n_out, false);
  }
}

}  // namespace

bool a16_avx512_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (m >= kA16Avx512MaxM || w.format != WeightFormat::Int8 || w.act != ActQuant::None || !w.g_idx.empty() ||
      w.n_in % 32 != 0 || w.group_size % 32 != 0 || !cpu_has_avx512f())
    return false;
  if (w.zeros.empty()) run_int8<false>(w, x, m, y, n_threads);
  else run_int8<true>(w, x, m, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
