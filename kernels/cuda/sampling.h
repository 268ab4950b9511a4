// Sampling helpers over rows of logits on the GPU, by the definitions of common/sampling_params.h and
// rank/sampler.h: temperature -> top_k -> softmax -> min_p -> top_p. The leader rank draws from the filtered
// distribution (or takes the argmax). Plain C++ header; device pointers; enqueued on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tp::cuda {

// idx[n_rows] (int32) = argmax of each row of logits [n_rows, vocab] (F32); the lowest index wins a tie.
void argmax_rows(const float* logits, int64_t n_rows, int64_t vocab, int32_t* idx, cudaStream_t stream);

// One row's parameters (values as SamplingParams validates them).
struct RowSampling {
  float temperature = 1.0f;  // 0: greedy (probs = one-hot at the argmax)
  int32_t top_k = 0;         // 0 (or >= vocab): off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
};

// probs[n_rows, vocab] F32: the distribution each row samples from, zero outside the kept set:
//   w_i = exp((l_i - l_max) / T) over the top_k largest logits (ties: lower id first), the rest dropped;
//   min_p drops w_i < min_p (the largest weight is 1); top_p keeps the smallest prefix by descending weight
//   (lower id first on a tie) whose mass reaches top_p · Σ w (the sum before min_p, as rank/sampler.cpp);
//   probs = w / Σ kept w. params: [n_rows] device array. vocab <= 2^31 - 1.
void sampling_probs(const float* logits, int64_t n_rows, int64_t vocab, const RowSampling* params, float* probs,
                    cudaStream_t stream);

}  // namespace tp::cuda
