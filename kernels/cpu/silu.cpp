// silu_mul (ops.h): out[r][i] = silu(gate[r][i]) · up[r][i], silu(g) = g / (1 + e^-g), 16 (AVX-512) or 8 (AVX2)
// elements at a time with simd_exp.h's exp, else the scalar loop with std::exp. The vector forms take e = e^-|g|
// (never overflows): g ≥ 0: g / (1 + e) · u; g < 0: (g · e) / (1 + e) · u — the same value, ~2 ulp from the
// scalar loop's. Each element gets the same operations wherever it sits in the row (the tail through a mask or a
// padded copy), so a row's bits do not depend on its length's remainder or on the batch.
// Prefill spends a real share here (pp512 on SmolLM2: 23.6M elements; with libm's expf one at a time it was
// 11-13% of the prefill's time on a Xeon core: bench/results/xeon-amx-kernels-20261203.md).
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized once inlined (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd_exp.h"

namespace tp::cpu {
namespace {

// Parallelize over rows when the call touches at least this many floats (as ops.cpp's row ops).
constexpr int64_t kParallelMinFloats = 1 << 15;

__attribute__((target("avx512f"))) inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 e = detail::exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
  const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 num = _mm512_mask_mul_ps(g, neg, g, e);
  return _mm512_mul_ps(_mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

__attribute__((target("avx512f"))) void row_avx512(const float* g, const float* u, int64_t dim, float* o) {
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) _mm512_storeu_ps(o + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  if (i < dim) {
    const __mmask16 k = __mmask16((1u << (dim - i)) - 1);
    _mm512_mask_storeu_ps(o + i, k, silu_mul16(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, u + i)));
  }
}

__attribute__((target("avx2,fma"))) inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 e = detail::exp8(_mm256_or_ps(g, sign));  // -|g|
  const __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), neg);
  return _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

__attribute__((target("avx2,fma"))) void row_avx2(const float* g, const float* u, int64_t dim, float* o) {
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) _mm256_storeu_ps(o + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < dim) {
    alignas(32) float gt[8] = {}, ut[8] = {}, ot[8];
    for (int64_t j = i; j < dim; ++j) gt[j - i] = g[j], ut[j - i] = u[j];
    _mm256_store_ps(ot, silu_mul8(_mm256_load_ps(gt), _mm256_load_ps(ut)));
    for (int64_t j = i; j < dim; ++j) o[j] = ot[j - i];
  }
}

void row_portable(const float* g, const float* u, int64_t dim, float* o) {
  for (int64_t i = 0; i < dim; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

using RowFn = void (*)(const float*, const float*, int64_t, float*);

void rows(RowFn row, const float* gate_up, int64_t n, int64_t dim, float* out) {
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < n; ++r) row(gate_up + r * 2 * dim, gate_up + r * 2 * dim + dim, dim, out + r * dim);
}

}  // namespace

void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) {
  static const RowFn row = detail::cpu_has_avx512f() ? row_avx512 : detail::cpu_has_avx2() ? row_avx2 : row_portable;
  rows(row, gate_up, n, dim, out);
}

bool silu_mul_path(const float* gate_up, int64_t n, int64_t dim, float* out, SiluPath path) {
  if ((path == SiluPath::Avx512 && !detail::cpu_has_avx512f()) || (path == SiluPath::Avx2 && !detail::cpu_has_avx2()))
    return false;
  rows(path == SiluPath::Avx512 ? row_avx512 : path == SiluPath::Avx2 ? row_avx2 : row_portable, gate_up, n, dim, out);
  return true;
}

}  // namespace tp::cpu
