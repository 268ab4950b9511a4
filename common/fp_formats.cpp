#include "common/fp_formats.h"

#include <bit>
#include <cmath>
#include <limits>

namespace tp {

float fp8_e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xF, man = v & 7;
  if (exp == 0xF && man == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(float(man) / 8.0f, -6);
  return sign * std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return uint8_t(sign | 0x7E);  // 448 = 1.110 · 2^8
  // Nearest of the representable values: try the two neighbours on the grid of a's binade.
  int e;
  std::frexp(a, &e);            // a = m · 2^e, m in [0.5, 1)
  int exp = e - 1 + 7;          // biased exponent of a's binade
  if (exp < 1) exp = 1;         // subnormal range shares the step of exponent 1
  const float step = std::ldexp(1.0f, exp - 7 - 3);
  float q = std::nearbyint(a / step) * step;  // round to nearest even (default rounding mode)
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  const int qexp = qe - 1 + 7;
  if (qexp <= 0) return uint8_t(sign | uint8_t(std::lround(q / std::ldexp(1.0f, -9))));  // subnormal: m · 2^-9
  const int man = int(std::lround((q / std::ldexp(1.0f, qexp - 7) - 1.0f) * 8.0f));
  return uint8_t(sign | uint8_t(qexp << 3) | uint8_t(man));
}

float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

uint8_t f32_to_e2m1(float f) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::isnan(f) ? 0.0f : std::fabs(f);
  uint8_t best = 0;
  for (uint8_t i = 1; i < 8; ++i) {
    const float d = std::fabs(a - kValues[i]), db = std::fabs(a - kValues[best]);
    if (d < db || (d == db && (i % 2) == 0)) best = i;  // a tie goes to the even code (mantissa 0)
  }
  return uint8_t(sign | best);
}

float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(e) - 127);
}

}  // namespace tp
