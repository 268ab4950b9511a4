// Picks the next token from one row of logits [vocab]: logit bias and penalties, then greedy (temperature 0) or sampled
// with temperature, top-k, min-p and top-p (common/sampling_params.h gives the order and the formulas).
// Stateless across steps: the random draw depends only on (seed, position), and the penalties only on the
// history the StepPlan carries, so the same seed gives the same text, and a sequence recomputed after
// preemption samples exactly as before.
// The draw: softmax weights w_i = exp((l_i - l_max) / T) over the candidates (the top k when top_k is set,
// sorted; else the whole vocabulary in id order — no sort), those below min_p x the largest dropped; with
// top_p < 1 the smallest prefix by descending weight (lower id first on a tie) holding top_p of the softmax
// mass (sorted a chunk at a time: only the head is ever sorted); then one uniform u in [0, 1) from
// SplitMix64(seed, position) picks the first candidate, in that order, whose running weight passes u x the
// kept total. Every filter keeps exactly the tokens the definitions in sampling_params.h keep.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "common/sampling_params.h"
#include "common/token_logprobs.h"

namespace tp {

// Index of the largest logit; the lowest index wins a tie.
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  // p must be valid (coordinator/request.h validate_sampling; StepPlan deserialization checks it too).
  // position: the index the sampled token will have in its sequence. history: the sequence's tokens before
  // it, the first n_prompt of them prompt (SeqPlan::history); ignored unless p.has_penalties(). bias: added
  // to the logits first (SeqPlan::logit_bias). Ids in history or bias outside [0, vocab) are ignored; n_prompt
  // is clamped to [0, history.size()]. Without penalties and bias this touches neither history nor the
  // O(vocab) scratch row.
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position,
                 std::span<const int32_t> history = {}, int64_t n_prompt = 0, std::span<const LogitBias> bias = {});

  // log_softmax of the raw row [vocab] (double accumulation, max-subtracted; values clamped to <= 0): the
  // logprob of `token` (in [0, vocab)), its rank (1 + ids with a larger logit) and the min(k, vocab) most likely ids by descending logit, the lowest
  // id first on a tie. k >= 0. Throws tp::Error on a bad token or k, or a row whose log-sum-exp is not
  // finite (NaN, +inf, or every logit -inf).
  TokenLogprobs logprobs(const float* logits, int64_t vocab, int32_t token, int32_t k);

 private:
  // Copies the row into penalized_, adds `bias`, and applies p's penalties for `history` (O(vocab) copy +
  // O(history + bias)); returns penalized_.data(). Leaves counts_ all zero.
  const float* penalize(const float* logits, int64_t vocab, const SamplingParams& p, std::span<const int32_t> history,
                        int64_t n_prompt, std::span<const LogitBias> bias);

  std::vector<std::pair<float, int32_t>> cand_;  // (logit or prob, id), reused scratch
  std::vector<float> penalized_;                 // [vocab] the row after penalties, reused scratch
  std::vector<int32_t> counts_;                  // [vocab] penalize's scratch: output occurrences (-1: prompt
                                                 // only) while it runs, all zero between calls
};

}  // namespace tp
