// Which captured CUDA graph a step replays (DESIGN: the CUDA backend captures the decode forward once per
// batch bucket). Buckets are decode batch sizes 1, 2, 4, 8, 16, 32, 64, 128: a decode step of n sequences
// runs the graph of the smallest bucket >= n, its n..bucket-1 padding rows given slot -1 (not written) and a
// one-block table; above 128 sequences, or for any step with a prefill chunk or prompt logprobs, it runs
// eagerly. Pure: LlamaModel::forward decides (and keys graphs by context class too), the backend captures.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "parallel/step_plan.h"

namespace tp {

inline constexpr std::array<int64_t, 8> kCudaGraphBuckets = {1, 2, 4, 8, 16, 32, 64, 128};

// The bucket for a decode batch of n_seqs sequences: the smallest bucket >= n_seqs; 0 (eager) when n_seqs <= 0
// or > the largest bucket.
int64_t cuda_graph_bucket(int64_t n_seqs);

// The bucket for a step: cuda_graph_bucket(seqs.size()) when every sequence decodes one token with no prompt
// logprob rows and wants its logits; 0 (eager) otherwise.
int64_t cuda_graph_bucket(const std::vector<SeqPlan>& seqs);

}  // namespace tp
