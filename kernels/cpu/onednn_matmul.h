// Private to kernels/cpu: linear() through oneDNN matmul, for large M.
// Primitives are cached per calling thread by (m, n_out, n_in, dtype, thread count: oneDNN fixes a primitive's
// threads when it is made, so a process that changes the count, such as gemv_bench, must not reuse one made
// before). Weights: the plain row-major buffer is the transposed [n_in, n_out] matrix in format "ba"; the
// primitive is created with format "any", and when oneDNN wants a blocked layout the Weight keeps one reordered
// copy per layout (Weight::gemm_cache_), made on first use — measured 1.1-4x faster than letting oneDNN read "ba"
// (BF16, AMX, M = 16..512).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace tp::cpu {
class Weight;
}

namespace tp::cpu::detail {

// y[m, n_out] = x[m, n_in] · Wᵀ. BF16 weights: x rounded to BF16 into a thread-local buffer first. BF16 weights
// on AMX with m <= kAmxGemmMaxM, where oneDNN wants its BA16a64b2a copy: gemm_bf16_amx on that copy instead of
// oneDNN's matmul (set_amx_gemm(false) restores it).
void onednn_linear(const float* x, int64_t m, const Weight& w, float* y, int n_threads);

// y[m, n_out] (rows ldy floats apart) = x[m, n_in] · Wᵀ with x and W already BF16, W plain row-major
// [n_out, n_in] (a scratch the caller filled: read as it is, no reordered copy kept). F32 accumulation. The
// primitive is cached per calling thread by (m, n_out, n_in, ldy), like onednn_linear's.
void onednn_matmul_bf16(const uint16_t* x, int64_t m, int64_t n_in, const uint16_t* w, int64_t n_out, float* y,
                        int64_t ldy, int n_threads);
// The same with x and W in F32 (W a per-call scratch, e.g. a quantized weight decoded for one prefill GEMM).
void onednn_matmul_f32(const float* x, int64_t m, int64_t n_in, const float* w, int64_t n_out, float* y, int64_t ldy,
                       int n_threads);

// Bytes of the reordered copies w holds for oneDNN.
int64_t gemm_cache_bytes(const Weight& w);

// Whether oneDNN has a matmul for this weight dtype on this CPU (BF16 needs AVX-512: none on AVX2-only CPUs
// such as AMD Zen 2/3). Probed once per dtype by creating a small primitive.
bool onednn_supports(DType weight_dtype);

}  // namespace tp::cpu::detail
