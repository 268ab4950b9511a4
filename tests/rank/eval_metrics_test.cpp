// rank/eval_metrics: log-softmax, KL, agreement and the accumulation, against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "rank/eval_metrics.h"
#include "rank/sampler.h"

namespace tp {
namespace {

const float kLn3 = float(std::log(3.0));

TEST(EvalMetrics, LogSoftmaxOfTwoLogits) {
  // logits {0, ln 3}: p = {1/4, 3/4}; shifting every logit by 1000 changes nothing.
  std::vector<double> out;
  const float a[] = {0.0f, kLn3}, b[] = {1000.0f, 1000.0f + kLn3};
  const double lse = log_softmax(a, 2, out);
  EXPECT_NEAR(lse, std::log(4.0), 1e-7);
  EXPECT_NEAR(out[0], std::log(0.25), 1e-7);
  EXPECT_NEAR(out[1], std::log(0.75), 1e-7);
  log_softmax(b, 2, out);
  EXPECT_NEAR(out[0], std::log(0.25), 1e-4);  // float spacing at 1000 is 6e-5
  EXPECT_NEAR(out[1], std::log(0.75), 1e-4);
}

TEST(EvalMetrics, KlOfHandComputedPair) {
  // p = {1/2, 1/2}, q = {1/4, 3/4}: KL(p||q) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3); KL(q||p) = 1/4 ln(1/2) + 3/4 ln(3/2).
  std::vector<double> lp, lq;
  const float p[] = {0.0f, 0.0f}, q[] = {0.0f, kLn3};
  log_softmax(p, 2, lp);
  log_softmax(q, 2, lq);
  EXPECT_NEAR(kl_divergence(lp, lq), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(kl_divergence(lq, lp), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_EQ(kl_divergence(lq, lq), 0.0);
}

TEST(EvalMetrics, KlSkipsZeroProbabilityTerms) {
  // p puts exp(-1e4) = 0 (in double) on token 1: that term is 0, not NaN; KL = ln(1 / (1/2)) = ln 2.
  std::vector<double> lp, lq;
  const float p[] = {0.0f, -1e4f}, q[] = {0.0f, 0.0f};
  log_softmax(p, 2, lp);
  log_softmax(q, 2, lq);
  EXPECT_NEAR(kl_divergence(lp, lq), std::log(2.0), 1e-12);
}

TEST(EvalMetrics, ArgmaxTakesTheLowestIdOfATie) {
  const float a[] = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(a, 4), 1);
  const float b[] = {-5.0f};
  EXPECT_EQ(argmax(b, 1), 0);
}

TEST(EvalMetrics, PerplexityOfTwoPositions) {
  // nll = ln 2 (uniform over 2, target 0) and ln(4/3) (p = {1/4, 3/4}, target 1): perplexity = exp of their
  // mean = sqrt(2 · 4/3) = sqrt(8/3).
  EvalAccumulator acc(2);
  const float u[] = {0.0f, 0.0f}, q[] = {0.0f, kLn3};
  acc.add(u, 0);
  acc.add(q, 1);
  const EvalSummary s = acc.summary();
  EXPECT_EQ(s.n_scored, 2);
  EXPECT_FALSE(s.has_ref);
  EXPECT_NEAR(s.mean_nll, 0.5 * std::log(8.0 / 3.0), 1e-7);
  EXPECT_NEAR(s.perplexity, std::sqrt(8.0 / 3.0), 1e-6);
}

TEST(EvalMetrics, UniformModelHasPerplexityVocab) {
  const int64_t vocab = 1000;
  EvalAccumulator acc(vocab);
  const std::vector<float> zeros(size_t(vocab), 0.5f);
  for (int32_t t = 0; t < 7; ++t) acc.add(zeros.data(), t * 100);
  EXPECT_NEAR(acc.summary().perplexity, 1000.0, 1e-6);
}

TEST(EvalMetrics, AgainstAReference) {
  // Position 1: model q = {1/4, 3/4}, ref p = {1/2, 1/2}, target 0: KL = 1/2 ln(4/3); argmax 1 vs 0 (tie: 0).
  // Position 2: both {1/4, 3/4}, target 1: KL = 0 exactly, argmax 1 = 1.
  EvalAccumulator acc(2);
  const float u[] = {0.0f, 0.0f}, q[] = {0.0f, kLn3};
  acc.add(q, u, 0);
  acc.add(q, q, 1);
  const EvalSummary s = acc.summary();
  ASSERT_TRUE(s.has_ref);
  EXPECT_NEAR(s.kl_mean, 0.25 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(s.kl_max, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_EQ(s.n_top1_agree, 1);
  EXPECT_DOUBLE_EQ(s.top1_agreement, 0.5);
  EXPECT_NEAR(s.mean_nll, 0.5 * (std::log(4.0) + std::log(4.0 / 3.0)), 1e-7);      // model: -ln 1/4, -ln 3/4
  EXPECT_NEAR(s.ref_mean_nll, 0.5 * (std::log(2.0) + std::log(4.0 / 3.0)), 1e-7);  // ref: -ln 1/2, -ln 3/4
  EXPECT_NEAR(s.ref_perplexity, std::exp(s.ref_mean_nll), 1e-12);
}

TEST(EvalMetrics, SelfReferenceGivesZeroKlAndFullAgreement) {
  EvalAccumulator acc(5);
  const float rows[3][5] = {{0.1f, -2.0f, 3.5f, 0.0f, 1.0f}, {9.0f, 8.0f, 7.0f, 6.0f, 5.0f}, {-1.0f, -1.0f, 2.0f, 2.0f, 0.0f}};
  for (int i = 0; i < 3; ++i) acc.add(rows[i], rows[i], i);
  const EvalSummary s = acc.summary();
  EXPECT_EQ(s.kl_mean, 0.0);
  EXPECT_EQ(s.kl_max, 0.0);
  EXPECT_EQ(s.top1_agreement, 1.0);
  EXPECT_EQ(s.perplexity, s.ref_perplexity);
}

TEST(EvalMetrics, RefusesBadTargetsAndMixedPositions) {
  EvalAccumulator acc(2);
  const float u[] = {0.0f, 0.0f};
  EXPECT_THROW(acc.add(u, 2), InputError);
  EXPECT_THROW(acc.add(u, -1), InputError);
  acc.add(u, 0);
  EXPECT_THROW(acc.add(u, u, 0), InputError);
  EXPECT_THROW(EvalAccumulator(0), InputError);
  EXPECT_EQ(EvalAccumulator(3).summary().n_scored, 0);
}

}  // namespace
}  // namespace tp
