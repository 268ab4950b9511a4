// CUDA sampling helpers (kernels/cuda/sampling.h) against a host reference that follows rank/sampler.cpp's
// filters step by step (sorts instead of bisection): argmax equal; the kept token set equal and the
// probabilities within NMSE 1e-10 (float weights from the same expf of the same differences; double sums in
// another order; bound from error analysis, to be measured on the first GPU run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/sampling.h"
#include "tests/kernels/cuda/device_buffer.h"

namespace tp::test {
namespace {

constexpr double kProbsNmse = 1e-10;

int32_t ref_argmax(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (row[i] > row[best]) best = i;
  return int32_t(best);
}

// rank/sampler.cpp's filters, writing the kept weights normalized.
std::vector<float> ref_probs(const float* row, int64_t vocab, const cuda::RowSampling& p) {
  std::vector<float> probs(size_t(vocab), 0.0f);
  if (p.temperature == 0.0f) {
    probs[size_t(ref_argmax(row, vocab))] = 1.0f;
    return probs;
  }
  auto by_value_then_id = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<std::pair<float, int32_t>> cand;
  for (int64_t i = 0; i < vocab; ++i) cand.emplace_back(row[i], int32_t(i));
  if (p.top_k > 0 && p.top_k < vocab) {
    std::partial_sort(cand.begin(), cand.begin() + p.top_k, cand.end(), by_value_then_id);
    cand.resize(size_t(p.top_k));
  }
  const float max_logit = row[ref_argmax(row, vocab)];
  for (auto& c : cand) c.first = std::exp((c.first - max_logit) / p.temperature);
  double total_all = 0;
  for (const auto& c : cand) total_all += c.first;
  if (p.min_p > 0.0f)
    cand.erase(std::remove_if(cand.begin(), cand.end(), [&](const auto& c) { return c.first < p.min_p; }),
               cand.end());
  size_t n = cand.size();
  if (p.top_p < 1.0f) {
    std::sort(cand.begin(), cand.end(), by_value_then_id);
    const double target = double(p.top_p) * total_all;
    double acc = 0;
    for (size_t j = 0; j < cand.size(); ++j) {
      acc += cand[j].first;
      if (acc >= target) {
        n = j + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand[i].first;
  for (size_t i = 0; i < n; ++i) probs[size_t(cand[i].second)] = float(cand[i].first / total);
  return probs;
}

// Logits with repeated values (rounded to 1/8) when `ties`, so cuts fall inside runs of equal logits.
std::vector<float> make_logits(int64_t n_rows, int64_t vocab, bool ties, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> l(static_cast<size_t>(n_rows * vocab));
  for (auto& x : l) x = ties ? std::round(g(rng) * 2.0f) / 8.0f : g(rng);
  return l;
}

class CudaSampling : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(CudaSampling, ArgmaxLowestIdOnTie) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [vocab, ties] = GetParam();
  const int64_t n_rows = 5;
  const std::vector<float> logits = make_logits(n_rows, vocab, ties, 1);
  std::vector<int32_t> want(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) want[size_t(r)] = ref_argmax(logits.data() + r * vocab, vocab);
  DeviceBuffer<float> dl(logits);
  DeviceBuffer<int32_t> didx(static_cast<size_t>(n_rows));
  cuda::argmax_rows(dl.get(), n_rows, vocab, didx.get(), nullptr);
  EXPECT_EQ(didx.download(), want);
}

TEST_P(CudaSampling, FilteredProbsMatchTheSamplerDefinitions) {
  TP_REQUIRE_CUDA_DEVICE();
  const auto [vocab, ties] = GetParam();
  const std::vector<cuda::RowSampling> params = {
      {0.0f, 0, 1.0f, 0.0f},   {1.0f, 0, 1.0f, 0.0f},    {0.7f, 0, 1.0f, 0.0f},   {1.0f, 1, 1.0f, 0.0f},
      {1.0f, 5, 1.0f, 0.0f},   {0.8f, 50, 1.0f, 0.0f},   {1.0f, 0, 0.9f, 0.0f},   {1.3f, 0, 0.5f, 0.0f},
      {1.0f, 0, 1.0f, 0.1f},   {1.0f, 40, 0.9f, 0.05f},  {0.5f, 0, 0.3f, 0.02f},  {1.0f, 0, 0.01f, 0.0f},
      {2.0f, 1000, 0.95f, 0.0f}, {1.0f, 0, 1.0f, 1.0f},
  };
  const int64_t n_rows = int64_t(params.size());
  const std::vector<float> logits = make_logits(n_rows, vocab, ties, 2);
  DeviceBuffer<float> dl(logits), dprobs(size_t(n_rows * vocab));
  DeviceBuffer<cuda::RowSampling> dparams(params);
  cuda::sampling_probs(dl.get(), n_rows, vocab, dparams.get(), dprobs.get(), nullptr);
  const std::vector<float> got = dprobs.download();
  for (int64_t r = 0; r < n_rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const std::vector<float> want = ref_probs(logits.data() + r * vocab, vocab, params[size_t(r)]);
    const std::vector<float> row(got.begin() + r * vocab, got.begin() + (r + 1) * vocab);
    int64_t kept_diff = 0;
    for (int64_t i = 0; i < vocab; ++i) kept_diff += (row[size_t(i)] > 0.0f) != (want[size_t(i)] > 0.0f);
    EXPECT_EQ(kept_diff, 0);
    EXPECT_LT(nmse(row, want), kProbsNmse);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaSampling,
                         ::testing::Combine(::testing::Values(int64_t(1000), int64_t(49152)), ::testing::Bool()));

}  // namespace
}  // namespace tp::test
