// The kernels/cuda entry points the CUDA backend (rank/cuda_backend.cpp) calls: host functions taking device
// pointers and the stream they enqueue on, no synchronization inside. This header states the contract the
// kernels of kernels/cuda provide (their definitions live there; this file is replaced by their header at the
// merge if the names differ). Shapes as kernels/cpu/ops.h and the Backend (rank/backend.h); F32 activations.
// Every entry validates its arguments (InputError) and checks the launch (tp::Error naming the kernel).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/kv_dtype.h"
#include "common/model_config.h"
#include "common/packed_weight.h"

namespace tp::cuda {

// out[n, hidden] = rows ids[n] of table (rows [row_begin, row_end) of the full table, stored from row_begin:
// table row r is at table + (r - row_begin) * row_stride), type F32/F16/BF16/Q8_0/Q4_0/Q4_1, as F32; with
// zero_outside an id outside [row_begin, row_end) gives a zero row.
void embedding(const void* table, DType type, int64_t row_stride, int64_t hidden, int64_t row_begin, int64_t row_end,
               bool zero_outside, const int32_t* ids, int64_t n, float* out, cudaStream_t stream);
// out[n, dim] = x / sqrt(mean(x²) + eps) * weight[dim]; out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out, cudaStream_t stream);
// x[n] += y[n]
void add_inplace(float* x, const float* y, int64_t n, cudaStream_t stream);
// In place on x[n_tokens, n_heads, head_dim] at positions[n_tokens] (device).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style, cudaStream_t stream);
// out[n, dim] = silu(gate) * up, gate_up [n, 2 dim].
void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out, cudaStream_t stream);
// x[n] = value
void fill(float* x, int64_t n, float value, cudaStream_t stream);
// k, v [n_tokens, n_kv_heads, head_dim] into the pools (device views) at slots[n_tokens] (device; -1 skips).
void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
              const KvTensorView& v_pool, cudaStream_t stream);
// One sequence's causal attention (kernels/cpu/paged_attention.h); block_table on the device.
void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                     const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out,
                     cudaStream_t stream);
// y[m, n_out] = x[m, n_in] · Wᵀ with cuBLASLt: W dense F32 or BF16 [n_out, n_in] row-major on the device
// (BF16: x rounded to BF16, F32 accumulation, as the CPU). workspace: [workspace_bytes] device scratch.
void linear(cublasLtHandle_t lt, const float* x, int64_t m, const void* w, DType w_dtype, int64_t n_out, int64_t n_in,
            float* y, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace tp::cuda
