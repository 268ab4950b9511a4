#include "rank/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "rank/sampler.h"

namespace tp {

double log_softmax(const float* logits, int64_t vocab, std::vector<double>& out) {
  out.resize(size_t(vocab));
  double mx = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, double(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t v = 0; v < vocab; ++v) out[size_t(v)] = double(logits[v]) - lse;
  return lse;
}

double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q) {
  double kl = 0;
  for (size_t v = 0; v < log_p.size(); ++v) {
    const double p = std::exp(log_p[v]);
    if (p > 0) kl += p * (log_p[v] - log_q[v]);
  }
  return kl;
}

EvalAccumulator::EvalAccumulator(int64_t vocab) : vocab_(vocab) {
  if (vocab < 1) throw InputError("eval: a vocabulary of " + std::to_string(vocab) + " tokens");
}

void EvalAccumulator::check(int32_t target, bool with_ref) {
  if (target < 0 || target >= vocab_)
    throw InputError("eval: target token " + std::to_string(target) + " outside the vocabulary of " +
                     std::to_string(vocab_));
  if (n_with_ref_ >= 0 && n_with_ref_ != int(with_ref))
    throw InputError("eval: positions with and without a reference mixed in one accumulation");
  n_with_ref_ = int(with_ref);
}

void EvalAccumulator::add(const float* logits, int32_t target) {
  check(target, false);
  log_softmax(logits, vocab_, lq_);
  sum_nll_ -= lq_[size_t(target)];
  ++n_;
}

void EvalAccumulator::add(const float* logits, const float* ref_logits, int32_t target) {
  check(target, true);
  log_softmax(logits, vocab_, lq_);
  log_softmax(ref_logits, vocab_, lp_);
  sum_nll_ -= lq_[size_t(target)];
  sum_ref_nll_ -= lp_[size_t(target)];
  const double kl = kl_divergence(lp_, lq_);
  sum_kl_ += kl;
  max_kl_ = n_ == 0 ? kl : std::max(max_kl_, kl);
  if (argmax(logits, vocab_) == argmax(ref_logits, vocab_)) ++n_agree_;
  ++n_;
}

EvalSummary EvalAccumulator::summary() const {
  EvalSummary s;
  s.n_scored = n_;
  if (n_ == 0) return s;
  const double n = double(n_);
  s.mean_nll = sum_nll_ / n;
  s.perplexity = std::exp(s.mean_nll);
  if (n_with_ref_ == 1) {
    s.has_ref = true;
    s.ref_mean_nll = sum_ref_nll_ / n;
    s.ref_perplexity = std::exp(s.ref_mean_nll);
    s.kl_mean = sum_kl_ / n;
    s.kl_max = max_kl_;
    s.n_top1_agree = n_agree_;
    s.top1_agreement = double(n_agree_) / n;
  }
  return s;
}

}  // namespace tp
