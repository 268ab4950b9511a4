// Small-M GEMV kernels: AVX-512 (F32 FMA, BF16 dot-product) with runtime dispatch, and portable loops.
// Tiles of kRows weight rows × up to kCols activation rows: each weight vector loaded from memory feeds
// kCols accumulators, and a tile's rows stay in L1/L2 while the next group of activation rows reuses them.
#include "kernels/cpu/gemv.h"

// GCC 12's AVX-512 intrinsics (reductions, shuffles) use a self-initialized "undefined" vector that trips
// -Wuninitialized once inlined; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/dtype.h"

namespace tp::cpu::detail {

namespace {
constexpr int kRows = 4;  // weight rows per tile
constexpr int kCols = 4;  // activation rows per inner group
// BF16 tiles software-prefetch W this many bytes ahead of the tile being read (one 4-row tile of a 576-column
// matrix is 4.6 KB). On Zen 4 (2 cores, shared machine, bench/gemv_bench --shapes, m = 1, cold, best of the
// alternated calls) 4096 took the 960x576 GEMV from 11.7 to 25.7 GB/s and 3072x576 from 10.5 to 22.6 (read
// 26-31): the hardware prefetcher does not ramp up on the four interleaved 1.1 KB row streams of a tile.
// On a Xeon with AMX (2026-12-03, same bench, 1 thread, p50 over read p50) 2048 is best: gemv/read 0.88-1.03
// vs 0.81-0.89 at 4096 (1024: 0.87-0.97, 3072: 0.84-0.97, 8192: 0.82-0.85); SmolLM2 BF16 tg64 +6-12% at 1
// thread, +2% at 2. Intel CPUs take 2048, the others (AMD: measured on Zen 4) 4096; read once.
int64_t prefetch_bytes() {
  static const int64_t bytes = cpu_is_intel() ? 2048 : 4096;
  return bytes;
}
}  // namespace

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

bool cpu_is_intel() {
  static const bool intel = __builtin_cpu_is("intel");
  return intel;
}

const bool g_prefetch_weights_to_l2 = cpu_is_intel();

bool cpu_has_avx512bf16() {
  static const bool has = cpu_has_avx512f() && __builtin_cpu_supports("avx512bf16");
  return has;
}

// ---------------------------------------------------------------------------------------------- AVX-512
#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define TP_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// y[g * y_stride + r] = dot(w row r, x row g) for r < R, g < G.
template <int R, int G>
TP_AVX512 inline void tile_f32(const float* w, int64_t n_in, const float* x, int64_t x_stride, float* y,
                               int64_t y_stride) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n_in; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m512 xv = _mm512_loadu_ps(x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(wv[r], xv, acc[r][g]);
    }
  }
  if (k < n_in) {
    const __mmask16 mask = __mmask16((1u << (n_in - k)) - 1);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(wv[r], xv, acc[r][g]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * y_stride + r] = _mm512_reduce_add_ps(acc[r][g]);
}

// pf: where to software-prefetch from (R cache lines per 32-column step, i.e. as fast as the tile consumes W, a
// fixed distance ahead of it), up to pf_end; null for no prefetch (the tile's rows are already in cache).
template <int R, int G>
TP_AVX512BF16 inline void tile_bf16(const uint16_t* w, int64_t n_in, const uint16_t* x, int64_t x_stride,
                                    float* y, int64_t y_stride, const char* pf, const char* pf_end) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n_in; k += 32) {
    if (pf != nullptr && pf + R * 64 <= pf_end) {
      for (int r = 0; r < R; ++r) _mm_prefetch(pf + r * 64, _MM_HINT_T0);
      pf += R * 64;
    }
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m512i xv = _mm512_loadu_si512(x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)wv[r], (__m512bh)xv);
    }
  }
  if (k < n_in) {  // x is zero-padded to x_stride, so only w needs a mask
    const __mmask32 mask = __mmask32((1u << (n_in - k)) - 1);
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m512i xv = _mm512_loadu_si512(x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)wv[r], (__m512bh)xv);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * y_stride + r] = _mm512_reduce_add_ps(acc[r][g]);
}

// Function-pointer table over the tile shape so the remainder tiles (R < kRows, G < kCols) stay unrolled.
template <typename T, typename X>
using TileFn = void (*)(const T*, int64_t, const X*, int64_t, float*, int64_t, const char*, const char*);

template <int R, int G>
TP_AVX512 void tile_f32_fn(const float* w, int64_t n_in, const float* x, int64_t xs, float* y, int64_t ys,
                           const char*, const char*) {
  tile_f32<R, G>(w, n_in, x, xs, y, ys);
}
template <int R, int G>
TP_AVX512BF16 void tile_bf16_fn(const uint16_t* w, int64_t n_in, const uint16_t* x, int64_t xs, float* y,
                                int64_t ys, const char* pf, const char* pf_end) {
  tile_bf16<R, G>(w, n_in, x, xs, y, ys, pf, pf_end);
}

template <int R>
constexpr TileFn<float, float> f32_row[kCols] = {tile_f32_fn<R, 1>, tile_f32_fn<R, 2>, tile_f32_fn<R, 3>,
                                                 tile_f32_fn<R, 4>};
constexpr const TileFn<float, float>* f32_table[kRows] = {f32_row<1>, f32_row<2>, f32_row<3>, f32_row<4>};

template <int R>
constexpr TileFn<uint16_t, uint16_t> bf16_row[kCols] = {tile_bf16_fn<R, 1>, tile_bf16_fn<R, 2>,
                                                        tile_bf16_fn<R, 3>, tile_bf16_fn<R, 4>};
constexpr const TileFn<uint16_t, uint16_t>* bf16_table[kRows] = {bf16_row<1>, bf16_row<2>, bf16_row<3>,
                                                                 bf16_row<4>};

template <typename T, typename X>
void run_tiles(const TileFn<T, X>* const* table, const X* x, int64_t x_stride, int64_t m, const T* w,
               int64_t n_out, int64_t n_in, float* y, int n_threads) {
  const int64_t n_tiles = (n_out + kRows - 1) / kRows;
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * int64_t(sizeof(T)));
  const char* w_end = reinterpret_cast<const char*>(w + n_out * n_in);
  const int64_t pf_bytes = prefetch_bytes();
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t r0 = t * kRows;
    const int rows = int(n_out - r0 < kRows ? n_out - r0 : kRows);
    const char* tile = reinterpret_cast<const char*>(w + r0 * n_in);
    for (int64_t g0 = 0; g0 < m; g0 += kCols) {
      const int cols = int(m - g0 < kCols ? m - g0 : kCols);
      const char* pf = g0 == 0 ? tile + pf_bytes : nullptr;
      table[rows - 1][cols - 1](w + r0 * n_in, n_in, x + g0 * x_stride, x_stride, y + g0 * n_out + r0, n_out, pf,
                                w_end);
    }
  }
}

// m = 1: rows [r_begin, r_end) one after the other, so W is read in memory order as one stream (the 4-row tiles
// read four interleaved streams), four accumulators over the columns of a row, and a software prefetch
// pf_bytes (prefetch_bytes()) ahead of the read position for every 64 bytes read.
TP_AVX512BF16 void rows_bf16_m1(const uint16_t* x, const uint16_t* w, int64_t n_in, int64_t r_begin, int64_t r_end,
                                float* y, const char* w_end, int64_t pf_bytes) {
  for (int64_t r = r_begin; r < r_end; ++r) {
    const uint16_t* wr = w + r * n_in;
    const char* pf = reinterpret_cast<const char*>(wr) + pf_bytes;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t k = 0;
    for (; k + 128 <= n_in; k += 128, pf += 256) {
      if (pf + 256 <= w_end) {
        prefetch_weights(pf);
        prefetch_weights(pf + 64);
        prefetch_weights(pf + 128);
        prefetch_weights(pf + 192);
      }
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(wr + k), (__m512bh)_mm512_loadu_si512(x + k));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(wr + k + 32), (__m512bh)_mm512_loadu_si512(x + k + 32));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(wr + k + 64), (__m512bh)_mm512_loadu_si512(x + k + 64));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_loadu_si512(wr + k + 96), (__m512bh)_mm512_loadu_si512(x + k + 96));
    }
    for (; k + 32 <= n_in; k += 32, pf += 64) {
      if (pf + 64 <= w_end) prefetch_weights(pf);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(wr + k), (__m512bh)_mm512_loadu_si512(x + k));
    }
    if (k < n_in) {  // x is zero-padded to a multiple of 32, so only w needs a mask
      const __mmask32 mask = __mmask32((1u << (n_in - k)) - 1);
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_maskz_loadu_epi16(mask, wr + k), (__m512bh)_mm512_loadu_si512(x + k));
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
}

}  // namespace

void gemv_f32_avx512(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y,
                     int n_threads) {
  run_tiles<float, float>(f32_table, x, n_in, m, w, n_out, n_in, y, n_threads);
}

void gemv_bf16_avx512(const uint16_t* xb, int64_t x_stride, int64_t m, const uint16_t* w, int64_t n_out,
                      int64_t n_in, float* y, int n_threads) {
  if (m == 1) {
    const char* w_end = reinterpret_cast<const char*>(w + n_out * n_in);
    const int nt = n_threads > 1 && worth_parallel(n_out * n_in * 2) ? n_threads : 1;
    const int64_t pf_bytes = prefetch_bytes();
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      rows_bf16_m1(xb, w, n_in, n_out * t / n, n_out * (t + 1) / n, y, w_end, pf_bytes);
    }
    return;
  }
  run_tiles<uint16_t, uint16_t>(bf16_table, xb, x_stride, m, w, n_out, n_in, y, n_threads);
}

// --------------------------------------------------------------------------------------------- portable
void gemv_f32_portable(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y,
                       int n_threads) {
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * 4);
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
  for (int64_t r = 0; r < n_out; ++r) {
    const float* wr = w + r * n_in;
    for (int64_t g = 0; g < m; ++g) {
      const float* xg = x + g * n_in;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < n_in; ++k) s += wr[k] * xg[k];
      y[g * n_out + r] = s;
    }
  }
}

void gemv_bf16_portable(const uint16_t* xb, int64_t x_stride, int64_t m, const uint16_t* w, int64_t n_out,
                        int64_t n_in, float* y, int n_threads) {
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * 2);
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
  for (int64_t r = 0; r < n_out; ++r) {
    const uint16_t* wr = w + r * n_in;
    for (int64_t g = 0; g < m; ++g) {
      const uint16_t* xg = xb + g * x_stride;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < n_in; ++k) s += bf16_to_f32(wr[k]) * bf16_to_f32(xg[k]);
      y[g * n_out + r] = s;
    }
  }
}

}  // namespace tp::cpu::detail
