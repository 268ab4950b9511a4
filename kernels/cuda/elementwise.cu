// The residual add and the fill of the CUDA backend (ops.h): kernel / launcher / entry each.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/ops.h"

namespace tp::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>(dev::ceil_div(n, kThreads), 65535)); }

// x: [n] F32 += y: [n] F32. Grid-stride.
__global__ void add_inplace_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

// x: [n] F32 = value. Grid-stride.
__global__ void fill_kernel(float* __restrict__ x, int64_t n, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

}  // namespace

void add_inplace(float* x, const float* y, int64_t n, cudaStream_t stream) {
  check_non_negative("cuda::add_inplace", "n", n);
  if (n == 0) return;
  add_inplace_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("add_inplace_kernel");
}

void fill(float* x, int64_t n, float value, cudaStream_t stream) {
  check_non_negative("cuda::fill", "n", n);
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, value);
  check_launch("fill_kernel");
}

}  // namespace tp::cuda
