// Elementwise and row-wise ops. Numerics follow llama.cpp's CPU backend where we compare logits with it:
// rmsnorm sums squares in double and applies (x * scale) * weight; rope builds its angles by repeated
// multiplication with theta_scale = base^(-2/head_dim) (ggml_rope_cache_init); silu_mul: silu.cpp.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized once inlined (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/ops.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu {

namespace {
// Parallelize a loop over rows when it touches at least this many floats.
constexpr int64_t kParallelMinFloats = 1 << 15;

// One row of rmsnorm: the squares x·x in F32, summed in double; out = (x · scale) · weight.
// AVX-512: 16 squares a step widened into 4 chains of 8 double lanes (the portable loop, 4 lanes in 2 chains of
// SSE2 adds, ran at the adds' latency: 3 % of a 2-thread W8A8 prefill on the AMX Xeon). The double sum's order
// differs between the two; the F32 mean rounded from it differs only where the sum sits within a double rounding
// of a float's rounding boundary. Each path gives a row the same bits wherever and however often it is called.
__attribute__((target("avx512f"))) float sum_squares_avx512(const float* xr, int64_t dim) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32)
    for (int64_t h = 0; h < 2; ++h) {
      const __m512 v = _mm512_loadu_ps(xr + i + 16 * h);
      const __m512 sq = _mm512_mul_ps(v, v);
      acc[2 * h] = _mm512_add_pd(acc[2 * h], _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
      acc[2 * h + 1] = _mm512_add_pd(
          acc[2 * h + 1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
  for (; i + 16 <= dim; i += 16) {
    const __m512 v = _mm512_loadu_ps(xr + i);
    const __m512 sq = _mm512_mul_ps(v, v);
    acc[0] = _mm512_add_pd(acc[0], _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
    acc[1] = _mm512_add_pd(acc[1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
  }
  double sum = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(acc[0], acc[1]), _mm512_add_pd(acc[2], acc[3])));
  for (; i < dim; ++i) sum += double(xr[i] * xr[i]);
  return float(sum / double(dim));
}

__attribute__((target("avx512f"))) void scale_row_avx512(const float* xr, const float* weight, int64_t dim, float scale,
                                                         float* o) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16)
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xr + i), s), _mm512_loadu_ps(weight + i)));
  for (; i < dim; ++i) o[i] = (xr[i] * scale) * weight[i];
}

// Not inlined: rmsnorm and add_rmsnorm run the very same instructions on a row.
[[gnu::noinline]] void rmsnorm_row(const float* xr, const float* weight, int64_t dim, float eps, float* o) {
  static const bool avx512 = detail::cpu_has_avx512f();
  if (avx512) {
    const float scale = 1.0f / std::sqrt(sum_squares_avx512(xr, dim) + eps);
    scale_row_avx512(xr, weight, dim, scale, o);
    return;
  }
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) sum += double(xr[i] * xr[i]);
  const float mean = float(sum / double(dim));
  const float scale = 1.0f / std::sqrt(mean + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] * scale) * weight[i];
}
}  // namespace

void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < n; ++r) rmsnorm_row(x + r * dim, weight, dim, eps, out + r * dim);
}

void add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  // A row at a time, its add and its norm while it is in L1: one pass over x and y instead of two (at prefill x and y
  // are 1.2 MiB each on SmolLM2, and the second pass read them back from L3).
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < n; ++r) {
    float* xr = x + r * dim;
    const float* yr = y + r * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) xr[i] += yr[i];
    rmsnorm_row(xr, weight, dim, eps, out + r * dim);
  }
}

namespace {
// cos / sin of the rope angles of positions (theta_i = pos · theta_scale^i, built by repeated multiplication),
// kept per thread for a run of consecutive positions [lo, lo + len) (at most kMaxRun): a prefill chunk ropes q
// and k of every layer at the same consecutive positions, so only the first of its 2 · layers calls computes them
// (libm's sincos of every token's angles was ~1.3% of a 512-token prefill when one position was kept), and a
// decode step of one sequence at one position. A position outside the run and not next after it starts a new
// run. Each position's values are the ones computed for it alone.
struct RopeTable {
  static constexpr int64_t kMaxRun = 8192;
  int64_t half = 0;
  float theta_scale = 0.0f;
  int64_t lo = 0, len = 0;
  std::vector<float> cs;  // position lo + k: cos at cs[k · 2 · half], sin after it
  // The cos table of position p (the sin table follows it, half values on); valid until the next call.
  const float* get(int32_t p, int64_t h, float ts) {
    if (h != half || ts != theta_scale) half = h, theta_scale = ts, len = 0;
    int64_t k = int64_t(p) - lo;
    if (len > 0 && k >= 0 && k < len) return cs.data() + k * 2 * h;
    if (len == 0 || k != len || len == kMaxRun) lo = p, len = 0, k = 0;
    cs.resize(size_t((len + 1) * 2 * h));
    float* c = cs.data() + k * 2 * h;
    float theta = float(p);
    for (int64_t i = 0; i < h; ++i) {
      c[i] = std::cos(theta);
      c[h + i] = std::sin(theta);
      theta *= ts;
    }
    ++len;
    return c;
  }
};
}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style) {
  if (head_dim % 2 != 0) throw InputError("rope: head_dim " + std::to_string(head_dim) + " is odd");
  const int64_t half = head_dim / 2;
  const float theta_scale = std::pow(base, -2.0f / float(head_dim));
#pragma omp parallel num_threads(num_threads()) if (n_tokens * n_heads * head_dim >= kParallelMinFloats)
  {
    thread_local RopeTable table;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* cos_t = table.get(positions[t], half, theta_scale);
      const float* sin_t = cos_t + half;
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        if (style == RopeStyle::Interleaved) {
          for (int64_t i = 0; i < half; ++i) {
            const float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
            v[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cos_t[i] - x1 * sin_t[i];
            v[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
          }
        }
      }
    }
  }
}

void embedding(const void* table, DType type, int64_t row_stride, int64_t hidden, const int32_t* ids, int64_t n,
               float* out) {
  if (hidden % dtype_block_elems(type) != 0)
    throw InputError("embedding: hidden " + std::to_string(hidden) + " is not a multiple of the " +
                     std::string(dtype_name(type)) + " block size");
  const auto* base = static_cast<const uint8_t*>(table);
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n * hidden >= kParallelMinFloats)
  for (int64_t i = 0; i < n; ++i) dequantize_row(type, base + int64_t(ids[i]) * row_stride, out + i * hidden, hidden);
}

void add_inplace(float* x, const float* y, int64_t n) {
  // Prefill-sized calls over the threads in contiguous parts (a serial residual add left the other thread waiting
  // ~1.5% of a 2-thread 512-token prefill); a decode step's (one row) in this thread.
  const int nt = n >= kParallelMinFloats * 4 ? num_threads() : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t per = (n + omp_get_num_threads() - 1) / omp_get_num_threads();
    const int64_t b = std::min(n, per * omp_get_thread_num()), e = std::min(n, b + per);
#pragma omp simd
    for (int64_t i = b; i < e; ++i) x[i] += y[i];
  }
}

}  // namespace tp::cpu
