// Elementwise and row-wise ops. Numerics follow llama.cpp's CPU backend where we compare logits with it:
// rmsnorm sums squares in double and applies (x * scale) * weight; rope builds its angles by repeated
// multiplication with theta_scale = base^(-2/head_dim) (ggml_rope_cache_init); silu_mul: silu.cpp.
#include "kernels/cpu/ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu {

namespace {
// Parallelize a loop over rows when it touches at least this many floats.
constexpr int64_t kParallelMinFloats = 1 << 15;
}  // namespace

void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < dim; ++i) sum += double(xr[i] * xr[i]);
    const float mean = float(sum / double(dim));
    const float scale = 1.0f / std::sqrt(mean + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] * scale) * weight[i];
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
