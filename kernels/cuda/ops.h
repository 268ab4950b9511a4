// Elementwise and row-wise CUDA ops of the Llama forward (the CUDA side of kernels/cpu/ops.h). Plain C++ header:
// usable from .cpp code compiled without nvcc. Every pointer is a device pointer; every op is enqueued on
// `stream` and returns without synchronizing. Arguments are checked on the host before the launch (InputError
// "<op>: <why>"); a launch failure throws tp::Error.
//
// Activation convention of the CUDA backend: the residual stream and every activation are F32 (as on the CPU);
// the inputs of the BF16 GEMMs are BF16. The ops that produce a GEMM input (rmsnorm, silu_mul) take the output
// type (F32 or BF16), so the conversion is fused; convert_f32_to_bf16 does it for the rest (attention out).
// BF16 values are passed as their uint16_t bit patterns.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/model_config.h"

namespace tp::cuda {

// Vocab-parallel embedding: out[n, hidden] (F32) = row ids[i] - vocab_begin of table [vocab_local, hidden]
// (F32 or BF16, rows contiguous) when ids[i] lies in [vocab_begin, vocab_begin + vocab_local); zeros otherwise
// (another rank owns that row; the all-reduce over the TP group sums the shards).
void embedding(const void* table, DType table_type, int64_t vocab_begin, int64_t vocab_local, int64_t hidden,
               const int32_t* ids, int64_t n, float* out, cudaStream_t stream);

// RMSNorm with a fused residual add. x, residual: [n, dim] F32; weight: [dim] F32; out: [n, dim] of out_type
// (F32 or BF16).
//   residual == nullptr: out = x / sqrt(mean(x²) + eps) * weight.
//   otherwise:           residual += x, then out = rmsnorm(residual) * weight (vLLM's fused_add_rms_norm).
// out may alias x (F32 out).
void rmsnorm(const float* x, float* residual, const float* weight, int64_t n, int64_t dim, float eps, void* out,
             DType out_type, cudaStream_t stream);

// In-place rotary embedding of x [n_tokens, n_heads, head_dim] (F32) at positions [n_tokens] (int32), as
// kernels/cpu/ops.h's rope: theta_i = pos · base^(-2i/head_dim) built by repeated multiplication,
// Interleaved: pairs (2i, 2i+1); Neox: pairs (i, i + head_dim/2). head_dim even.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style, cudaStream_t stream);

// The split of a fused QKV projection's output with rope on q and k, in one launch: qkv [n_tokens, n_heads +
// 2 n_kv_heads, head_dim] F32 (rows [q heads | k heads | v heads]) -> q [n_tokens, n_heads, head_dim] and
// k [n_tokens, n_kv_heads, head_dim] rotated as rope() rotates them, v [n_tokens, n_kv_heads, head_dim] copied.
// No output may overlap qkv.
void split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    const int32_t* positions, float base, RopeStyle style, float* q, float* k, float* v,
                    cudaStream_t stream);

// out[n, dim] (out_type F32 or BF16) = silu(gate) · up, gate_up [n, 2·dim] F32 = [gate | up] per row.
void silu_mul(const float* gate_up, int64_t n, int64_t dim, void* out, DType out_type, cudaStream_t stream);

// x[n] (F32) += y[n] (F32): the residual add where it is not fused into rmsnorm.
void add_inplace(float* x, const float* y, int64_t n, cudaStream_t stream);

// x[n] (F32) = value.
void fill(float* x, int64_t n, float value, cudaStream_t stream);

// out[n] (BF16 bits) = bf16(x[n]), round to nearest even.
void convert_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace tp::cuda
