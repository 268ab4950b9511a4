#include "rank/sampler.h"

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

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
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

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position,
                        std::span<const int32_t> history, int64_t n_prompt, std::span<const LogitBias> bias) {
  const float* row = p.has_penalties() || !bias.empty() ? penalize(logits, vocab, p, history, n_prompt, bias) : logits;
  if (p.temperature == 0.0f) return argmax(row, vocab);
  cand_.clear();
  cand_.reserve(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(row[i] / p.temperature, int32_t(i));
  const ByValueThenId by_logit;
  size_t n = cand_.size();
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), by_logit);
    n = size_t(p.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // softmax over the kept candidates (sorted, descending)
  const float max_logit = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first - max_logit);
    sum += cand_[i].first;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].first = float(cand_[i].first / sum);
  if (p.min_p > 0.0f) {
    const float cut = p.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= cut) ++keep;
    n = keep;
  }
  if (p.top_p < 1.0f) {
    double acc = 0;
    size_t keep = 0;
    while (keep < n) {
      acc += cand_[keep].first;
      ++keep;
      if (acc >= p.top_p) break;
    }
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  // SplitMix64 of (seed, position): one uniform draw in [0, total)
  uint64_t z = p.seed * 0x9e3779b97f4a7c15ull + position + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double r = double(z >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
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
