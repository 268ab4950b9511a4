#include "rank/sampler.h"

#include <algorithm>
#include <cmath>


namespace tp {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position) {
  if (p.temperature == 0.0f) return argmax(logits, vocab);
  cand_.clear();
  cand_.reserve(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(logits[i] / p.temperature, int32_t(i));
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
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

}  // namespace tp
