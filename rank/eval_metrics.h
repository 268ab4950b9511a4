// The numbers of `tpserve eval`: perplexity of a model over scored tokens, and against a reference model the
// KL divergence of the next-token distributions and top-1 agreement. Pure arithmetic on logit rows, no model.
//
// For one scored position i with target token t_i, model logits z_i [vocab] and reference logits r_i [vocab]:
//   log q_i = log_softmax(z_i), log p_i = log_softmax(r_i)           (in double, after subtracting the max)
//   nll_i   = -log q_i[t_i]                                           (nats)
//   kl_i    = KL(p_i || q_i) = sum_v p_i[v] (log p_i[v] - log q_i[v]) (nats; terms with p_i[v] = 0 are 0)
//   agree_i = 1 when argmax z_i == argmax r_i (the lowest id among equal maxima), else 0
// Over the N scored positions:
//   perplexity     = exp(sum_i nll_i / N)   (ref_perplexity likewise with log p_i)
//   kl_mean        = sum_i kl_i / N,   kl_max = max_i kl_i
//   top1_agreement = sum_i agree_i / N
// Identical rows give kl_i = 0 exactly (the log-softmaxes are bit-identical), agree_i = 1.
#pragma once
#include <cstdint>
#include <vector>

namespace tp {

// out[v] = logits[v] - logsumexp(logits), in double. logits: [vocab], vocab >= 1. Returns logsumexp.
double log_softmax(const float* logits, int64_t vocab, std::vector<double>& out);
// KL(p || q) in nats from log-probabilities [vocab] (sum_v exp(log_p[v]) (log_p[v] - log_q[v])).
double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q);
// argmax (the lowest id among equal maxima) is the sampler's greedy choice: rank/sampler.h.

struct EvalSummary {
  int64_t n_scored = 0;
  double mean_nll = 0, perplexity = 0;
  bool has_ref = false;  // the fields below are meaningful only with a reference
  double ref_mean_nll = 0, ref_perplexity = 0;
  double kl_mean = 0, kl_max = 0;
  int64_t n_top1_agree = 0;
  double top1_agreement = 0;
};

// Accumulates scored positions (the formulas above). Throws InputError for a target outside [0, vocab), and
// when positions with and without a reference are mixed.
class EvalAccumulator {
 public:
  explicit EvalAccumulator(int64_t vocab);
  // One position: the model's logits [vocab] and the token that followed.
  void add(const float* logits, int32_t target);
  // One position with the reference's logits [vocab] at the same position.
  void add(const float* logits, const float* ref_logits, int32_t target);
  EvalSummary summary() const;
  int64_t n_scored() const { return n_; }

 private:
  void check(int32_t target, bool with_ref);

  int64_t vocab_;
  int64_t n_ = 0, n_agree_ = 0;
  int n_with_ref_ = -1;  // -1: nothing yet, 0: positions without a reference, 1: with
  double sum_nll_ = 0, sum_ref_nll_ = 0, sum_kl_ = 0, max_kl_ = 0;
  std::vector<double> lq_, lp_;  // scratch [vocab]
};

}  // namespace tp
