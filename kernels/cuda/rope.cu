// Rotary position embedding, interleaved and neox (ops.h): kernel / launcher / entry.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/ops.h"

namespace tp::cuda {
namespace {

// Thread per (token, head, pair): grid (n_tokens, ceil(n_heads · half / kThreads)); block y's threads cover
// consecutive (head, pair) items of its token, so every SM takes part even for one token (a block per token with
// a loop over the heads was latency-bound: 10.5 µs a call for one token of 32 heads on an H200). x: [n_tokens,
// n_heads, head_dim] F32 in place; positions: [n_tokens]. The angle is built as kernels/cpu/ops.cpp builds it:
// pos times theta_scale, i times (the same float rounding), then precise sinf / cosf.
constexpr int kRopeThreads = 128;

__global__ void rope_kernel(float* x, int64_t n_heads, int64_t head_dim, const int32_t* __restrict__ positions,
                            float theta_scale, bool interleaved) {
  const int64_t t = blockIdx.x, half = head_dim / 2;
  const int64_t item = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (item >= n_heads * half) return;
  const int64_t h = item / half, i = item % half;
  float theta = float(positions[t]);
  for (int64_t j = 0; j < i; ++j) theta *= theta_scale;
  float s, c;
  sincosf(theta, &s, &c);
  float* v = x + (t * n_heads + h) * head_dim;
  const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
  const float x0 = v[a], x1 = v[b];
  v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 float theta_scale, bool interleaved, cudaStream_t stream) {
  const dim3 grid(unsigned(n_tokens), unsigned(dev::ceil_div(n_heads * (head_dim / 2), int64_t(kRopeThreads))));
  rope_kernel<<<grid, kRopeThreads, 0, stream>>>(x, n_heads, head_dim, positions, theta_scale, interleaved);
  check_launch("rope_kernel");
}

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style, cudaStream_t stream) {
  check_non_negative("cuda::rope", "n_tokens", n_tokens);
  check_positive("cuda::rope", "n_heads", n_heads);
  check_positive("cuda::rope", "head_dim", head_dim);
  if (head_dim % 2 != 0) bad_argument("cuda::rope", "head_dim " + std::to_string(head_dim) + " is odd");
  if (n_tokens == 0) return;
  const float theta_scale = std::pow(base, -2.0f / float(head_dim));  // as the CPU computes it, on the host
  launch_rope(x, n_tokens, n_heads, head_dim, positions, theta_scale, style == RopeStyle::Interleaved, stream);
}

}  // namespace tp::cuda
