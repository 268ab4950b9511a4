// Paged attention over the KV pool for decode and chunked prefill, GQA, online softmax, split-K over long
// contexts (kv_cache.h): kernels / launcher / entry.
//
// Work item: one query token × one KV head × one chunk of up to kMaxGroupHeads query heads of that KV head ×
// one split (a range of part_tokens key positions). The item's kWarps warps take the keys of its range
// round-robin; each warp keeps, per query head, a running max m, sum l and output acc (lane holds dims lane +
// 32e), reads each K and V row once for all the heads of the chunk, and the warps merge through shared
// memory. With one split the item writes the normalized output; with more it writes (m, l, acc) to the
// workspace and attention_combine_kernel merges the splits.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/kv_layout.cuh"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kG = kMaxGroupHeads;

struct BatchDev {
  const int32_t* token_seq;
  const int32_t* token_pos;
  const int32_t* block_tables;
  int64_t max_blocks_per_seq;
  int64_t part_tokens;  // key positions per split
  int n_splits;
};

__device__ __forceinline__ int64_t kv_elem_bytes(KvDType t) {
  return t == KvDType::F32 ? 4 : t == KvDType::BF16 ? 2 : 1;
}

// The scale of KV head h in a block (block scales) or the tensor's.
__device__ __forceinline__ float kv_scale(const dev::KvPoolDev& p, const uint8_t* block, int64_t h) {
  return p.block_scales ? *reinterpret_cast<const float*>(block + p.data_bytes + h * kKvScaleBytes) : p.tensor_scale;
}

// q: [n_tokens, n_heads, 32·E] F32; out: [n_tokens, n_heads, 32·E] F32 (n_splits == 1);
// ws_m, ws_l: [n_tokens, n_heads, n_splits]; ws_acc: [n_tokens, n_heads, n_splits, 32·E] (n_splits > 1).
template <int E>
__global__ void __launch_bounds__(kWarps* dev::kWarp)
    paged_attention_kernel(const float* __restrict__ q, int64_t n_heads, int64_t n_kv_heads, int n_chunks,
                           BatchDev batch, dev::KvPoolDev kp, dev::KvPoolDev vp, float scale,
                           float* __restrict__ out, float* __restrict__ ws_m, float* __restrict__ ws_l,
                           float* __restrict__ ws_acc) {
  constexpr int kD = E * dev::kWarp;
  __shared__ float sm[kWarps][kG], sl[kWarps][kG], sacc[kWarps][kG][kD];
  const int64_t t = blockIdx.x;
  const int64_t hk = blockIdx.y / n_chunks, chunk = blockIdx.y % n_chunks;
  const int split = int(blockIdx.z);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t h0 = hk * group + chunk * kG;
  const int g = int(min(int64_t(kG), group - chunk * kG));
  const int lane = threadIdx.x % dev::kWarp, warp = threadIdx.x / dev::kWarp;

  const int64_t seq = batch.token_seq[t];
  const int64_t ctx = int64_t(batch.token_pos[t]) + 1;
  const int64_t begin = int64_t(split) * batch.part_tokens;
  const int64_t end = min(ctx, begin + batch.part_tokens);
  const int32_t* table = batch.block_tables + seq * batch.max_blocks_per_seq;

  float qr[kG][E], acc[kG][E], m[kG], l[kG];
#pragma unroll
  for (int j = 0; j < kG; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      acc[j][e] = 0.0f;
      qr[j][e] = j < g ? q[(t * n_heads + h0 + j) * kD + lane + dev::kWarp * e] * scale : 0.0f;
    }
  }

  const int64_t k_head_off = hk * kD * kv_elem_bytes(kp.dtype), v_head_off = hk * kD * kv_elem_bytes(vp.dtype);
  for (int64_t p = begin + warp; p < end; p += kWarps) {
    const int64_t blk = table[p / kp.block_size], off = p % kp.block_size;
    const uint8_t* kb = kp.blocks + blk * kp.block_bytes;
    const uint8_t* vb = vp.blocks + blk * vp.block_bytes;
    const uint8_t* krow = kb + off * kp.row_bytes + k_head_off;
    const uint8_t* vrow = vb + off * vp.row_bytes + v_head_off;
    const float ks = kv_scale(kp, kb, hk), vs = kv_scale(vp, vb, hk);
    float kv[E], vv[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      kv[e] = dev::kv_load(krow, kp.dtype, lane + dev::kWarp * e);
      vv[e] = dev::kv_load(vrow, vp.dtype, lane + dev::kWarp * e) * vs;
    }
#pragma unroll
    for (int j = 0; j < kG; ++j) {
      if (j >= g) break;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot += qr[j][e] * kv[e];
      const float s = dev::warp_sum(dot) * ks;
      const float mn = fmaxf(m[j], s);
      const float corr = expf(m[j] - mn);  // 0 for the first key (m = -inf)
      const float w = expf(s - mn);
      l[j] = l[j] * corr + w;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[j][e] = acc[j][e] * corr + w * vv[e];
      m[j] = mn;
    }
  }

#pragma unroll
  for (int j = 0; j < kG; ++j) {
    if (lane == 0) {
      sm[warp][j] = m[j];
      sl[warp][j] = l[j];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sacc[warp][j][lane + dev::kWarp * e] = acc[j][e];
  }
  __syncthreads();

  for (int j = warp; j < g; j += kWarps) {
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm[w][j]);
    float sum = 0.0f, o[E] = {};
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm[w][j] == -INFINITY ? 0.0f : expf(sm[w][j] - mx);
      sum += sl[w][j] * f;
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += sacc[w][j][lane + dev::kWarp * e] * f;
    }
    const int64_t th = t * n_heads + h0 + j;
    if (batch.n_splits == 1) {
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) out[th * kD + lane + dev::kWarp * e] = o[e] * inv;
    } else {
      const int64_t ws = th * batch.n_splits + split;
      if (lane == 0) {
        ws_m[ws] = mx;
        ws_l[ws] = sum;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) ws_acc[ws * kD + lane + dev::kWarp * e] = o[e];
    }
  }
}

// Merges the splits: one block per (token, head), one thread per dim. ws_*: as above; out as above.
__global__ void attention_combine_kernel(const float* __restrict__ ws_m, const float* __restrict__ ws_l,
                                         const float* __restrict__ ws_acc, int n_splits, int64_t head_dim,
                                         float* __restrict__ out) {
  const int64_t th = int64_t(blockIdx.x) * gridDim.y + blockIdx.y;
  const float* m = ws_m + th * n_splits;
  const float* l = ws_l + th * n_splits;
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, m[s]);
  float sum = 0.0f;
  for (int s = 0; s < n_splits; ++s) sum += m[s] == -INFINITY ? 0.0f : l[s] * expf(m[s] - mx);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < n_splits; ++s)
      if (m[s] != -INFINITY) o += ws_acc[(th * n_splits + s) * head_dim + d] * expf(m[s] - mx);
    out[th * head_dim + d] = o * inv;
  }
}

template <int E>
void launch_attention(const float* q, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, const BatchDev& b,
                      const dev::KvPoolDev& kp, const dev::KvPoolDev& vp, float scale, float* out, float* ws,
                      cudaStream_t stream) {
  const int64_t group = n_heads / n_kv_heads;
  const int n_chunks = int((group + kG - 1) / kG);
  const int64_t n_th = n_tokens * n_heads * b.n_splits;
  float* ws_m = b.n_splits > 1 ? ws : nullptr;
  float* ws_l = b.n_splits > 1 ? ws + n_th : nullptr;
  float* ws_acc = b.n_splits > 1 ? ws + 2 * n_th : nullptr;
  const dim3 grid(unsigned(n_tokens), unsigned(n_kv_heads * n_chunks), unsigned(b.n_splits));
  paged_attention_kernel<E><<<grid, kWarps * dev::kWarp, 0, stream>>>(q, n_heads, n_kv_heads, n_chunks, b, kp, vp,
                                                                      scale, out, ws_m, ws_l, ws_acc);
  check_launch("paged_attention_kernel");
  if (b.n_splits > 1) {
    attention_combine_kernel<<<dim3(unsigned(n_tokens), unsigned(n_heads)), E * dev::kWarp, 0, stream>>>(
        ws_m, ws_l, ws_acc, b.n_splits, E * dev::kWarp, out);
    check_launch("attention_combine_kernel");
  }
}

}  // namespace

void paged_attention(const float* q, int64_t n_tokens, int64_t n_heads, const AttentionBatch& batch,
                     const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                     void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kEntry = "cuda::paged_attention";
  check_kv_pools(kEntry, k_pool, v_pool, true);
  check_non_negative(kEntry, "n_tokens", n_tokens);
  check_positive(kEntry, "n_heads", n_heads);
  check_positive(kEntry, "max_context", batch.max_context);
  check_positive(kEntry, "max_blocks_per_seq", batch.max_blocks_per_seq);
  const int64_t n_kv = k_pool.layout.n_kv_heads, hd = k_pool.layout.head_dim;
  if (n_heads % n_kv != 0)
    bad_argument(kEntry, "n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " +
                             std::to_string(n_kv));
  if (batch.n_splits < 1 || batch.n_splits > kMaxSplits)
    bad_argument(kEntry, "n_splits " + std::to_string(batch.n_splits) + " is outside [1, " +
                             std::to_string(kMaxSplits) + "]");
  const int64_t need = attention_workspace_bytes(n_tokens, n_heads, hd, batch.n_splits);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need))
    bad_argument(kEntry, "workspace of " + std::to_string(workspace_bytes) + " bytes, " + std::to_string(need) +
                             " needed for " + std::to_string(batch.n_splits) + " splits");
  if (batch.token_seq == nullptr || batch.token_pos == nullptr || batch.block_tables == nullptr)
    bad_argument(kEntry, "the batch lacks token_seq, token_pos or block_tables");
  if (n_tokens == 0) return;
  const BatchDev b{batch.token_seq, batch.token_pos, batch.block_tables, batch.max_blocks_per_seq,
                   (batch.max_context + batch.n_splits - 1) / batch.n_splits, batch.n_splits};
  const auto kp = dev::KvPoolDev::from(k_pool), vp = dev::KvPoolDev::from(v_pool);
  float* ws = static_cast<float*>(workspace);
  switch (hd) {
    case 32: launch_attention<1>(q, n_tokens, n_heads, n_kv, b, kp, vp, scale, out, ws, stream); break;
    case 64: launch_attention<2>(q, n_tokens, n_heads, n_kv, b, kp, vp, scale, out, ws, stream); break;
    case 128: launch_attention<4>(q, n_tokens, n_heads, n_kv, b, kp, vp, scale, out, ws, stream); break;
    default: launch_attention<8>(q, n_tokens, n_heads, n_kv, b, kp, vp, scale, out, ws, stream); break;
  }
}

}  // namespace tp::cuda
