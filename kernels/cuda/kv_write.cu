// Storing K and V into the paged pool by slot (kv_cache.h): kernel / launcher / entry. The conversions are the
// ones of kernels/cpu/kv_write.h, in the same float operations, so both pools hold the same bytes.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_layout.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {
namespace {

// round(x · inv) clamped to [-127, 127], ties to even; NaN -> 0 (kernels/cpu/kv_write.h's quantize_i8).
__device__ __forceinline__ int8_t quantize_i8(float x, float inv) {
  const float r = rintf(__fmul_rn(x, inv));
  return int8_t(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f);
}

// Every dtype but int8 with block scales: one block per (token, tensor); threads over the token's row.
// k, v: [n_tokens, n_kv_heads · head_dim] F32; slots: [n_tokens].
__global__ void write_kv_rows_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                     const int64_t* __restrict__ slots, dev::KvPoolDev k_pool, dev::KvPoolDev v_pool) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  const dev::KvPoolDev& l = blockIdx.y == 0 ? k_pool : v_pool;
  const int64_t n_row = l.n_kv_heads * l.head_dim;
  const float* src = (blockIdx.y == 0 ? k : v) + t * n_row;
  uint8_t* dst = l.blocks + (slot / l.block_size) * l.block_bytes + (slot % l.block_size) * l.row_bytes;
  const float inv_t = 1.0f / l.tensor_scale;
  for (int64_t i = threadIdx.x; i < n_row; i += blockDim.x) {
    switch (l.dtype) {
      case KvDType::F32:
        reinterpret_cast<float*>(dst)[i] = src[i];
        break;
      case KvDType::BF16:
        reinterpret_cast<uint16_t*>(dst)[i] = dev::f32_to_bf16_bits(src[i]);
        break;
      case KvDType::FP8_E4M3:
        dst[i] = dev::f32_to_e4m3(__fmul_rn(src[i], inv_t));
        break;
      case KvDType::INT8:
        dst[i] = uint8_t(quantize_i8(src[i], inv_t));
        break;
    }
  }
}

// int8 with block scales: one warp per (token, KV head, tensor). Only a token that starts a run of tokens in
// one block (its previous non-padding token lies in another block) does work: it stores its run in order,
// raising the block's scale and requantizing the rows before it exactly as the CPU does, so the order of
// operations per (block, head) is the CPU's.
__global__ void write_kv_int8_block_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                           const int64_t* __restrict__ slots, int64_t n_tokens,
                                           dev::KvPoolDev k_pool, dev::KvPoolDev v_pool) {
  const int64_t t0 = blockIdx.x, h = blockIdx.y;
  const int64_t slot0 = slots[t0];
  if (slot0 < 0) return;
  const dev::KvPoolDev& l = blockIdx.z == 0 ? k_pool : v_pool;
  const int64_t bs = l.block_size, blk_id = slot0 / bs;
  int64_t prev = t0 - 1;
  while (prev >= 0 && slots[prev] < 0) --prev;
  if (prev >= 0 && slots[prev] / bs == blk_id) return;  // not the first of its run
  const int64_t hd = l.head_dim, row = l.row_bytes, n_row = l.n_kv_heads * hd;
  const float* x = blockIdx.z == 0 ? k : v;
  uint8_t* blk = l.blocks + blk_id * l.block_bytes;
  float* scale_at = reinterpret_cast<float*>(blk + l.data_bytes + h * kKvScaleBytes);
  const int lane = threadIdx.x;
  for (int64_t t = t0; t < n_tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    if (slot / bs != blk_id) break;
    const int64_t off = slot % bs;
    const float* src = x + t * n_row + h * hd;
    float amax = 0.0f;
    for (int64_t d = lane; d < hd; d += dev::kWarp) amax = fmaxf(amax, fabsf(src[d]));
    amax = dev::warp_max(amax);
    const float need = amax / 127.0f;
    float s = *scale_at;
    if (off == 0) {
      s = need;
    } else if (need > s) {
      const float ratio = s / need;
      for (int64_t o = 0; o < off; ++o) {
        int8_t* q = reinterpret_cast<int8_t*>(blk + o * row + h * hd);
        for (int64_t d = lane; d < hd; d += dev::kWarp) q[d] = quantize_i8(float(q[d]), ratio);
      }
      s = need;
    }
    __syncwarp();
    if (lane == 0) *scale_at = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    int8_t* q = reinterpret_cast<int8_t*>(blk + off * row + h * hd);
    for (int64_t d = lane; d < hd; d += dev::kWarp) q[d] = quantize_i8(src[d], inv);
    __syncwarp();
  }
}

void launch_write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& kp,
                     const KvTensorView& vp, cudaStream_t stream) {
  const KvBlockLayout& l = kp.layout;
  if (l.block_scales()) {
    const dim3 grid(unsigned(n_tokens), unsigned(l.n_kv_heads), 2);
    write_kv_int8_block_kernel<<<grid, dev::kWarp, 0, stream>>>(k, v, slots, n_tokens, dev::KvPoolDev::from(kp),
                                                                  dev::KvPoolDev::from(vp));
    check_launch("write_kv_int8_block_kernel");
  } else {
    const dim3 grid(unsigned(n_tokens), 2);
    write_kv_rows_kernel<<<grid, row_threads(l.n_kv_heads * l.head_dim, 2), 0, stream>>>(
        k, v, slots, dev::KvPoolDev::from(kp), dev::KvPoolDev::from(vp));
    check_launch("write_kv_rows_kernel");
  }
}

}  // namespace

void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
              const KvTensorView& v_pool, cudaStream_t stream) {
  check_non_negative("cuda::write_kv", "n_tokens", n_tokens);
  check_kv_pools("cuda::write_kv", k_pool, v_pool, false);
  if (k_pool.layout.n_kv_heads > 65535) bad_argument("cuda::write_kv", "more than 65535 KV heads");
  if (n_tokens == 0) return;
  launch_write_kv(k, v, n_tokens, slots, k_pool, v_pool, stream);
}

}  // namespace tp::cuda
