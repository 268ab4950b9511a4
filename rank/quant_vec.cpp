#include "rank/quant_vec.h"

#include <algorithm>
#include <cstring>

// GCC vector extensions: one v4d is 4 doubles (one AVX register; two SSE2 registers on baseline x86-64).
// Values travel between clones through memory (GCC 12 miscompiles vector arguments of target_clones).
#define TP_QUANT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace tp::quant_vec {

namespace {

typedef double v4d __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));

inline v4d load4(const double* p) {
  v4d v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr int kLockstep = 8;  // dots per lockstep pass (8 accumulators + operands fit the AVX2 registers)

}  // namespace

TP_QUANT_CLONES double dot4_finish(const double* s, const double* a, const double* b, int64_t done, int64_t n) {
  v4d acc = load4(s);
  int64_t k = done;
  for (; k + 4 <= n; k += 4) acc += load4(a + k) * load4(b + k);
  double s0 = acc[0];
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + acc[1]) + (acc[2] + acc[3]);
}

double dot4(const double* a, const double* b, int64_t n) {
  const double zero[4] = {0, 0, 0, 0};
  return dot4_finish(zero, a, b, 0, n);
}

namespace {

// acc[i] += the groups 0 .. chunks-1 of 4 of a[i]·b[i], for kLockstep dots.
TP_QUANT_CLONES void lockstep(const double* const* a, const double* const* b, int64_t chunks, double (*s)[4]) {
  v4d acc[kLockstep];
  for (int i = 0; i < kLockstep; ++i) acc[i] = load4(s[i]);
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 8
    for (int i = 0; i < kLockstep; ++i) acc[i] += load4(a[i] + 4 * c) * load4(b[i] + 4 * c);
  }
  for (int i = 0; i < kLockstep; ++i) std::memcpy(s[i], &acc[i], sizeof acc[i]);
}

}  // namespace

void dot4_many(int count, const double* const* a, const double* const* b, const int64_t* n, double* out) {
  for (int i0 = 0; i0 < count; i0 += kLockstep) {
    const int m = std::min(kLockstep, count - i0);
    int64_t chunks = n[i0];
    for (int i = 0; i < m; ++i) chunks = std::min(chunks, n[i0 + i] / 4);
    double s[kLockstep][4] = {};
    const double* pa[kLockstep];
    const double* pb[kLockstep];
    for (int i = 0; i < kLockstep; ++i) {  // unused slots repeat the last dot (their sums are dropped)
      pa[i] = a[i0 + std::min(i, m - 1)];
      pb[i] = b[i0 + std::min(i, m - 1)];
    }
    if (chunks > 0) lockstep(pa, pb, chunks, s);
    for (int i = 0; i < m; ++i) out[i0 + i] = dot4_finish(s[i], a[i0 + i], b[i0 + i], 4 * chunks, n[i0 + i]);
  }
}

void dot4_prefix(int count, const double* a, const double* const* b, int64_t len, double (*s)[4]) {
  if (len <= 0) return;
  for (int i0 = 0; i0 < count; i0 += kLockstep) {
    const int m = std::min(kLockstep, count - i0);
    double t[kLockstep][4];
    const double* pa[kLockstep];
    const double* pb[kLockstep];
    for (int i = 0; i < kLockstep; ++i) {
      pa[i] = a;
      pb[i] = b[i0 + std::min(i, m - 1)];
      std::memcpy(t[i], s[i0 + std::min(i, m - 1)], sizeof t[i]);
    }
    lockstep(pa, pb, len / 4, t);
    for (int i = 0; i < m; ++i) std::memcpy(s[i0 + i], t[i], sizeof t[i]);
  }
}

TP_QUANT_CLONES void sub_scaled(float* y, const float* x, float a, int64_t n) {
  for (int64_t r = 0; r < n; ++r) y[r] -= x[r] * a;
}

TP_QUANT_CLONES void add_scaled(float* y, const float* x, float a, int64_t n) {
  for (int64_t r = 0; r < n; ++r) y[r] += x[r] * a;
}

TP_QUANT_CLONES float dot8_f32(const float* a, const float* b, int64_t n) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += load8(a + i) * load8(b + i);
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}

}  // namespace tp::quant_vec
