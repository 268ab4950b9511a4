// Elementwise and row-wise CPU ops of the Llama forward. F32 activations, row-major.
#pragma once
#include <cstdint>

#include "common/dtype.h"
#include "common/model_config.h"

namespace tp::cpu {

// out[n, dim] = x / sqrt(mean(x²) + eps) * weight[dim]. out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// In-place rotary embedding of x[n_tokens, n_heads, head_dim] at positions[n_tokens].
// theta_i = pos * base^(-2i/head_dim), i in [0, head_dim/2).
//   Interleaved: pairs (2i, 2i+1).  Neox: pairs (i, i + head_dim/2).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style);

// out[n, dim] = silu(gate) * up, where gate_up is [n, 2*dim] = [gate | up] per row.
void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out);
// silu_mul on one code path (silu.cpp; tests: each path where this CPU has it, else false and nothing written).
enum class SiluPath { Portable, Avx2, Avx512 };
bool silu_mul_path(const float* gate_up, int64_t n, int64_t dim, float* out, SiluPath path);

// out[n, hidden] = rows ids[n] of table [vocab, hidden] (type F32/F16/BF16/Q8_0/Q4_0/Q4_1), as F32.
// row_stride = bytes between rows of table.
void embedding(const void* table, DType type, int64_t row_stride, int64_t hidden, const int32_t* ids, int64_t n,
               float* out);

// x[n] += y[n]
void add_inplace(float* x, const float* y, int64_t n);

// x[n, dim] += y; out = rmsnorm(x) — the bits of add_inplace then rmsnorm, a row at a time. out may alias y.
void add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps, float* out);

}  // namespace tp::cpu
