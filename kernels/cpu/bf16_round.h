// F32 arrays rounded to BF16 by common/dtype.h's f32_to_bf16 rule (round to nearest even, a NaN kept quiet): the
// same bits as the scalar for every input, AVX-512 where the CPU has it. What oneDNN's BF16 matmul (x of a prefill),
// the BF16 GEMV (x of a decode step) and the BF16 KV cache (each written K / V row) take.
#pragma once
#include <cstdint>

namespace tp::cpu::detail {

// out[i] = f32_to_bf16(x[i]) for i < n.
void round_bf16(const float* x, int64_t n, uint16_t* out);
// out[i] = bf16_to_f32(f32_to_bf16(x[i])): the same rounding, kept as F32 (out may be x).
void round_bf16_f32(const float* x, int64_t n, float* out);

}  // namespace tp::cpu::detail
