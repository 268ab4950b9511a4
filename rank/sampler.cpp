#include "rank/sampler.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

// Orders (value, id) pairs by descending value, the lower id first on a tie.
struct ByValueThenId {
  bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};

}  // namespace

// The scan's answer (the first index whose value no later value exceeds; NaNs never win, and a NaN first entry
// wins outright since nothing compares greater than it), a block of 64 at a time: each block's largest value by
// independent max operations (no index, no early exit; MAXPS(x, m) = x > m ? x : m keeps m for a NaN x), then
// the first index holding the overall largest value inside the first block that reaches it. The one-at-a-time
// scan was a dependent compare a logit: at 64 sequences (49,152 logits each) 1.9 ms of a 37.5 ms decode step on
// the AMX Xeon (bench/results/batch-steps-xeon-amx-20261207-2122.md, "sample").
int32_t argmax(const float* logits, int64_t n) {
  if (n <= 1 || std::isnan(logits[0])) return 0;
  constexpr int64_t kBlock = 64;
  float best = logits[0];
  int64_t best_block = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t e = std::min(n, b0 + kBlock);
    float m = -INFINITY;
    int64_t i = b0;
#if defined(__SSE2__)
    if (e - b0 == kBlock) {
      __m128 m4[4];
      for (int j = 0; j < 4; ++j) m4[j] = _mm_set1_ps(-INFINITY);
      for (; i < e; i += 16)
        for (int j = 0; j < 4; ++j) m4[j] = _mm_max_ps(_mm_loadu_ps(logits + i + 4 * j), m4[j]);
      alignas(16) float lanes[4];
      _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m4[0], m4[1]), _mm_max_ps(m4[2], m4[3])));
      for (const float v : lanes) m = v > m ? v : m;
    }
#endif
    for (; i < e; ++i) m = logits[i] > m ? logits[i] : m;
    if (m > best) best = m, best_block = b0;
  }
  for (int64_t i = best_block;; ++i)
    if (logits[i] == best) return int32_t(i);
}

const float* Sampler::penalize(const float* logits, int64_t vocab, const SamplingParams& p,
                               std::span<const int32_t> history, int64_t n_prompt, std::span<const LogitBias> bias) {
  penalized_.assign(logits, logits + vocab);
  for (const LogitBias& b : bias)
    if (b.token >= 0 && b.token < vocab) penalized_[size_t(b.token)] += b.bias;
  if (!p.has_penalties()) return penalized_.data();
  if (counts_.size() < size_t(vocab)) counts_.resize(size_t(vocab), 0);
  const size_t split = size_t(std::clamp<int64_t>(n_prompt, 0, int64_t(history.size())));
  const auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  // counts_[id]: > 0 occurrences in the output, kPromptOnly for an id seen only in the prompt, 0 otherwise.
  constexpr int32_t kPromptOnly = -1;
  for (size_t i = split; i < history.size(); ++i)
    if (in_vocab(history[i])) ++counts_[size_t(history[i])];
  for (size_t i = 0; i < split; ++i)
    if (in_vocab(history[i]) && counts_[size_t(history[i])] == 0) counts_[size_t(history[i])] = kPromptOnly;
  // Each distinct id once: penalize at its first occurrence and zero its count, which skips the repeats and
  // leaves counts_ all zero again after O(history) work.
  for (const int32_t id : history) {
    if (!in_vocab(id) || counts_[size_t(id)] == 0) continue;
    float& l = penalized_[size_t(id)];
    l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    const int32_t count = counts_[size_t(id)];
    if (count > 0) {
      l -= p.frequency_penalty * float(count);
      l -= p.presence_penalty;
    }
    counts_[size_t(id)] = 0;
  }
  return penalized_.data();
}

namespace {

// SplitMix64 of (seed, position): one uniform draw in [0, 1).
double uniform(uint64_t seed, uint64_t position) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + position + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

// Candidates [begin, end) of (weight, id), in walk order: the first whose running sum passes r, else the last
// with a weight (a token masked to -inf has weight 0 and is never drawn).
int32_t walk(const std::pair<float, int32_t>* begin, const std::pair<float, int32_t>* end, double r) {
  double acc = 0;
  const std::pair<float, int32_t>* last = end - 1;
  for (const auto* c = begin; c != end; ++c) {
    acc += c->first;
    if (c->first > 0) last = c;
    if (r < acc) return c->second;
  }
  return last->second;
}

}  // namespace

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position,
                        std::span<const int32_t> history, int64_t n_prompt, std::span<const LogitBias> bias) {
  const float* row = p.has_penalties() || !bias.empty() ? penalize(logits, vocab, p, history, n_prompt, bias) : logits;
  if (p.temperature == 0.0f) return argmax(row, vocab);
  const double u = uniform(p.seed, position);
  const ByValueThenId by_weight;
  if (p.top_k > 0 && p.top_k < vocab) {
    // The k largest logits, sorted; then softmax weights over them (the largest has weight 1).
    cand_.clear();
    cand_.reserve(size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(row[i], int32_t(i));
    std::partial_sort(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), by_weight);
    cand_.resize(size_t(p.top_k));
    const float max_logit = cand_[0].first;
    for (auto& c : cand_) c.first = std::exp((c.first - max_logit) / p.temperature);
  } else {
    // Weights of the whole vocabulary in id order (the largest is 1); no sort.
    const float max_logit = row[argmax(row, vocab)];
    cand_.resize(size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) cand_[size_t(i)] = {std::exp((row[i] - max_logit) / p.temperature), int32_t(i)};
  }
  // min_p: keep the weights >= min_p x the largest (1), order kept. total_all: the softmax denominator.
  double total_all = 0;
  for (const auto& c : cand_) total_all += c.first;
  if (p.min_p > 0.0f) {
    const float cut = p.min_p;
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [cut](const auto& c) { return c.first < cut; }), cand_.end());
  }
  size_t n = cand_.size();
  if (p.top_p < 1.0f) {
    // The smallest prefix by descending weight (lower id first on a tie) whose mass reaches top_p of the
    // softmax: sorted a chunk at a time, so only the head of the distribution is ever sorted.
    const double target = double(p.top_p) * total_all;
    constexpr size_t kChunk = 256;
    double acc = 0;
    size_t begin = 0;
    n = 0;
    while (begin < cand_.size() && n == 0) {
      const size_t end = std::min(cand_.size(), begin + kChunk);
      std::nth_element(cand_.begin() + ptrdiff_t(begin), cand_.begin() + ptrdiff_t(end - 1), cand_.end(), by_weight);
      std::sort(cand_.begin() + ptrdiff_t(begin), cand_.begin() + ptrdiff_t(end), by_weight);
      for (size_t j = begin; j < end; ++j) {
        acc += cand_[j].first;
        if (acc >= target) {
          n = j + 1;
          break;
        }
      }
      begin = end;
    }
    if (n == 0) n = cand_.size();
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  return walk(cand_.data(), cand_.data() + n, u * total);
}

TokenLogprobs Sampler::logprobs(const float* logits, int64_t vocab, int32_t token, int32_t k) {
  if (vocab <= 0) throw Error("Sampler::logprobs: vocab " + std::to_string(vocab) + " <= 0");
  if (token < 0 || token >= vocab)
    throw Error("Sampler::logprobs: token " + std::to_string(token) + " is outside the vocab of " +
                std::to_string(vocab));
  if (k < 0) throw Error("Sampler::logprobs: k " + std::to_string(k) + " < 0");
  // log_softmax(x)_i = x_i - (max + log sum_j exp(x_j - max)), accumulated in double.
  const float max_logit = logits[argmax(logits, vocab)];
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(max_logit));
  const double log_z = double(max_logit) + std::log(sum);
  if (!std::isfinite(log_z)) throw Error("Sampler::logprobs: the logits row has no finite log-sum-exp (NaN or inf)");
  const auto logprob = [&](int32_t id) { return float(std::min(0.0, double(logits[id]) - log_z)); };

  TokenLogprobs out;
  out.logprob = logprob(token);
  int64_t n_above = 0;
  for (int64_t i = 0; i < vocab; ++i) n_above += logits[i] > logits[token] ? 1 : 0;
  out.rank = int32_t(1 + n_above);
  const size_t n_top = size_t(std::min<int64_t>(k, vocab));
  if (n_top == 0) return out;
  cand_.clear();
  cand_.reserve(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(logits[i], int32_t(i));
  std::partial_sort(cand_.begin(), cand_.begin() + ptrdiff_t(n_top), cand_.end(), ByValueThenId());
  out.top_ids.reserve(n_top);
  out.top_logprobs.reserve(n_top);
  for (size_t i = 0; i < n_top; ++i) {
    out.top_ids.push_back(cand_[i].second);
    out.top_logprobs.push_back(logprob(cand_[i].second));
  }
  return out;
}

}  // namespace tp
