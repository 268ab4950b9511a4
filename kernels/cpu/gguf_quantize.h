// Quantizing F32 weights into GGUF blocks exactly as llama.cpp's reference quantizers do (ggml-quants.c
// quantize_row_{q8_0,q4_0,q4_1,q5_0,q4_K,q6_K}_ref: the ones llama-quantize runs when no importance matrix
// is given), so `tpserve convert --to gguf-*` writes the blocks llama-quantize writes: the same float
// operations in the same order. Measured on SmolLM2 (tests/rank/quant_peer_test.cpp): every tensor of the
// Q8_0, Q4_0, Q4_1, Q4_K_M, pure Q4_K and pure Q6_K files is bit-identical to llama-quantize's (llama.cpp
// built -march=native on this Zen 2; an FMA contraction there that we do not make could move a value on a
// rounding boundary by one code elsewhere — the test would count it).
// Block layouts: common/dtype.h.
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace tp::cpu {

// Quantizes n elements of x (n a multiple of dtype_block_elems(t)) into dtype_row_bytes(t, n) bytes at dst.
// t: Q8_0, Q4_0, Q4_1, Q5_0, Q4_K or Q6_K; throws tp::Error for another type.
void quantize_row_gguf(DType t, const float* x, void* dst, int64_t n);

}  // namespace tp::cpu
