// Rotary position embedding, interleaved and neox, alone and fused with the split of the QKV output (ops.h):
// kernels / launchers / entries.
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

// Pair i of a head: its element indices (a, b) and the pair rotated by pos · theta_scale^i.
struct RopePair {
  int64_t a, b;
};
__device__ __forceinline__ RopePair rope_pair(int64_t i, int64_t half, bool interleaved) {
  return interleaved ? RopePair{2 * i, 2 * i + 1} : RopePair{i, i + half};
}
__device__ __forceinline__ void rotate(float x0, float x1, int32_t pos, int64_t i, float theta_scale, float* y0,
                                       float* y1) {
  float theta = float(pos);
  for (int64_t j = 0; j < i; ++j) theta *= theta_scale;
  float s, c;
  sincosf(theta, &s, &c);
  *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

__global__ void rope_kernel(float* x, int64_t n_heads, int64_t head_dim, const int32_t* __restrict__ positions,
                            float theta_scale, bool interleaved) {
  const int64_t t = blockIdx.x, half = head_dim / 2;
  const int64_t item = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (item >= n_heads * half) return;
  const int64_t h = item / half, i = item % half;
  float* v = x + (t * n_heads + h) * head_dim;
  const RopePair p = rope_pair(i, half, interleaved);
  rotate(v[p.a], v[p.b], positions[t], i, theta_scale, &v[p.a], &v[p.b]);
}

// The same grid over a fused QKV row's heads [q: n_heads | k: n_kv_heads | v: n_kv_heads]: q and k pairs rotated
// into q and k, v pairs copied into v. qkv: [n_tokens, n_heads + 2 n_kv_heads, head_dim]; q: [n_tokens, n_heads,
// head_dim]; k, v: [n_tokens, n_kv_heads, head_dim].
__global__ void split_qkv_rope_kernel(const float* __restrict__ qkv, int64_t n_heads, int64_t n_kv_heads,
                                      int64_t head_dim, const int32_t* __restrict__ positions, float theta_scale,
                                      bool interleaved, float* __restrict__ q, float* __restrict__ k,
                                      float* __restrict__ v) {
  const int64_t t = blockIdx.x, half = head_dim / 2, row_heads = n_heads + 2 * n_kv_heads;
  const int64_t item = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (item >= row_heads * half) return;
  const int64_t h = item / half, i = item % half;
  const RopePair p = rope_pair(i, half, interleaved);
  const float* src = qkv + (t * row_heads + h) * head_dim;
  const float x0 = src[p.a], x1 = src[p.b];
  if (h >= n_heads + n_kv_heads) {
    float* dst = v + (t * n_kv_heads + (h - n_heads - n_kv_heads)) * head_dim;
    dst[p.a] = x0;
    dst[p.b] = x1;
    return;
  }
  float* dst = h < n_heads ? q + (t * n_heads + h) * head_dim : k + (t * n_kv_heads + (h - n_heads)) * head_dim;
  rotate(x0, x1, positions[t], i, theta_scale, &dst[p.a], &dst[p.b]);
}

void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 float theta_scale, bool interleaved, cudaStream_t stream) {
  const dim3 grid(unsigned(n_tokens), unsigned(dev::ceil_div(n_heads * (head_dim / 2), int64_t(kRopeThreads))));
  rope_kernel<<<grid, kRopeThreads, 0, stream>>>(x, n_heads, head_dim, positions, theta_scale, interleaved);
  check_launch("rope_kernel");
}

void launch_split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                           const int32_t* positions, float theta_scale, bool interleaved, float* q, float* k, float* v,
                           cudaStream_t stream) {
  const int64_t items = (n_heads + 2 * n_kv_heads) * (head_dim / 2);
  const dim3 grid(unsigned(n_tokens), unsigned(dev::ceil_div(items, int64_t(kRopeThreads))));
  split_qkv_rope_kernel<<<grid, kRopeThreads, 0, stream>>>(qkv, n_heads, n_kv_heads, head_dim, positions, theta_scale,
                                                           interleaved, q, k, v);
  check_launch("split_qkv_rope_kernel");
}

void check_rope_args(const char* entry, int64_t n_tokens, int64_t n_heads, int64_t head_dim) {
  check_non_negative(entry, "n_tokens", n_tokens);
  check_positive(entry, "n_heads", n_heads);
  check_positive(entry, "head_dim", head_dim);
  if (head_dim % 2 != 0) bad_argument(entry, "head_dim " + std::to_string(head_dim) + " is odd");
}

// As the CPU computes it, on the host.
float theta_scale_of(float base, int64_t head_dim) { return std::pow(base, -2.0f / float(head_dim)); }

}  // namespace

void split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    const int32_t* positions, float base, RopeStyle style, float* q, float* k, float* v,
                    cudaStream_t stream) {
  check_rope_args("cuda::split_qkv_rope", n_tokens, n_heads, head_dim);
  check_positive("cuda::split_qkv_rope", "n_kv_heads", n_kv_heads);
  if (n_tokens == 0) return;
  launch_split_qkv_rope(qkv, n_tokens, n_heads, n_kv_heads, head_dim, positions, theta_scale_of(base, head_dim),
                        style == RopeStyle::Interleaved, q, k, v, stream);
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
          RopeStyle style, cudaStream_t stream) {
  check_rope_args("cuda::rope", n_tokens, n_heads, head_dim);
  if (n_tokens == 0) return;
  launch_rope(x, n_tokens, n_heads, head_dim, positions, theta_scale_of(base, head_dim),
              style == RopeStyle::Interleaved, stream);
}

}  // namespace tp::cuda
