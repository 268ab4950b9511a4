// AVX2 + FMA GEMV/GEMM tiles, for CPUs without AVX-512 (AMD Zen 2/3, older Xeons). Tiles of kRows weight
// rows × up to kCols activation rows (4 × 2: 8 accumulators + 4 weight vectors fit the 16 ymm registers).
// BF16 weights are widened to F32 in registers (a BF16 value is the high half of an F32) and multiplied with
// x already rounded to BF16 and widened to F32, so each product is exact and sums accumulate in F32, as on
// the other paths. These also serve as the BF16 GEMM where oneDNN has no BF16 matmul (no AVX-512): the tile's
// weight rows stay in L1 while every activation row streams past them.
#include <immintrin.h>

#include "common/dtype.h"
#include "kernels/cpu/gemv.h"

namespace tp::cpu::detail {

namespace {

constexpr int kRows = 4;
constexpr int kCols = 2;

#define TP_AVX2 __attribute__((target("avx2,fma")))

TP_AVX2 inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

TP_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TP_AVX2 inline __m256 load8(const uint16_t* p) {  // 8 BF16 -> 8 F32
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return bf16_to_f32(v); }

// y[g * y_stride + r] = dot(w row r, x row g) for r < R, g < G; x rows are F32 (x_stride apart).
template <typename T, int R, int G>
TP_AVX2 void tile(const T* w, int64_t n_in, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n_in; k += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8(w + r * n_in + k);
    for (int g = 0; g < G; ++g) {
      const __m256 xv = _mm256_loadu_ps(x + g * x_stride + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(wv[r], xv, acc[r][g]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) {
      float s = hsum(acc[r][g]);
      for (int64_t j = k; j < n_in; ++j) s += widen(w[r * n_in + j]) * x[g * x_stride + j];
      y[g * y_stride + r] = s;
    }
}

template <typename T>
using TileFn = void (*)(const T*, int64_t, const float*, int64_t, float*, int64_t);

template <typename T, int R>
constexpr TileFn<T> row_fns[kCols] = {tile<T, R, 1>, tile<T, R, 2>};
template <typename T>
constexpr const TileFn<T>* table[kRows] = {row_fns<T, 1>, row_fns<T, 2>, row_fns<T, 3>, row_fns<T, 4>};

template <typename T>
void run(const float* x, int64_t x_stride, int64_t m, const T* w, int64_t n_out, int64_t n_in, float* y,
         int n_threads) {
  const int64_t n_tiles = (n_out + kRows - 1) / kRows;
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * int64_t(sizeof(T)) * ((m + 1) / 2));
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t r0 = t * kRows;
    const int rows = int(n_out - r0 < kRows ? n_out - r0 : kRows);
    for (int64_t g0 = 0; g0 < m; g0 += kCols) {
      const int cols = int(m - g0 < kCols ? m - g0 : kCols);
      table<T>[rows - 1][cols - 1](w + r0 * n_in, n_in, x + g0 * x_stride, x_stride, y + g0 * n_out + r0, n_out);
    }
  }
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void gemv_f32_avx2(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y, int n_threads) {
  run<float>(x, n_in, m, w, n_out, n_in, y, n_threads);
}

void gemv_bf16_avx2(const float* xr, int64_t m, const uint16_t* w, int64_t n_out, int64_t n_in, float* y,
                    int n_threads) {
  run<uint16_t>(xr, n_in, m, w, n_out, n_in, y, n_threads);
}

}  // namespace tp::cpu::detail
