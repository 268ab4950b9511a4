// Sampling helpers over rows of logits (sampling.h): argmax, and the filtered distribution (temperature,
// top_k, min_p, top_p). Kernel / launcher / entry each.
//
// sampling_probs needs no sort: one block per row finds each cut by bisection over the bits of a monotone key
// (a float's bits mapped so unsigned order is float order), one block-wide count or sum over the row per bit,
// and breaks ties at a cut by a second bisection over token ids (lower ids kept first, as rank/sampler.cpp).
// About 32-100 passes over the row: cheap next to the lm_head GEMM that produced it.
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/sampling.h"

namespace tp::cuda {
namespace {

constexpr int kThreads = 512;

// Unsigned key with the order of the floats (NaN aside).
__device__ __forceinline__ uint32_t float_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <typename T>
__device__ T block_reduce_sum(T v, T* scratch) {
  const int lane = threadIdx.x % dev::kWarp, warp = threadIdx.x / dev::kWarp;
#pragma unroll
  for (int o = dev::kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < int(blockDim.x / dev::kWarp); ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// The (value, index) of the largest logit in row [vocab], lowest index on a tie; every thread gets it.
__device__ void row_argmax(const float* row, int64_t vocab, float* best_v, int64_t* best_i) {
  __shared__ float sv[kThreads / dev::kWarp];
  __shared__ int64_t si[kThreads / dev::kWarp];
  float v = -INFINITY;
  int64_t idx = INT64_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (idx == INT64_MAX || row[i] > v) {  // ids ascend per thread: the first of equal values stays
      v = row[i];
      idx = i;
    }
#pragma unroll
  for (int o = dev::kWarp / 2; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
  const int lane = threadIdx.x % dev::kWarp, warp = threadIdx.x / dev::kWarp;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  v = sv[0];
  idx = si[0];
  for (int w = 1; w < int(blockDim.x / dev::kWarp); ++w)
    if (sv[w] > v || (sv[w] == v && si[w] < idx)) {
      v = sv[w];
      idx = si[w];
    }
  __syncthreads();
  *best_v = v;
  *best_i = idx;
}

// logits: [n_rows, vocab]; idx: [n_rows].
__global__ void argmax_rows_kernel(const float* __restrict__ logits, int64_t vocab, int32_t* __restrict__ idx) {
  float v;
  int64_t i;
  row_argmax(logits + int64_t(blockIdx.x) * vocab, vocab, &v, &i);
  if (threadIdx.x == 0) idx[blockIdx.x] = int32_t(i);
}

// Which tokens a cut keeps: key > cut, or key == cut and id < id_end.
struct Cut {
  uint32_t key = 0;
  int64_t id_end = INT64_MAX;
  __device__ bool keeps(uint32_t k, int64_t i) const { return k > key || (k == key && i < id_end); }
};

// The row's state while its cuts are found: logits, max, temperature, the top-k cut, min_p, the top-p cut.
struct RowState {
  const float* row;
  int64_t vocab;
  float max_logit, temperature, min_p;
  bool use_top_k, use_top_p;
  Cut top_k, top_p;

  __device__ bool in_top_k(int64_t i) const { return !use_top_k || top_k.keeps(float_key(row[i]), i); }
  // The softmax weight of token i (the largest is 1), 0 when top_k drops it.
  __device__ float weight(int64_t i) const {
    return in_top_k(i) ? expf((row[i] - max_logit) / temperature) : 0.0f;
  }
  __device__ bool kept_before_top_p(int64_t i, float w) const { return w > 0.0f && w >= min_p && in_top_k(i); }
};

// The smallest id_end such that count(key == cut_key && id < id_end) >= need; ids in [0, vocab) (< 2^31).
template <typename KeyOf>
__device__ int64_t tie_end(int64_t vocab, uint32_t cut_key, int64_t need, KeyOf key_of, int64_t* scratch) {
  int64_t lo = 0;  // the largest end known to keep fewer than need
  for (int bit = 30; bit >= 0; --bit) {
    const int64_t cand = lo | (int64_t(1) << bit);
    int64_t c = 0;
    for (int64_t i = threadIdx.x; i < vocab && i < cand; i += blockDim.x) c += key_of(i) == cut_key;
    if (block_reduce_sum(c, scratch) < need) lo = cand;
  }
  return lo + 1;
}

// One block per row. logits: [n_rows, vocab]; params: [n_rows]; probs: [n_rows, vocab].
__global__ void __launch_bounds__(kThreads)
    sampling_probs_kernel(const float* __restrict__ logits, int64_t vocab, const RowSampling* __restrict__ params,
                          float* __restrict__ probs) {
  __shared__ int64_t iscratch[kThreads / dev::kWarp];
  __shared__ double dscratch[kThreads / dev::kWarp];
  const RowSampling p = params[blockIdx.x];
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  float* out = probs + int64_t(blockIdx.x) * vocab;
  float max_logit;
  int64_t arg;
  row_argmax(row, vocab, &max_logit, &arg);
  if (p.temperature == 0.0f) {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) out[i] = i == arg ? 1.0f : 0.0f;
    return;
  }
  RowState st{row, vocab, max_logit, p.temperature, p.min_p, p.top_k > 0 && p.top_k < vocab, p.top_p < 1.0f, {}, {}};

  // top_k: the largest key K with count(key >= K) >= k, then the lowest ids among the ties at K.
  if (st.use_top_k) {
    const int64_t k = p.top_k;
    auto key_of = [&](int64_t i) { return float_key(row[i]); };
    uint32_t cut = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = cut | (1u << bit);
      int64_t c = 0;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) c += key_of(i) >= cand;
      if (block_reduce_sum(c, iscratch) >= k) cut = cand;
    }
    int64_t gt = 0, eq = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      gt += key_of(i) > cut;
      eq += key_of(i) == cut;
    }
    gt = block_reduce_sum(gt, iscratch);
    eq = block_reduce_sum(eq, iscratch);
    st.top_k.key = cut;
    st.top_k.id_end = gt + eq > k ? tie_end(vocab, cut, k - gt, key_of, iscratch) : INT64_MAX;
  }

  // Σ w over the top-k set (the denominator top_p is a fraction of, before min_p).
  double total_all = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) total_all += st.weight(i);
  total_all = block_reduce_sum(total_all, dscratch);

  // top_p: the largest weight key K whose mass S(K) = Σ_{kept, key(w) >= K} w reaches the target, then as many
  // ties at K (lowest ids first) as the target needs. No cut when even the whole kept set falls short.
  if (st.use_top_p) {
    const double target = double(p.top_p) * total_all;
    auto mass_ge = [&](uint32_t cand) {
      double s = 0.0;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = st.weight(i);
        if (st.kept_before_top_p(i, w) && __float_as_uint(w) >= cand) s += w;
      }
      return block_reduce_sum(s, dscratch);
    };
    if (mass_ge(0) < target) {
      st.use_top_p = false;
    } else {
      uint32_t cut = 0;
      for (int bit = 30; bit >= 0; --bit) {
        const uint32_t cand = cut | (1u << bit);
        if (mass_ge(cand) >= target) cut = cand;
      }
      const double above = mass_ge(cut + 1);
      const float w_cut = __uint_as_float(cut);
      int64_t eq = 0;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float w = st.weight(i);
        eq += st.kept_before_top_p(i, w) && __float_as_uint(w) == cut;
      }
      eq = block_reduce_sum(eq, iscratch);
      int64_t need = int64_t(ceil((target - above) / double(w_cut)));
      need = need < 1 ? 1 : need > eq ? eq : need;
      auto key_of = [&](int64_t i) {
        const float w = st.weight(i);
        return st.kept_before_top_p(i, w) ? __float_as_uint(w) : 0u;
      };
      st.top_p.key = cut;
      st.top_p.id_end = need < eq ? tie_end(vocab, cut, need, key_of, iscratch) : INT64_MAX;
    }
  }

  auto final_weight = [&](int64_t i) {
    const float w = st.weight(i);
    if (!st.kept_before_top_p(i, w)) return 0.0f;
    return !st.use_top_p || st.top_p.keeps(__float_as_uint(w), i) ? w : 0.0f;
  };
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) total += final_weight(i);
  total = block_reduce_sum(total, dscratch);
  const float inv = total > 0.0 ? float(1.0 / total) : 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) out[i] = final_weight(i) * inv;
}

}  // namespace

void argmax_rows(const float* logits, int64_t n_rows, int64_t vocab, int32_t* idx, cudaStream_t stream) {
  check_non_negative("cuda::argmax_rows", "n_rows", n_rows);
  check_positive("cuda::argmax_rows", "vocab", vocab);
  if (vocab > INT32_MAX) bad_argument("cuda::argmax_rows", "vocab " + std::to_string(vocab) + " exceeds int32");
  if (n_rows == 0) return;
  argmax_rows_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, vocab, idx);
  check_launch("argmax_rows_kernel");
}

void sampling_probs(const float* logits, int64_t n_rows, int64_t vocab, const RowSampling* params, float* probs,
                    cudaStream_t stream) {
  check_non_negative("cuda::sampling_probs", "n_rows", n_rows);
  check_positive("cuda::sampling_probs", "vocab", vocab);
  if (vocab > INT32_MAX) bad_argument("cuda::sampling_probs", "vocab " + std::to_string(vocab) + " exceeds int32");
  if (n_rows == 0) return;
  sampling_probs_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, vocab, params, probs);
  check_launch("sampling_probs_kernel");
}

}  // namespace tp::cuda
