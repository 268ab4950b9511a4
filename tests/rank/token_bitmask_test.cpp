// The structured-output token bitmask at sampling (rank/token_bitmask.h), composed with every option of the
// sampler: whatever the temperature, top-k/top-p/min-p, penalties, logit_bias (even +100 on a masked token) and
// seed, the sampled token is one the mask allows; greedy picks the best allowed token; logprobs are those of
// the allowed tokens (they sum to 1 over them, -inf elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "rank/sampler.h"
#include "rank/token_bitmask.h"

namespace tp {
namespace {

std::vector<int32_t> mask_of(const std::set<int32_t>& allowed, int64_t vocab) {
  std::vector<int32_t> m(size_t((vocab + 31) / 32), 0);
  for (int32_t t : allowed) m[size_t(t / 32)] |= int32_t(uint32_t(1) << (t % 32));
  return m;
}

std::vector<float> random_row(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> out(static_cast<size_t>(vocab));
  for (float& x : out) x = d(rng);
  return out;
}

TEST(TokenBitmask, DisallowedTokensBecomeNegInfAndAllowedKeepTheirLogits) {
  const int64_t vocab = 100;  // 4 words; the last covers 4 ids
  const std::set<int32_t> allowed = {0, 31, 32, 63, 64, 99};
  std::vector<float> row = random_row(vocab, 1);
  const std::vector<float> before = row;
  const std::vector<int32_t> mask = mask_of(allowed, vocab);
  apply_token_bitmask(row.data(), vocab, mask);
  for (int64_t t = 0; t < vocab; ++t) {
    if (allowed.count(int32_t(t))) {
      EXPECT_EQ(row[size_t(t)], before[size_t(t)]) << t;
    } else {
      EXPECT_TRUE(std::isinf(row[size_t(t)]) && row[size_t(t)] < 0) << t;
    }
  }
  EXPECT_EQ(count_allowed(mask, vocab), int64_t(allowed.size()));
}

TEST(TokenBitmask, IdsPastTheMaskAreNotAllowedAndAnEmptyMaskChangesNothing) {
  const int64_t vocab = 80;
  std::vector<float> row = random_row(vocab, 2);
  const std::vector<float> before = row;
  apply_token_bitmask(row.data(), vocab, {});
  EXPECT_EQ(row, before);
  const std::vector<int32_t> one_word = {-1};  // all of [0, 32) allowed, nothing of [32, 80) covered
  apply_token_bitmask(row.data(), vocab, one_word);
  for (int64_t t = 0; t < 32; ++t) EXPECT_EQ(row[size_t(t)], before[size_t(t)]);
  for (int64_t t = 32; t < vocab; ++t) EXPECT_TRUE(std::isinf(row[size_t(t)])) << t;
}

TEST(TokenBitmask, BatchedRowsEachGetTheirOwnMask) {
  const int64_t vocab = 64;
  std::vector<float> logits;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> row = random_row(vocab, 10 + uint32_t(r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const std::vector<int32_t> m0 = mask_of({5}, vocab), m2 = mask_of({7, 40}, vocab);
  const std::vector<MaskedRow> rows = {{0, m0}, {2, m2}};
  const std::vector<float> before = logits;
  apply_token_bitmasks(logits.data(), vocab, rows);
  EXPECT_EQ(argmax(logits.data(), vocab), 5);
  for (int64_t t = 0; t < vocab; ++t) EXPECT_EQ(logits[size_t(vocab + t)], before[size_t(vocab + t)]);  // row 1 unmasked
  EXPECT_EQ(count_allowed(m2, vocab), 2);
  for (int64_t t = 0; t < vocab; ++t) {
    if (t != 7 && t != 40) {
      EXPECT_TRUE(std::isinf(logits[size_t(2 * vocab + t)])) << t;
    }
  }
}

// Every sampling option over masked rows: the draw stays inside the mask.
TEST(TokenBitmask, ComposedWithEverySamplingOptionTheSampleIsAllowed) {
  const int64_t vocab = 300;
  const std::set<int32_t> allowed = {3, 17, 64, 65, 200, 299};
  const std::vector<int32_t> mask = mask_of(allowed, vocab);
  Sampler sampler;
  const std::vector<int32_t> history = {3, 3, 17, 120, 250, 64};
  // +100 on a disallowed token (the row's best after bias) must not let it through.
  const std::vector<LogitBias> bias = {{120, 100.0f}, {17, -5.0f}};
  std::vector<SamplingParams> params;
  for (float temperature : {0.0f, 0.3f, 1.0f, 2.0f})
    for (int32_t top_k : {0, 1, 2, 50})
      for (float top_p : {1.0f, 0.5f, 0.05f})
        for (float min_p : {0.0f, 0.2f}) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_k = top_k;
          p.top_p = top_p;
          p.min_p = min_p;
          p.repetition_penalty = 1.3f;
          p.frequency_penalty = 0.5f;
          p.presence_penalty = -0.5f;
          params.push_back(p);
        }
  int n_draws = 0;
  std::set<int32_t> seen;
  for (size_t i = 0; i < params.size(); ++i)
    for (uint64_t seed = 0; seed < 8; ++seed) {
      std::vector<float> row = random_row(vocab, uint32_t(i * 31 + seed));
      apply_token_bitmask(row.data(), vocab, mask);
      SamplingParams p = params[i];
      p.seed = seed;
      const int32_t t = sampler.sample(row.data(), vocab, p, 7 + seed, history, 2, bias);
      ASSERT_TRUE(allowed.count(t)) << "token " << t << " params " << i << " seed " << seed;
      seen.insert(t);
      ++n_draws;
    }
  EXPECT_EQ(n_draws, int(params.size()) * 8);
  EXPECT_GT(seen.size(), 2u);  // the draw really samples among the allowed tokens
}

TEST(TokenBitmask, GreedyPicksTheBestAllowedAndLogprobsAreOverTheAllowed) {
  const int64_t vocab = 50;
  std::vector<float> row(size_t(vocab), 0.0f);
  row[10] = 9.0f;  // the best overall, but masked
  row[20] = 2.0f;
  row[30] = 1.0f;
  apply_token_bitmask(row.data(), vocab, mask_of({20, 30}, vocab));
  Sampler sampler;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(sampler.sample(row.data(), vocab, greedy, 0), 20);
  const TokenLogprobs lp = sampler.logprobs(row.data(), vocab, 20, 3);
  EXPECT_NEAR(std::exp(lp.logprob) + std::exp(lp.top_logprobs[1]), 1.0, 1e-6);
  EXPECT_EQ(lp.top_ids[0], 20);
  EXPECT_EQ(lp.top_ids[1], 30);
  EXPECT_TRUE(std::isinf(lp.top_logprobs[2]));
  EXPECT_EQ(lp.rank, 1);
}

}  // namespace
}  // namespace tp
