// The small float formats of quantized weights and activations, as scalars (the reference the kernels are
// tested against; kernels use their own vector forms):
//   E4M3 (FP8, "e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN;
//        max 448; subnormals 2^-6 · m/8.
//   E2M1 (FP4): 1 sign, 2 exponent (bias 1), 1 mantissa bit: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
//   E8M0 (MX block scales): 2^(e - 127); e = 255 is NaN.
#pragma once
#include <cstdint>

namespace tp {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;

float fp8_e4m3_to_f32(uint8_t v);
// Round to nearest even, saturating to ±448 (NaN stays NaN).
uint8_t f32_to_fp8_e4m3(float f);
float e2m1_to_f32(uint8_t nibble);   // the low 4 bits
uint8_t f32_to_e2m1(float f);        // round to nearest (ties to even), saturating to ±6
float e8m0_to_f32(uint8_t e);

}  // namespace tp
