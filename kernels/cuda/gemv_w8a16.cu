// W8A16 GEMV for decode (gemm.h): int8 weights with a per-channel F32 scale, F32 or BF16 activations, F32
// accumulation. Kernel / launcher / entry.
//
// One warp per output feature: lanes read 16 weight bytes at a time (one 16-byte load), the M activation rows
// are read through the cache (they are small and every warp reads them), warp sum, scale, store.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxRows = 8;  // activation rows per pass

template <typename T>
__device__ __forceinline__ float act(const T* x, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return __ldg(x + i);
  else
    return dev::bf16_bits_to_f32(__ldg(x + i));
}

// x: [M, k] of T; w: [n, k] int8 (16-byte aligned rows: k % 16 == 0); w_scale: [n]; y: [M, n] F32.
template <int M, typename T>
__global__ void __launch_bounds__(kWarpsPerBlock* dev::kWarp)
    gemv_w8a16_kernel(const T* __restrict__ x, const int8_t* __restrict__ w, const float* __restrict__ w_scale,
                      int64_t n, int64_t k, float* __restrict__ y) {
  const int lane = threadIdx.x % dev::kWarp;
  const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarp;
  if (j >= n) return;
  const int4* wr = reinterpret_cast<const int4*>(w + j * k);
  float acc[M] = {};
  for (int64_t c = lane; c < k / 16; c += dev::kWarp) {
    const int4 packed = __ldg(wr + c);
    const int8_t* q = reinterpret_cast<const int8_t*>(&packed);
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const T* xr = x + r * k + c * 16;
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) s += float(q[i]) * act(xr, i);
      acc[r] += s;
    }
  }
  const float scale = w_scale[j];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float v = dev::warp_sum(acc[r]);
    if (lane == 0) y[r * n + j] = v * scale;
  }
}

template <int M, typename T>
void launch_rows(const T* x, const int8_t* w, const float* w_scale, int64_t n, int64_t k, float* y,
                 cudaStream_t stream) {
  const unsigned blocks = unsigned(dev::ceil_div(n, kWarpsPerBlock));
  gemv_w8a16_kernel<M, T><<<blocks, kWarpsPerBlock * dev::kWarp, 0, stream>>>(x, w, w_scale, n, k, y);
  check_launch("gemv_w8a16_kernel");
}

template <typename T>
void launch_gemv(const T* x, int64_t m, const int8_t* w, const float* w_scale, int64_t n, int64_t k, float* y,
                 cudaStream_t stream) {
  for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
    const T* xr = x + r0 * k;
    float* yr = y + r0 * n;
    switch (std::min<int64_t>(kMaxRows, m - r0)) {
      case 1: launch_rows<1>(xr, w, w_scale, n, k, yr, stream); break;
      case 2: launch_rows<2>(xr, w, w_scale, n, k, yr, stream); break;
      case 3: launch_rows<3>(xr, w, w_scale, n, k, yr, stream); break;
      case 4: launch_rows<4>(xr, w, w_scale, n, k, yr, stream); break;
      case 5: launch_rows<5>(xr, w, w_scale, n, k, yr, stream); break;
      case 6: launch_rows<6>(xr, w, w_scale, n, k, yr, stream); break;
      case 7: launch_rows<7>(xr, w, w_scale, n, k, yr, stream); break;
      default: launch_rows<8>(xr, w, w_scale, n, k, yr, stream); break;
    }
  }
}

}  // namespace

void gemv_w8a16(const void* x, DType x_type, int64_t m, const int8_t* w, const float* w_scale, int64_t n, int64_t k,
                float* y, cudaStream_t stream) {
  constexpr const char* kEntry = "cuda::gemv_w8a16";
  check_non_negative(kEntry, "m", m);
  check_positive(kEntry, "n", n);
  check_positive(kEntry, "k", k);
  if (k % 16 != 0) bad_argument(kEntry, "k " + std::to_string(k) + " is not a multiple of 16");
  check_aligned(kEntry, "w", w, 16);
  if (m == 0) return;
  if (x_type == DType::F32)
    launch_gemv(static_cast<const float*>(x), m, w, w_scale, n, k, y, stream);
  else if (x_type == DType::BF16)
    launch_gemv(static_cast<const uint16_t*>(x), m, w, w_scale, n, k, y, stream);
  else
    bad_argument(kEntry, "x type must be F32 or BF16");
}

}  // namespace tp::cuda
