// FP8 activation quantization per token and the FP8 GEMM's scale epilogue (gemm.h): kernel / launcher / entry
// each.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kTinyAmax = 1e-12f;  // an all-zero row gets this amax, so its scale is finite and > 0

template <typename T>
__device__ __forceinline__ float load_act(const T* x, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return x[i];
  else
    return dev::bf16_bits_to_f32(x[i]);
}

// One block per row. x: [m, k] of T; xq: [m, k] E4M3; x_scale: [m] F32.
template <typename T>
__global__ void quantize_fp8_per_token_kernel(const T* __restrict__ x, int64_t k, uint8_t* __restrict__ xq,
                                              float* __restrict__ x_scale) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(load_act(xr, i)));
  amax = dev::block_max(amax, scratch);
  const float s = fmaxf(amax, kTinyAmax) / kE4m3Max;
  if (threadIdx.x == 0) x_scale[r] = s;
  uint8_t* q = xq + r * k;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) q[i] = dev::f32_to_e4m3(load_act(xr, i) / s);
}

template <typename T>
void launch_quantize(const T* x, int64_t m, int64_t k, uint8_t* xq, float* x_scale, cudaStream_t stream) {
  quantize_fp8_per_token_kernel<T><<<unsigned(m), row_threads(k, 4), 0, stream>>>(x, k, xq, x_scale);
  check_launch("quantize_fp8_per_token_kernel");
}

// y: [m, n] F32 in place; row_scale: [m]; col_scale: [n]. Grid-stride over the elements.
__global__ void scale_rows_cols_kernel(float* __restrict__ y, int64_t m, int64_t n, const float* __restrict__ row_scale,
                                       const float* __restrict__ col_scale) {
  const int64_t total = m * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] *= row_scale[i / n] * col_scale[i % n];
}

}  // namespace

void quantize_fp8_per_token(const void* x, DType x_type, int64_t m, int64_t k, uint8_t* xq, float* x_scale,
                            cudaStream_t stream) {
  check_non_negative("cuda::quantize_fp8_per_token", "m", m);
  check_positive("cuda::quantize_fp8_per_token", "k", k);
  if (m == 0) return;
  if (x_type == DType::F32)
    launch_quantize(static_cast<const float*>(x), m, k, xq, x_scale, stream);
  else if (x_type == DType::BF16)
    launch_quantize(static_cast<const uint16_t*>(x), m, k, xq, x_scale, stream);
  else
    bad_argument("cuda::quantize_fp8_per_token", "x type must be F32 or BF16");
}

void scale_rows_cols(float* y, int64_t m, int64_t n, const float* row_scale, const float* col_scale,
                     cudaStream_t stream) {
  check_non_negative("cuda::scale_rows_cols", "m", m);
  check_positive("cuda::scale_rows_cols", "n", n);
  if (m == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(dev::ceil_div(m * n, kThreads), 65535);
  scale_rows_cols_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(y, m, n, row_scale, col_scale);
  check_launch("scale_rows_cols_kernel");
}

}  // namespace tp::cuda
