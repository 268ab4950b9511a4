// GEMMs and GEMVs of the CUDA backend: y = x · Wᵀ with W [n_out, n_in] row-major (one output feature a row) and
// x [m, n_in], y [m, n_out] row-major — the convention of kernels/cpu/linear.h. Plain C++ header; device
// pointers; enqueued on `stream`, no synchronization. BF16 values as uint16_t bit patterns, E4M3 as uint8_t.
//   gemm_bf16:   cuBLASLt, BF16 x and W, F32 accumulation, F32 or BF16 y.
//   gemm_fp8:    cuBLASLt E4M3 x E4M3 on sm_89+ (Hopper: sm_90a), F32 accumulation; per-token activation
//                scales (quantize_fp8_per_token) and per-channel weight scales applied by a small epilogue
//                kernel: y[i, j] = x_scale[i] · w_scale[j] · Σ_k xq[i, k] · wq[j, k].
//   gemv_bf16:   our kernel for decode (m <= 4): BF16 W, F32 x rounded to BF16 as it is read (gemm_bf16's
//                products with no conversion kernel before it), F32 accumulation and y.
//   gemv_w8a16:  our kernel for decode (small m): int8 W with a per-channel F32 scale, F32 or BF16 x.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "common/dtype.h"

namespace tp::cuda {

// A cuBLASLt handle and its workspace on the current device, and per GEMM shape (types, m, n, k) its descriptors
// and algorithm, chosen by cuBLASLt's heuristic on first use and kept. One per stream user (not thread-safe).
class Blas {
 public:
  explicit Blas(int64_t workspace_bytes = int64_t(32) << 20);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y[m, n] (y_type F32 or BF16) = x[m, k] (BF16) · w[n, k]ᵀ (BF16). Pointers 16-byte aligned; k and n even.
void gemm_bf16(Blas& blas, const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, void* y,
               DType y_type, cudaStream_t stream);

// y[m, n] F32 = bf16(x[m, k]) · w[n, k]ᵀ (BF16 W; x F32, each element rounded to the nearest BF16 before its
// product, as convert_f32_to_bf16 would), F32 accumulation. m <= kGemvBf16MaxRows, k a multiple of 8, x and w
// 16-byte aligned; y any alignment. One pass over W for all m rows.
inline constexpr int64_t kGemvBf16MaxRows = 4;
void gemv_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, cudaStream_t stream);

// Dynamic per-token quantization: x_scale[i] = max(max_k |x[i, k]|, tiny) / 448, xq[i, k] = e4m3(x[i, k] /
// x_scale[i]) (round to nearest even, saturating). x: [m, k] F32 or BF16; xq: [m, k] E4M3; x_scale: [m] F32.
void quantize_fp8_per_token(const void* x, DType x_type, int64_t m, int64_t k, uint8_t* xq, float* x_scale,
                            cudaStream_t stream);

// y[m, n] F32 = (x_scale[m] ⊗ w_scale[n]) · (xq[m, k] · wq[n, k]ᵀ), E4M3 inputs. k a multiple of 16, pointers
// 16-byte aligned. Throws tp::Error when cuBLASLt has no FP8 kernel on this device (before sm_89).
void gemm_fp8(Blas& blas, const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale,
              int64_t m, int64_t n, int64_t k, float* y, cudaStream_t stream);

// The FP8 epilogue alone: y[m, n] *= row_scale[m] · col_scale[n] (F32, in place).
void scale_rows_cols(float* y, int64_t m, int64_t n, const float* row_scale, const float* col_scale,
                     cudaStream_t stream);

// y[m, n] F32 = x[m, k] (x_type F32 or BF16) · (w[n, k] (int8) · w_scale[n] (F32))ᵀ, F32 accumulation. k a
// multiple of 16, w 16-byte aligned. Meant for decode (m <= 8 per pass; larger m loops over row groups).
void gemv_w8a16(const void* x, DType x_type, int64_t m, const int8_t* w, const float* w_scale, int64_t n, int64_t k,
                float* y, cudaStream_t stream);

}  // namespace tp::cuda
