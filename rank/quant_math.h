// Small F32 helpers of the quantizers (rank/quantize.cpp's calibration attention).
#pragma once
#include <cstdint>

namespace tp {

// Σ a[i]·b[i] over i in [0, n), in 8 interleaved partial sums (vectorizes; the order is fixed, so results are
// reproducible).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float v : acc) s += v;
  return s;
}

}  // namespace tp
