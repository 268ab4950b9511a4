// AVX2 + FMA GEMV/GEMM tiles, for CPUs without AVX-512 (AMD Zen 2/3, older Xeons).
//
// BF16 weights: a 32-byte load holds 16 BF16 weights as 8 dwords (w[2i] low, w[2i+1] high); a shift left by 16
// gives the 8 even columns as F32 and an AND with 0xffff0000 the 8 odd ones (2 uops for 16 weights, no
// cross-lane shuffle). x is rounded to BF16 once per call and stored widened to F32 in the same order: each
// group of 16 columns as its 8 even then its 8 odd columns (prepare_x). Products are exact (BF16 × BF16 fits
// an F32 mantissa) and sums accumulate in F32, as on the other paths.
// Summation order, the same for every tile shape, thread count and batch size (so a row of x gets the same bits
// alone as in a batch): one 8-lane accumulator per (weight row, x row); per 16-column group, FMA of the even
// half then of the odd half; a last partial group zero-padded; then hsum (lanes 0+4, 1+5, .. then pairs).
// m = 1 (decode): tiles of 2 weight rows, each prefetching the next tile, rows split across threads.
// m > 1 (prefill, batched decode; oneDNN has no BF16 matmul without AVX-512): 4 rows × 2 x rows tiles; each thread walks panels of its rows that fit L2, and for each pair of
// x rows (in L1) runs every tile of the panel, so W is read from DRAM once per call. From m = kWidenMinM each
// panel is widened to F32 first and 4 × 3 tiles of plain FMAs run over it.
// F32 weights: the plain 4 × 2 dot-product tiles below.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/gemv.h"

namespace tp::cpu::detail {

namespace {

#define TP_AVX2 __attribute__((target("avx2,fma")))

TP_AVX2 inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// ------------------------------------------------------------------------------------------------ F32
constexpr int kRowsF32 = 4;
constexpr int kColsF32 = 2;

// y[g * y_stride + r] = dot(w row r, x row g) for r < R, g < G; x rows are F32 (x_stride apart).
template <int R, int G>
TP_AVX2 void tile_f32(const float* w, int64_t n_in, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n_in; k += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m256 xv = _mm256_loadu_ps(x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(wv[r], xv, acc[r][g]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) {
      float s = hsum(acc[r][g]);
      for (int64_t j = k; j < n_in; ++j) s += w[r * n_in + j] * x[g * x_stride + j];
      y[g * y_stride + r] = s;
    }
}

using TileF32 = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);
template <int R>
constexpr TileF32 f32_row[kColsF32] = {tile_f32<R, 1>, tile_f32<R, 2>};
constexpr const TileF32* f32_table[kRowsF32] = {f32_row<1>, f32_row<2>, f32_row<3>, f32_row<4>};

// ----------------------------------------------------------------------------------------------- BF16
constexpr int64_t kGroup = 16;      // BF16 columns per step (one 32-byte load of a W row)
// m = 1: weight rows per tile. Fewer rows read fewer interleaved streams: cold, 1 thread, Zen 3 (shared machine,
// gemv / a plain read of the same bytes, alternated; SmolLM2 shapes) 2 rows 0.79-0.87, 4 rows 0.75-0.84,
// 8 rows 0.64-0.70; the 2 FMA chains still compute 2.5x faster than DRAM delivers. Each tile prefetches the
// next one (the distance is one tile): 0.45-0.5 without the prefetch, 0.63-0.79 at a further 3 KiB.
constexpr int kRowsM1 = 2;
constexpr int kRowsMM = 4;          // m > 1: weight rows per tile ...
constexpr int kColsMM = 2;          // ... × x rows
constexpr int64_t kPanelBytes = int64_t(192) << 10;  // m > 1: W panel kept in L2 (Zen 3: 512 KiB a core)
// From this m on, each panel of W is first widened to F32 (in the prepared column order) into a per-thread
// buffer, and 4 × 3 tiles of plain F32 FMAs run over it: the widening is paid once per panel instead of once
// per group of x rows, and 12 accumulators hide the FMA latency. The same FMAs in the same order as tile_bf16.
constexpr int64_t kWidenMinM = 6;
constexpr int kRowsWide = 4;
constexpr int kColsWide = 3;
// The widened panel (F32) and a chunk of x rows, both kept in L2 while each 4-row tile of the panel (in L1) meets
// every group of 3 x rows of the chunk. Zen 3, 1 thread, m = 512, hot (GFLOP/s, 1536x576 / 576x1536; peak ~83):
// x groups outer over the whole panel 55 / 48; chunked 128 KiB panel × 128 KiB chunk 64-70 / 55-63 (64 × 192,
// 256 × 128, 64 × 64 within noise below). The widening costs one pass over W per call.
constexpr int64_t kWidePanelBytes = int64_t(128) << 10;
constexpr int64_t kXChunkBytes = int64_t(128) << 10;
// m > 1: W is software-prefetched this many bytes ahead of the tile being read (gemv.cpp: Zen 4's measurement).
constexpr int64_t kPrefetchBytes = 4096;

// f32_to_bf16 of 8 floats: the BF16 bits in the low half of each dword.
TP_AVX2 inline __m256i round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i top = _mm256_srli_epi32(u, 16);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(top, _mm256_set1_epi32(1)))), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
}

// x [m, n_in] F32 -> out [m, stride] (stride = round_up(n_in, 16)): rounded to BF16 (f32_to_bf16's bits: nearest
// even, NaN kept quiet), widened back to F32, each 16-column group as its 8 even then 8 odd columns, zero-padded.
TP_AVX2 void prepare_x(const float* x, int64_t m, int64_t n_in, int64_t stride, float* out) {
  const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
  for (int64_t g = 0; g < m; ++g) {
    const float* xr = x + g * n_in;
    float* o = out + g * stride;
    for (int64_t k = 0; k < stride; k += kGroup) {
      __m256 a, b;
      if (k + kGroup <= n_in) {
        a = _mm256_loadu_ps(xr + k);
        b = _mm256_loadu_ps(xr + k + 8);
      } else {
        alignas(32) float tail[kGroup] = {};
        std::memcpy(tail, xr + k, size_t(n_in - k) * sizeof(float));
        a = _mm256_load_ps(tail);
        b = _mm256_load_ps(tail + 8);
      }
      // 16 BF16 as W holds them: word j of the 32 bytes is column k + j.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(round_bf16(a), round_bf16(b)), 0xd8);
      _mm256_storeu_ps(o + k, _mm256_castsi256_ps(_mm256_slli_epi32(packed, 16)));
      _mm256_storeu_ps(o + k + 8, _mm256_castsi256_ps(_mm256_and_si256(packed, hi)));
    }
  }
}

// One 16-column group: acc[r][g] += even W × even x, then += odd W × odd x. The G x rows' halves are loaded
// once into registers and each W row is widened once (R × G + 2G + 3 ymm live: 15 for 4 × 2).
template <int R, int G>
TP_AVX2 inline void step(__m256 (&acc)[R][G], const __m256i (&wv)[R], __m256i hi, const float* xp, int64_t x_stride,
                         int64_t k) {
  __m256 xe[G], xo[G];
  for (int g = 0; g < G; ++g) {
    xe[g] = _mm256_loadu_ps(xp + g * x_stride + k);
    xo[g] = _mm256_loadu_ps(xp + g * x_stride + k + 8);
  }
  for (int r = 0; r < R; ++r) {
    const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(wv[r], 16));
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(even, xe[g], acc[r][g]);
    const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(wv[r], hi));
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(odd, xo[g], acc[r][g]);
  }
}

// y[g * y_stride + r] = dot(w row r, x row g) for r < R, g < G; xp rows prepared (prepare_x), x_stride apart.
// pf: where to software-prefetch W from (R cache lines per 32 columns, as fast as the tile reads W), up to
// pf_end; null for none.
template <int R, int G>
TP_AVX2 inline void tile_bf16(const uint16_t* w, int64_t n_in, const float* xp, int64_t x_stride, float* y,
                              int64_t y_stride, const char* pf, const char* pf_end) {
  const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 2 * kGroup <= n_in; k += 2 * kGroup) {
    if (pf != nullptr && pf + R * 64 <= pf_end) {
      for (int r = 0; r < R; ++r) _mm_prefetch(pf + r * 64, _MM_HINT_T0);
      pf += R * 64;
    }
    __m256i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * n_in + k));
    step<R, G>(acc, wv, hi, xp, x_stride, k);
    for (int r = 0; r < R; ++r)
      wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * n_in + k + kGroup));
    step<R, G>(acc, wv, hi, xp, x_stride, k + kGroup);
  }
  for (; k < n_in; k += kGroup) {  // a last full group, then a zero-padded partial one (x is zero there too)
    __m256i wv[R];
    if (k + kGroup <= n_in) {
      for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * n_in + k));
    } else {
      for (int r = 0; r < R; ++r) {
        alignas(32) uint16_t tail[kGroup] = {};
        std::memcpy(tail, w + r * n_in + k, size_t(n_in - k) * sizeof(uint16_t));
        wv[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
      }
    }
    step<R, G>(acc, wv, hi, xp, x_stride, k);
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * y_stride + r] = hsum(acc[r][g]);
}

using TileBf16 = void (*)(const uint16_t*, int64_t, const float*, int64_t, float*, int64_t, const char*, const char*);
template <int R, int G>
TP_AVX2 void tile_bf16_fn(const uint16_t* w, int64_t n_in, const float* xp, int64_t xs, float* y, int64_t ys,
                          const char* pf, const char* pf_end) {
  tile_bf16<R, G>(w, n_in, xp, xs, y, ys, pf, pf_end);
}
constexpr TileBf16 m1_table[kRowsM1] = {tile_bf16_fn<1, 1>, tile_bf16_fn<2, 1>};
template <int R>
constexpr TileBf16 mm_row[kColsMM] = {tile_bf16_fn<R, 1>, tile_bf16_fn<R, 2>};
constexpr const TileBf16* mm_table[kRowsMM] = {mm_row<1>, mm_row<2>, mm_row<3>, mm_row<4>};

// W rows [r0, r0 + rows) -> out [rows, stride] F32 in prepare_x's column order, each row zero-padded to stride.
TP_AVX2 void widen_rows(const uint16_t* w, int64_t n_in, int64_t r0, int64_t rows, int64_t stride, float* out,
                        const char* w_end) {
  const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* wr = w + (r0 + r) * n_in;
    float* o = out + r * stride;
    for (int64_t k = 0; k < stride; k += kGroup) {
      __m256i v;
      if (k + kGroup <= n_in) {
        const char* at = reinterpret_cast<const char*>(wr + k);
        if (at + kPrefetchBytes + 64 <= w_end) _mm_prefetch(at + kPrefetchBytes, _MM_HINT_T0);
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k));
      } else {
        alignas(32) uint16_t tail[kGroup] = {};
        std::memcpy(tail, wr + k, size_t(n_in - k) * sizeof(uint16_t));
        v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
      }
      _mm256_storeu_ps(o + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
      _mm256_storeu_ps(o + k + 8, _mm256_castsi256_ps(_mm256_and_si256(v, hi)));
    }
  }
}

// tile_bf16's sums over a widened panel: wp rows (widen_rows) and xp rows both `stride` apart.
template <int R, int G>
TP_AVX2 void tile_wide(const float* wp, const float* xp, int64_t stride, float* y, int64_t y_stride) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (int64_t k = 0; k < stride; k += kGroup) {
    for (int half = 0; half < 2; ++half) {  // even columns, then odd
      __m256 xv[G];
      for (int g = 0; g < G; ++g) xv[g] = _mm256_loadu_ps(xp + g * stride + k + 8 * half);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_loadu_ps(wp + r * stride + k + 8 * half);
        for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(wv, xv[g], acc[r][g]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * y_stride + r] = hsum(acc[r][g]);
}

using TileWide = void (*)(const float*, const float*, int64_t, float*, int64_t);
template <int R>
constexpr TileWide wide_row[kColsWide] = {tile_wide<R, 1>, tile_wide<R, 2>, tile_wide<R, 3>};
constexpr const TileWide* wide_table[kRowsWide] = {wide_row<1>, wide_row<2>, wide_row<3>, wide_row<4>};

// Rows [r_begin, r_end) of y[m, n_out] through widened panels (m >= kWidenMinM).
void wide_rows(const float* xp, int64_t stride, int64_t m, const uint16_t* w, int64_t n_out, int64_t n_in,
               int64_t r_begin, int64_t r_end, float* y) {
  const int64_t panel = std::max<int64_t>(kRowsWide, kWidePanelBytes / (stride * 4) / kRowsWide * kRowsWide);
  const int64_t chunk = std::max<int64_t>(kColsWide, kXChunkBytes / (stride * 4) / kColsWide * kColsWide);
  thread_local std::vector<float> buf;
  if (int64_t(buf.size()) < panel * stride) buf.resize(size_t(panel * stride));
  for (int64_t p0 = r_begin; p0 < r_end; p0 += panel) {
    const int64_t p1 = std::min(r_end, p0 + panel);
    widen_rows(w, n_in, p0, p1 - p0, stride, buf.data(), reinterpret_cast<const char*>(w + n_out * n_in));
    for (int64_t c0 = 0; c0 < m; c0 += chunk) {
      const int64_t c1 = std::min(m, c0 + chunk);
      for (int64_t r0 = p0; r0 < p1; r0 += kRowsWide) {
        const int rows = int(std::min<int64_t>(kRowsWide, p1 - r0));
        for (int64_t g0 = c0; g0 < c1; g0 += kColsWide) {
          const int cols = int(std::min<int64_t>(kColsWide, c1 - g0));
          wide_table[rows - 1][cols - 1](buf.data() + (r0 - p0) * stride, xp + g0 * stride, stride,
                                         y + g0 * n_out + r0, n_out);
        }
      }
    }
  }
}

// Rows [r_begin, r_end) of y[m, n_out] (one thread's share).
void bf16_rows(const float* xp, int64_t x_stride, int64_t m, const uint16_t* w, int64_t n_out, int64_t n_in,
               int64_t r_begin, int64_t r_end, float* y) {
  const char* w_end = reinterpret_cast<const char*>(w + n_out * n_in);
  if (m == 1) {
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowsM1) {
      const int rows = int(std::min<int64_t>(kRowsM1, r_end - r0));
      const char* next_tile = reinterpret_cast<const char*>(w + (r0 + kRowsM1) * n_in);
      m1_table[rows - 1](w + r0 * n_in, n_in, xp, x_stride, y + r0, n_out, next_tile, w_end);
    }
    return;
  }
  if (m >= kWidenMinM) {
    wide_rows(xp, x_stride, m, w, n_out, n_in, r_begin, r_end, y);
    return;
  }
  const int64_t panel = std::max<int64_t>(kRowsMM, kPanelBytes / (n_in * 2) / kRowsMM * kRowsMM);
  for (int64_t p0 = r_begin; p0 < r_end; p0 += panel) {
    const int64_t p1 = std::min(r_end, p0 + panel);
    for (int64_t g0 = 0; g0 < m; g0 += kColsMM) {
      const int cols = int(std::min<int64_t>(kColsMM, m - g0));
      for (int64_t r0 = p0; r0 < p1; r0 += kRowsMM) {
        const int rows = int(std::min<int64_t>(kRowsMM, p1 - r0));
        const char* tile = reinterpret_cast<const char*>(w + r0 * n_in);
        mm_table[rows - 1][cols - 1](w + r0 * n_in, n_in, xp + g0 * x_stride, x_stride, y + g0 * n_out + r0, n_out,
                                     g0 == 0 ? tile + kPrefetchBytes : nullptr, w_end);
      }
    }
  }
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void gemv_f32_avx2(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y, int n_threads) {
  const int64_t n_tiles = (n_out + kRowsF32 - 1) / kRowsF32;
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * 4 * ((m + 1) / 2));
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t r0 = t * kRowsF32;
    const int rows = int(std::min<int64_t>(kRowsF32, n_out - r0));
    for (int64_t g0 = 0; g0 < m; g0 += kColsF32) {
      const int cols = int(std::min<int64_t>(kColsF32, m - g0));
      f32_table[rows - 1][cols - 1](w + r0 * n_in, n_in, x + g0 * n_in, n_in, y + g0 * n_out + r0, n_out);
    }
  }
}

void gemv_bf16_avx2(const float* x, int64_t m, const uint16_t* w, int64_t n_out, int64_t n_in, float* y,
                    int n_threads) {
  thread_local std::vector<float> buf;
  const int64_t stride = (n_in + kGroup - 1) / kGroup * kGroup;
  if (int64_t(buf.size()) < m * stride) buf.resize(size_t(m * stride));
  prepare_x(x, m, n_in, stride, buf.data());
  const float* xp = buf.data();
  // Threads split the rows in whole tiles (a row's sum does not depend on the split).
  const int64_t unit = m == 1 ? kRowsM1 : kRowsMM, n_units = (n_out + unit - 1) / unit;
  const int nt = n_threads > 1 && worth_parallel(n_out * n_in * 2) ? int(std::min<int64_t>(n_threads, n_units)) : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t r_begin = std::min(n_out, n_units * t / n * unit), r_end = std::min(n_out, n_units * (t + 1) / n * unit);
    bf16_rows(xp, stride, m, w, n_out, n_in, r_begin, r_end, y);
  }
}

}  // namespace tp::cpu::detail
