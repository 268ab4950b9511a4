// F32 arrays rounded to BF16 by common/dtype.h's f32_to_bf16 rule (round to nearest even, a NaN kept quiet): the
// same bits as the scalar for every input, AVX-512 where the CPU has it. What oneDNN's BF16 matmul (x of a prefill),
// the BF16 GEMV (x of a decode step) and the BF16 KV cache (each written K / V row) take.
#pragma once
#include <cstdint>

namespace tp::cpu::detail {

// out[i] = f32_to_bf16(x[i]) for i < n.
void round_bf16(const float* x, int64_t n, uint16_t* out);

}  // namespace tp::cpu::detail
