// The powers of two of the FP8 decode kernels that read an E4M3 byte's F32 bits in place (gemm_a16_avx2.cpp on AVX2,
// gemm_fp8_avx512.cpp on Intel AVX-512): the sign to bit 31 and the 7 magnitude bits to 26..20 give value · 2⁻¹²⁰
// (E4M3's subnormals as F32 subnormals), multiplied by x · 2^k; y = the sum × 2^(120 − k).
#pragma once
#include <cmath>

namespace tp::cpu::detail {

// 2^e as two F32 factors (|e| ≤ 252: each half within F32's normal range), applied one after the other.
struct Pow2 {
  float a, b;
  explicit Pow2(int e) : a(std::ldexp(1.0f, e / 2)), b(std::ldexp(1.0f, e - e / 2)) {}
  float operator()(float v) const { return v * a * b; }
};

// The k that puts amax (max |x| of a row) in [2¹⁰⁰, 2¹⁰¹); 0 for a zero row or one with a NaN / infinity. The
// products of x · 2^k with value · 2⁻¹²⁰ (≥ 2⁻¹²⁹ but for 0) stay normal for every x within 2⁻⁷⁰ of amax, and their
// sums far below F32's range.
inline int fp8_x_exponent(float amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  int e;
  std::frexp(amax, &e);  // amax in [2^(e-1), 2^e)
  return 101 - e;
}

}  // namespace tp::cpu::detail
