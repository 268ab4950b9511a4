// BF16 GEMV for decode (gemm.h): BF16 weights, F32 activations rounded to BF16 as they are read (the same
// products as convert_f32_to_bf16 + gemm_bf16, without the conversion kernel), F32 accumulation. Kernel /
// launcher / entry.
//
// One warp per output feature: lanes read 8 weights (one 16-byte load) at a time, four loads in flight a lane;
// the M activation rows are read through the cache (every warp of the grid reads them: 8 KiB a row at k 2048);
// warp sum, store. On an H200 (ncu of launch/gpu-check's 1B model, batch-1 decode): cuBLASLt's M = 1 GEMMs took
// 42 µs a layer for its 90 MB (~2.2 TB/s) plus a conversion kernel before each; this kernel 35 µs (gate_up 46 MB
// 14.2 µs = 3.2 TB/s, down 23 MB 9.4 µs, qkv 13 MB 6.1 µs, o 8 MB 5.2 µs; lm_head 131 MB 33 µs = 3.9 TB/s). The
// small shapes are latency-bound (~3 µs of ramp and tail); the datasheet's peak is 4.8 TB/s.
#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
// 16-byte weight loads a lane issues before using them. Measured on an H200 at M = 1: 8 (112 registers, 2 blocks
// an SM) was slower than 4 (64 registers, 4 blocks an SM) for every shape of the 1B model (46 MB 15.1 vs 14.2 µs).
constexpr int kLoadsInFlight = 4;

// v rounded to the nearest BF16 (even on ties), as F32.
__device__ __forceinline__ float round_bf16(float v) { return dev::bf16_bits_to_f32(dev::f32_to_bf16_bits(v)); }

// Σ over 8 elements of bf16(x[i]) · w[i]; w: 8 BF16 packed little-endian in 4 words (element 2i in the low half).
__device__ __forceinline__ float dot8(const uint4& w, const float4& a, const float4& b) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = fmaf(round_bf16(xs[2 * i]), __uint_as_float(u[i] << 16), s);
    s = fmaf(round_bf16(xs[2 * i + 1]), __uint_as_float(u[i] & 0xffff0000u), s);
  }
  return s;
}

// acc[r] += the products of chunk c (8 elements) of W's row with x's row r, r < M.
template <int M>
__device__ __forceinline__ void accumulate(float (&acc)[M], const float* __restrict__ x, int64_t k,
                                           const uint4& packed, int64_t c) {
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float4* xr = reinterpret_cast<const float4*>(x + r * k) + 2 * c;
    acc[r] += dot8(packed, __ldg(xr), __ldg(xr + 1));
  }
}

// x: [M, k] F32 (16-byte aligned rows: k % 8 == 0); w: [n, k] BF16 (16-byte aligned); y: [M, n] F32.
template <int M>
__global__ void __launch_bounds__(kWarpsPerBlock* dev::kWarp, M == 1 ? 4 : 2)
    gemv_bf16_kernel(const float* __restrict__ x, const uint16_t* __restrict__ w, int64_t n, int64_t k,
                     float* __restrict__ y) {
  const int lane = threadIdx.x % dev::kWarp;
  const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarp;
  if (j >= n) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + j * k);
  const int64_t chunks = k / 8;
  float acc[M] = {};
  int64_t c = lane;
  for (; c + (kLoadsInFlight - 1) * dev::kWarp < chunks; c += kLoadsInFlight * dev::kWarp) {
    uint4 packed[kLoadsInFlight];  // all loads issued before the first product
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) packed[u] = __ldg(wr + c + u * dev::kWarp);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) accumulate(acc, x, k, packed[u], c + u * dev::kWarp);
  }
  for (; c < chunks; c += dev::kWarp) accumulate(acc, x, k, __ldg(wr + c), c);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float v = dev::warp_sum(acc[r]);
    if (lane == 0) y[r * n + j] = v;
  }
}

template <int M>
void launch_rows(const float* x, const uint16_t* w, int64_t n, int64_t k, float* y, cudaStream_t stream) {
  const unsigned blocks = unsigned(dev::ceil_div(n, kWarpsPerBlock));
  gemv_bf16_kernel<M><<<blocks, kWarpsPerBlock * dev::kWarp, 0, stream>>>(x, w, n, k, y);
  check_launch("gemv_bf16_kernel");
}

}  // namespace

void gemv_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y, cudaStream_t stream) {
  constexpr const char* kEntry = "cuda::gemv_bf16";
  check_non_negative(kEntry, "m", m);
  check_positive(kEntry, "n", n);
  check_positive(kEntry, "k", k);
  if (m > kGemvBf16MaxRows)
    bad_argument(kEntry, "m " + std::to_string(m) + " is above " + std::to_string(kGemvBf16MaxRows) + " (use gemm_bf16)");
  if (k % 8 != 0) bad_argument(kEntry, "k " + std::to_string(k) + " is not a multiple of 8");
  check_aligned(kEntry, "x", x, 16);
  check_aligned(kEntry, "w", w, 16);
  switch (m) {
    case 0: return;
    case 1: launch_rows<1>(x, w, n, k, y, stream); break;
    case 2: launch_rows<2>(x, w, n, k, y, stream); break;
    case 3: launch_rows<3>(x, w, n, k, y, stream); break;
    default: launch_rows<4>(x, w, n, k, y, stream); break;
  }
}

}  // namespace tp::cuda
