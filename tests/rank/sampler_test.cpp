// Sampler: the draw against a plain reference of its definition (rank/sampler.h) and recorded tokens, its
// distribution, penalties (hand-computed small-vocab cases, and against a naive reference), the counts_ scratch
// staying zeroed, and logprobs against a double-precision log_softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "common/error.h"
#include "rank/sampler.h"

namespace tp {
namespace {

SamplingParams params(float temperature, float top_p = 1.0f, int32_t top_k = 0, float min_p = 0.0f,
                      uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

SamplingParams penalties(float presence, float frequency, float repetition, float temperature = 0.0f) {
  SamplingParams p = params(temperature);
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.repetition_penalty = repetition;
  return p;
}

// The draw as rank/sampler.h defines it, written plainly (full sorts, no chunks): the reference the Sampler
// must match exactly. Weights are computed in float exactly as the Sampler does, so the sums agree bit for bit.
int32_t reference_sample(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position) {
  if (p.temperature == 0.0f) return argmax(logits, vocab);
  auto by_weight = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::vector<std::pair<float, int32_t>> c;
  if (p.top_k > 0 && p.top_k < vocab) {
    for (int64_t i = 0; i < vocab; ++i) c.emplace_back(logits[i], int32_t(i));
    std::sort(c.begin(), c.end(), by_weight);
    c.resize(size_t(p.top_k));
    const float max_logit = c[0].first;
    for (auto& x : c) x.first = std::exp((x.first - max_logit) / p.temperature);
  } else {
    const float max_logit = logits[argmax(logits, vocab)];
    for (int64_t i = 0; i < vocab; ++i) c.emplace_back(std::exp((logits[i] - max_logit) / p.temperature), int32_t(i));
  }
  double total_all = 0;
  for (const auto& x : c) total_all += x.first;
  std::vector<std::pair<float, int32_t>> kept;
  for (const auto& x : c)
    if (p.min_p == 0.0f || x.first >= p.min_p) kept.push_back(x);
  if (p.top_p < 1.0f) {
    std::sort(kept.begin(), kept.end(), by_weight);
    double acc = 0;
    size_t n = kept.size();
    for (size_t j = 0; j < kept.size(); ++j) {
      acc += kept[j].first;
      if (acc >= double(p.top_p) * total_all) {
        n = j + 1;
        break;
      }
    }
    kept.resize(n);
  }
  double total = 0;
  for (const auto& x : kept) total += x.first;
  uint64_t z = p.seed * 0x9e3779b97f4a7c15ull + position + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double r = double(z >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (const auto& x : kept) {
    acc += x.first;
    if (r < acc) return x.second;
  }
  return kept.back().second;
}

// Naive penalties, straight from common/sampling_params.h: O(vocab * history).
std::vector<float> reference_penalize(std::vector<float> row, const SamplingParams& p, std::span<const int32_t> history,
                                      size_t n_prompt) {
  const int64_t vocab = int64_t(row.size());
  for (int64_t id = 0; id < vocab; ++id) {
    const auto count_in = [&](size_t b, size_t e) {
      return std::count(history.begin() + ptrdiff_t(b), history.begin() + ptrdiff_t(e), int32_t(id));
    };
    const int64_t in_output = count_in(n_prompt, history.size());
    if (in_output + count_in(0, n_prompt) > 0) row[id] = row[id] > 0 ? row[id] / p.repetition_penalty : row[id] * p.repetition_penalty;
    row[id] -= p.frequency_penalty * float(in_output);
    if (in_output > 0) row[id] -= p.presence_penalty;
  }
  return row;
}

// The deterministic row used when the expected tokens below were recorded from the pre-penalty sampler.
std::vector<float> xorshift_row(int64_t vocab, uint32_t salt) {
  std::vector<float> v(static_cast<size_t>(vocab));
  uint32_t x = 2463534242u ^ salt;
  for (auto& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = float(int32_t(x % 2001) - 1000) / 250.0f;
  }
  return v;
}

std::vector<float> normal_row(std::mt19937& rng, int64_t vocab, float scale = 3.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (auto& x : v) x = d(rng);
  return v;
}

// Greedy on the penalized row: the id with the largest penalized logit.
int32_t greedy(const std::vector<float>& row, const SamplingParams& p, std::vector<int32_t> history = {},
               int64_t n_prompt = 0) {
  Sampler s;
  return s.sample(row.data(), int64_t(row.size()), p, 0, history, n_prompt);
}

// Pins the penalized logit of `id` to `expected` (within 1e-4) through greedy flips: every other id is set
// far below, and a probe id appended past the vocab (so in no history) sits just below, then just above.
void expect_penalized(std::vector<float> row, const SamplingParams& p, const std::vector<int32_t>& history,
                      int64_t n_prompt, int32_t id, float expected) {
  for (size_t i = 0; i < row.size(); ++i)
    if (int32_t(i) != id) row[i] = -1000.0f;
  const int32_t probe = int32_t(row.size());
  row.push_back(expected - 1e-4f);
  EXPECT_EQ(greedy(row, p, history, n_prompt), id) << "id " << id << ": penalized value below " << expected - 1e-4f;
  row.back() = expected + 1e-4f;
  EXPECT_EQ(greedy(row, p, history, n_prompt), probe) << "id " << id << ": penalized value above " << expected + 1e-4f;
}

// ---------------------------------------------------------------------------------- no penalties: unchanged

// argmax (blocks of 64, SSE max) against the one-at-a-time scan it replaced, which defines it: random rows of
// every length up to 200 and SmolLM2's 49,152, with ties (values drawn from a few levels), NaNs, ±inf and ±0
// mixed in, the largest value first, last, or at a block edge, and a NaN first entry (it wins: nothing is > NaN).
int32_t scan_argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

TEST(Argmax, IsTheFirstIndexTheScanFinds) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, inf, -inf, 0.0f, -0.0f};
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 200; ++n) lengths.push_back(n);
  lengths.push_back(49152);
  int64_t cases = 0;
  for (const int64_t n : lengths)
    for (int trial = 0; trial < (n == 49152 ? 40 : 12); ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      const int levels = 1 + int(rng() % 6);  // few levels: many ties
      for (float& v : x) v = float(int(rng() % levels)) - 2.0f;
      const int n_special = int(rng() % 4);
      for (int k = 0; k < n_special; ++k) x[rng() % size_t(n)] = specials[rng() % 5];
      switch (trial % 4) {
        case 0: x[size_t(n - 1)] = 7.0f; break;                     // the largest last
        case 1: x[size_t(std::min<int64_t>(n - 1, 64))] = 7.0f; break;  // at a block edge
        case 2: if (trial % 8 == 2) x[0] = nan; break;                // a NaN first
        default: break;
      }
      ASSERT_EQ(argmax(x.data(), n), scan_argmax(x.data(), n)) << "n " << n << " trial " << trial;
      ++cases;
    }
  EXPECT_GT(cases, 2400);
  const float all_nan[3] = {nan, nan, nan};
  const std::vector<float> neg(70, -inf);
  EXPECT_EQ(argmax(all_nan, 3), 0);
  EXPECT_EQ(argmax(neg.data(), 70), 0);
}

TEST(Sampler, NoPenaltiesMatchesTokensRecordedFromThisSampler) {
  // Printed by rank/sampler.cpp on xorshift_row(257, seed * 31 + position): a change of these is a change of
  // every seeded text. (Rows 2-5 are also what the sampler before the id-order draw gave: with top_k / top_p
  // the walk is in sorted order as it was; row 1, no filter, now walks in id order without sorting.)
  struct Case {
    SamplingParams p;
    int32_t expected[4][3];  // [seed 0, 1, 42, 123456789][position 0, 7, 300]
  };
  const Case cases[] = {
      {params(0.8f), {{130, 220, 105}, {76, 234, 255}, {89, 0, 142}, {160, 18, 6}}},
      {params(0.8f, 0.9f, 40, 0.05f), {{212, 235, 106}, {106, 36, 226}, {87, 53, 0}, {107, 195, 130}}},
      {params(1.3f, 0.5f), {{105, 133, 163}, {194, 7, 181}, {87, 53, 0}, {47, 195, 130}}},
      {params(0.5f, 1.0f, 5, 0.1f), {{130, 13, 4}, {210, 185, 47}, {233, 53, 245}, {91, 246, 130}}},
      {params(0.0f), {{64, 121, 254}, {30, 190, 148}, {151, 53, 199}, {56, 246, 130}}},
  };
  const uint64_t seeds[] = {0, 1, 42, 123456789};
  const uint64_t positions[] = {0, 7, 300};
  Sampler s;
  for (const Case& c : cases) {
    for (int si = 0; si < 4; ++si) {
      for (int pi = 0; pi < 3; ++pi) {
        SamplingParams p = c.p;
        p.seed = seeds[si];
        const std::vector<float> row = xorshift_row(257, uint32_t(seeds[si] * 31 + positions[pi]));
        EXPECT_EQ(s.sample(row.data(), 257, p, positions[pi]), c.expected[si][pi])
            << "T " << p.temperature << " seed " << p.seed << " position " << positions[pi];
        // A history is ignored without penalties, and logprobs do not change the draw.
        const std::vector<int32_t> history = {1, 2, 3, 3, 250, 22};
        p.logprobs = 5;
        EXPECT_EQ(s.sample(row.data(), 257, p, positions[pi], history, 2), c.expected[si][pi]);
      }
    }
  }
}

TEST(Sampler, MatchesThePlainReferenceOfTheDraw) {
  std::mt19937 rng(11);
  const SamplingParams settings[] = {params(0.8f),       params(0.8f, 0.95f), params(0.8f, 1.0f, 50),
                                     params(1.0f, 1.0f, 0, 0.05f), params(0.7f, 0.8f, 20, 0.02f), params(2.0f, 0.3f),
                                     params(0.9f, 0.999f, 0, 0.001f), params(0.0f)};
  Sampler s;
  int checked = 0;
  for (int64_t vocab : {1, 2, 17, 1000, 49152}) {  // 49152: top_p's head spans several 256-candidate chunks
    for (int trial = 0; trial < (vocab > 1000 ? 6 : 40); ++trial) {
      const std::vector<float> row = normal_row(rng, vocab, vocab > 1000 ? 1.0f : 3.0f);
      for (SamplingParams p : settings) {
        p.seed = rng();
        const uint64_t position = rng() % 4096;
        ASSERT_EQ(s.sample(row.data(), vocab, p, position), reference_sample(row.data(), vocab, p, position))
            << "vocab " << vocab << " trial " << trial << " T " << p.temperature;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 40 * 8 + 6 * 8);
}

// The draws follow the distribution: on a 6-token vocabulary, 60,000 positions give each kept token its
// softmax share within 4 standard deviations, and filtered tokens never.
TEST(Sampler, DrawsFollowTheFilteredSoftmax) {
  const std::vector<float> row = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  struct Case {
    SamplingParams p;
    std::vector<double> probs;  // expected, from the definitions
  };
  std::vector<double> w;
  for (float x : row) w.push_back(std::exp(double(x) - 2.0));
  const double z = w[0] + w[1] + w[2] + w[3] + w[4] + w[5];
  const double z3 = w[0] + w[1] + w[2];
  const Case cases[] = {
      {params(1.0f), {w[0] / z, w[1] / z, w[2] / z, w[3] / z, w[4] / z, w[5] / z}},
      {params(1.0f, 1.0f, 3), {w[0] / z3, w[1] / z3, w[2] / z3, 0, 0, 0}},
      // top_p 0.8: w0/z = 0.56, + w1/z = 0.77, + w2/z = 0.90 reaches it: three kept.
      {params(1.0f, 0.8f), {w[0] / z3, w[1] / z3, w[2] / z3, 0, 0, 0}},
      // min_p 0.2: keep weights >= 0.2 (w0 1, w1 0.37, w2 0.22): three kept.
      {params(1.0f, 1.0f, 0, 0.2f), {w[0] / z3, w[1] / z3, w[2] / z3, 0, 0, 0}},
  };
  Sampler s;
  constexpr int kDraws = 60000;
  for (const Case& c : cases) {
    std::vector<int> count(6, 0);
    SamplingParams p = c.p;
    p.seed = 77;
    for (int i = 0; i < kDraws; ++i) ++count[size_t(s.sample(row.data(), 6, p, uint64_t(i)))];
    for (size_t t = 0; t < 6; ++t) {
      const double expected = c.probs[t] * kDraws, sd = std::sqrt(std::max(1.0, expected * (1 - c.probs[t])));
      if (c.probs[t] == 0)
        EXPECT_EQ(count[t], 0) << "token " << t;
      else
        EXPECT_NEAR(count[t], expected, 4 * sd) << "token " << t << " top_k " << p.top_k << " top_p " << p.top_p;
    }
  }
}

// ------------------------------------------------------------------------------- penalties, hand-computed

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  const std::vector<float> row = {2.0f, 1.5f, -0.5f, -0.4f, 1.0f};
  EXPECT_EQ(greedy(row, params(0.0f)), 0);
  // id 0 in the prompt: 2.0 / 2 = 1.0 < 1.5, so greedy flips to id 1.
  EXPECT_EQ(greedy(row, penalties(0, 0, 2.0f), {0}, 1), 1);
  // ... and in the output alone the same (repetition covers prompt and output).
  EXPECT_EQ(greedy(row, penalties(0, 0, 2.0f), {0}, 0), 1);
  // r = 1.25: 2.0 / 1.25 = 1.6 > 1.5, no flip.
  EXPECT_EQ(greedy(row, penalties(0, 0, 1.25f), {0}, 1), 0);
  // r < 1 rewards: id 4 at 1.0 / 0.5 = 2.0 ties id 0 (lowest id wins), 1.0 / 0.45 beats it.
  EXPECT_EQ(greedy(row, penalties(0, 0, 0.5f), {4}, 1), 0);
  EXPECT_EQ(greedy(row, penalties(0, 0, 0.45f), {4}, 1), 4);
  // Negative logits are multiplied: -0.4 * 2 = -0.8 falls below -0.5 (dividing would have given -0.2).
  const std::vector<float> neg = {-1.2f, -0.4f, -0.5f};
  EXPECT_EQ(greedy(neg, params(0.0f)), 1);
  EXPECT_EQ(greedy(neg, penalties(0, 0, 2.0f), {1}, 1), 2);
  // Applied once per distinct id however often it occurs.
  expect_penalized(row, penalties(0, 0, 2.0f), {0, 0, 0, 0}, 2, 0, 1.0f);
  expect_penalized(row, penalties(0, 0, 2.0f), {3, 3, 3}, 1, 3, -0.8f);
  expect_penalized(row, penalties(0, 0, 2.0f), {4}, 1, 1, 1.5f);  // untouched
}

TEST(Sampler, FrequencyPenaltyCountsOutputOccurrencesOnly) {
  const std::vector<float> row = {3.0f, 2.0f, 1.0f};
  // count 1: 3.0 - 0.6 = 2.4 > 2.0; count 2: 3.0 - 1.2 = 1.8 < 2.0.
  EXPECT_EQ(greedy(row, penalties(0, 0.6f, 1.0f), {0}, 0), 0);
  EXPECT_EQ(greedy(row, penalties(0, 0.6f, 1.0f), {0, 0}, 0), 1);
  // The prompt does not count: three prompt occurrences, one output occurrence.
  EXPECT_EQ(greedy(row, penalties(0, 0.6f, 1.0f), {0, 0, 0}, 3), 0);
  EXPECT_EQ(greedy(row, penalties(0, 0.6f, 1.0f), {0, 0, 0, 0}, 3), 0);
  EXPECT_EQ(greedy(row, penalties(0, 0.6f, 1.0f), {0, 0, 0, 0, 0}, 3), 1);
  // Repeated and interleaved ids: id 1 four times, id 2 once.
  const std::vector<int32_t> history = {2, 1, 1, 0, 1, 2, 1, 1};  // prompt {2, 1}
  expect_penalized(row, penalties(0, 0.25f, 1.0f), history, 2, 1, 2.0f - 0.25f * 4);
  expect_penalized(row, penalties(0, 0.25f, 1.0f), history, 2, 2, 1.0f - 0.25f * 1);
  expect_penalized(row, penalties(0, 0.25f, 1.0f), history, 2, 0, 3.0f - 0.25f * 1);
  // A negative penalty rewards repeats: 2.9 + 0.5 = 3.4 > 3.0.
  EXPECT_EQ(greedy({3.0f, 2.9f}, penalties(0, -0.5f, 1.0f), {1}, 0), 1);
}

TEST(Sampler, PresencePenaltyIsOncePerOutputId) {
  const std::vector<float> row = {3.0f, 2.5f, 1.0f};
  EXPECT_EQ(greedy(row, penalties(0.6f, 0, 1.0f), {0}, 0), 1);                 // 2.4 < 2.5
  EXPECT_EQ(greedy(row, penalties(0.4f, 0, 1.0f), {0, 0, 0, 0, 0}, 0), 0);     // 2.6 whatever the count
  EXPECT_EQ(greedy(row, penalties(0.6f, 0, 1.0f), {0, 0}, 2), 0);              // prompt only: untouched
  EXPECT_EQ(greedy(row, penalties(-2.0f, 0, 1.0f), {1}, 0), 1);                // rewarded: 2.5 + 2 = 4.5
  expect_penalized(row, penalties(0.4f, 0, 1.0f), {0, 0, 0, 0, 0}, 0, 0, 2.6f);
  expect_penalized(row, penalties(-2.0f, 0, 1.0f), {2}, 0, 2, 3.0f);
}

TEST(Sampler, PenaltiesCombineInTheDocumentedOrder) {
  // repetition 2, frequency 0.5, presence 0.25; prompt {3}, output {0, 0, 2}:
  //   id 0: 4.0 / 2 - 0.5 * 2 - 0.25 = 0.75   id 1: 3.0 (untouched)
  //   id 2: -1.0 * 2 - 0.5 - 0.25 = -2.75      id 3: 2.0 / 2 = 1.0 (prompt only: repetition alone)
  const std::vector<float> row = {4.0f, 3.0f, -1.0f, 2.0f};
  const std::vector<int32_t> history = {3, 0, 0, 2};
  const SamplingParams p = penalties(0.25f, 0.5f, 2.0f);
  EXPECT_EQ(greedy(row, params(0.0f)), 0);
  EXPECT_EQ(greedy(row, p, history, 1), 1);
  expect_penalized(row, p, history, 1, 0, 0.75f);
  expect_penalized(row, p, history, 1, 1, 3.0f);
  expect_penalized(row, p, history, 1, 2, -2.75f);
  expect_penalized(row, p, history, 1, 3, 1.0f);
  // Repetition comes first: a logit pushed negative by frequency is not then multiplied.
  //   id 0: 0.5 / 2 = 0.25, then - 2 * 0.5 = -0.75 (frequency first would give (0.5 - 1) * 2 = -1.0)
  expect_penalized({0.5f, -5.0f}, penalties(0, 0.5f, 2.0f), {0, 0}, 0, 0, -0.75f);
  // The whole prompt-then-output history is the sequence; n_prompt splits it (clamped to its size).
  expect_penalized(row, p, history, 4, 0, 2.0f);   // all prompt: id 0 gets repetition only
  expect_penalized(row, p, history, 99, 0, 2.0f);
  expect_penalized(row, p, history, -3, 3, 1.0f - 0.5f - 0.25f);  // all output
}

TEST(Sampler, HistoryIdsOutsideTheVocabAreIgnored) {
  std::mt19937 rng(5);
  const std::vector<float> row = normal_row(rng, 50);
  const std::vector<int32_t> clean = {1, 2, 3, 3, 7, 7, 7, 49};
  std::vector<int32_t> dirty = {1, -5, 2, 50, 3, 3, int32_t(1) << 30, 7, 7, -1, 7, 49,
                                std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  // The prompt is {1, 2} in both: the out-of-vocab entries take prompt slots in `dirty` (n_prompt 4).
  SamplingParams p = penalties(0.3f, 0.7f, 1.4f, 0.9f);
  Sampler a, b;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    EXPECT_EQ(a.sample(row.data(), 50, p, seed, dirty, 4), b.sample(row.data(), 50, p, seed, clean, 2)) << seed;
  }
  p.temperature = 0.0f;
  EXPECT_EQ(a.sample(row.data(), 50, p, 0, dirty, 4), b.sample(row.data(), 50, p, 0, clean, 2));
}

// --------------------------------------------------------------------------- penalties with the full pipeline

TEST(Sampler, PenalizedSamplingEqualsTheDrawOnTheReferencePenalizedRow) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> pen(-2.0f, 2.0f), rep(0.1f, 2.0f);
  Sampler s;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t vocab = 1 + int64_t(rng() % 300);
    const std::vector<float> row = normal_row(rng, vocab);
    std::vector<int32_t> history(rng() % 60);
    for (auto& t : history) t = int32_t(rng() % uint32_t(std::min<int64_t>(vocab, 12)));  // many repeats
    const size_t n_prompt = history.empty() ? 0 : rng() % (history.size() + 1);
    SamplingParams p = params(trial % 5 == 0 ? 0.0f : 0.5f + float(rng() % 100) / 50.0f, trial % 3 ? 0.9f : 1.0f,
                              int32_t(rng() % 3 == 0 ? rng() % 40 : 0), trial % 4 ? 0.0f : 0.05f, rng());
    p.presence_penalty = trial % 7 == 1 ? 0.0f : pen(rng);
    p.frequency_penalty = trial % 7 == 2 ? 0.0f : pen(rng);
    p.repetition_penalty = trial % 7 == 3 ? 1.0f : rep(rng);
    const std::vector<float> penalized = reference_penalize(row, p, history, n_prompt);
    const uint64_t position = rng() % 1000;
    const int32_t got = s.sample(row.data(), vocab, p, position, history, int64_t(n_prompt));
    SamplingParams plain = p;  // the same draw on the reference row
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    plain.repetition_penalty = 1.0f;
    ASSERT_EQ(got, reference_sample(penalized.data(), vocab, plain, position)) << "trial " << trial;
  }
}

TEST(Sampler, SameSeedAndPositionGiveTheSameTokenWithPenalties) {
  std::mt19937 rng(8);
  const std::vector<float> row = normal_row(rng, 300, 1.0f);
  const std::vector<int32_t> history = {5, 6, 7, 8, 5, 5, 9, 10, 11, 5};
  SamplingParams p = penalties(0.5f, 0.5f, 1.3f, 1.0f);
  int differing = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    p.seed = seed;
    Sampler fresh, reused;
    const int32_t t = fresh.sample(row.data(), 300, p, 17, history, 4);
    reused.sample(row.data(), 300, p, 18, history, 4);  // other position in between
    EXPECT_EQ(reused.sample(row.data(), 300, p, 17, history, 4), t);
    EXPECT_EQ(fresh.sample(row.data(), 300, p, 17, history, 4), t);
    differing += t != fresh.sample(row.data(), 300, p, 18, history, 4);
  }
  EXPECT_GT(differing, 0);  // the draw does depend on the position
}

// A generation resumed after a restart (the router's tpserve_continuation, coordinator/router_request.h): a fresh
// Sampler given the prompt + the first k outputs as history, those k counted as output, draws output i as the
// unbroken run did — the draw depends only on (seed, position), the penalties only on the history.
TEST(Sampler, AGenerationResumedAfterARestartDrawsTheSameTokens) {
  const int64_t vocab = 64;
  const std::vector<int32_t> prompt = {3, 9, 9, 27, 5};
  SamplingParams p = penalties(0.4f, 0.3f, 1.1f, 0.8f);
  p.top_p = 0.95f;
  p.seed = 1234;
  // The logits of a step depend on the sequence so far, as a model's do.
  const auto logits = [&](const std::vector<int32_t>& seq) {
    std::mt19937 rng(uint32_t(seq.size() * 131 + size_t(seq.back())));
    return normal_row(rng, vocab, 2.0f);
  };
  const auto run = [&](std::vector<int32_t> seq, int64_t n_prompt, int n, Sampler& s) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      const std::vector<float> row = logits(seq);
      const int32_t t = s.sample(row.data(), vocab, p, uint64_t(seq.size()), seq, n_prompt);
      seq.push_back(t);
      out.push_back(t);
    }
    return out;
  };
  Sampler unbroken;
  const std::vector<int32_t> full = run(prompt, int64_t(prompt.size()), 40, unbroken);
  for (int k : {0, 1, 7, 39}) {
    Sampler restarted;
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), full.begin(), full.begin() + k);
    EXPECT_EQ(run(seq, int64_t(prompt.size()), 40 - k, restarted), std::vector<int32_t>(full.begin() + k, full.end()))
        << "resumed after " << k << " tokens";
  }
  // The continued tokens counted as prompt instead: other penalties, another text.
  Sampler naive;
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), full.begin(), full.begin() + 7);
  EXPECT_NE(run(seq, int64_t(seq.size()), 33, naive), std::vector<int32_t>(full.begin() + 7, full.end()));
}

TEST(Sampler, CountsScratchStaysZeroedAcrossCalls) {
  std::mt19937 rng(99);
  Sampler reused;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t vocab = trial % 2 ? 40 : 25;  // alternating sizes: the scratch shrinks in use, not in size
    const std::vector<float> row = normal_row(rng, vocab, 1.0f);
    std::vector<int32_t> history(rng() % 30);
    for (auto& t : history) t = int32_t(rng() % 45) - 2;  // some outside [0, vocab)
    const int64_t n_prompt = int64_t(rng() % (history.size() + 1));
    SamplingParams p = penalties(0.8f, 0.9f, 1.7f, trial % 3 ? 0.7f : 0.0f);
    p.seed = uint64_t(trial);
    Sampler fresh;
    ASSERT_EQ(reused.sample(row.data(), vocab, p, 3, history, n_prompt),
              fresh.sample(row.data(), vocab, p, 3, history, n_prompt))
        << "trial " << trial;
  }
  // Two calls with different histories, then the first again: as with fresh samplers.
  const std::vector<float> row = {1.0f, 0.95f, 0.9f};
  const SamplingParams p = penalties(0, 0.2f, 1.0f);
  Sampler s;
  EXPECT_EQ(s.sample(row.data(), 3, p, 0, std::vector<int32_t>{0, 0}, 0), 1);  // 0.6, 0.95, 0.9
  // 1.0, 0.75, 0.9; a leftover count 2 for id 0 would give 0.6, 0.75, 0.9 and pick id 2.
  EXPECT_EQ(s.sample(row.data(), 3, p, 0, std::vector<int32_t>{1}, 0), 0);
  EXPECT_EQ(s.sample(row.data(), 3, p, 0, std::vector<int32_t>{}, 0), 0);
  EXPECT_EQ(s.sample(row.data(), 3, p, 0, std::vector<int32_t>{2}, 0), 0);
}

// ----------------------------------------------------------------------------------------------- logprobs

// log_softmax in long double.
std::vector<double> reference_logprobs(const std::vector<float>& row) {
  long double m = -std::numeric_limits<long double>::infinity();
  for (float x : row) m = std::max<long double>(m, x);
  long double sum = 0;
  for (float x : row) sum += std::exp((long double)x - m);
  std::vector<double> out;
  for (float x : row) out.push_back(double((long double)x - m - std::log(sum)));
  return out;
}

TEST(SamplerLogprobs, MatchADoublePrecisionReference) {
  std::mt19937 rng(3);
  Sampler s;
  for (int64_t vocab : {1, 2, 7, 20, 500, 50000}) {
    const std::vector<float> row = normal_row(rng, vocab, 4.0f);
    const std::vector<double> ref = reference_logprobs(row);
    const int32_t token = int32_t(rng() % uint64_t(vocab));
    const TokenLogprobs lp = s.logprobs(row.data(), vocab, token, kMaxLogprobs);
    EXPECT_NEAR(lp.logprob, ref[size_t(token)], 1e-5 * std::max(1.0, std::abs(ref[size_t(token)])));
    ASSERT_EQ(lp.top_ids.size(), size_t(std::min<int64_t>(vocab, kMaxLogprobs)));
    ASSERT_EQ(lp.top_logprobs.size(), lp.top_ids.size());
    // The top ids are the k largest logits in order.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < int32_t(vocab); ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
    for (size_t i = 0; i < lp.top_ids.size(); ++i) {
      EXPECT_EQ(lp.top_ids[i], order[i]) << "vocab " << vocab << " rank " << i;
      EXPECT_NEAR(lp.top_logprobs[i], ref[size_t(order[i])], 1e-5 * std::max(1.0, std::abs(ref[size_t(order[i])])));
      EXPECT_LE(lp.top_logprobs[i], 0.0f);
      if (i > 0) {
        EXPECT_LE(lp.top_logprobs[i], lp.top_logprobs[i - 1]);
      }
    }
  }
}

TEST(SamplerLogprobs, FullVocabTopListSumsToOne) {
  std::mt19937 rng(4);
  Sampler s;
  for (int64_t vocab : {1, 3, 16, 20}) {
    for (float scale : {0.1f, 3.0f, 30.0f}) {
      const std::vector<float> row = normal_row(rng, vocab, scale);
      const TokenLogprobs lp = s.logprobs(row.data(), vocab, 0, kMaxLogprobs);
      ASSERT_EQ(lp.top_ids.size(), size_t(vocab));
      double sum = 0;
      for (float l : lp.top_logprobs) sum += std::exp(double(l));
      EXPECT_NEAR(sum, 1.0, 1e-5) << "vocab " << vocab << " scale " << scale;
      // The token's own logprob is the one listed for it.
      const auto at = std::find(lp.top_ids.begin(), lp.top_ids.end(), 0) - lp.top_ids.begin();
      EXPECT_EQ(lp.logprob, lp.top_logprobs[size_t(at)]);
    }
  }
}

TEST(SamplerLogprobs, TiesListTheLowerIdFirst) {
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f, 1.0f};
  Sampler s;
  const TokenLogprobs lp = s.logprobs(row.data(), 6, 5, 6);
  EXPECT_EQ(lp.top_ids, (std::vector<int32_t>{1, 2, 4, 0, 5, 3}));
  EXPECT_EQ(lp.top_logprobs[0], lp.top_logprobs[1]);
  EXPECT_EQ(lp.top_logprobs[1], lp.top_logprobs[2]);
  EXPECT_EQ(lp.top_logprobs[3], lp.top_logprobs[4]);
  EXPECT_EQ(lp.logprob, lp.top_logprobs[4]);
  EXPECT_EQ(s.logprobs(row.data(), 6, 5, 2).top_ids, (std::vector<int32_t>{1, 2}));
}

TEST(SamplerLogprobs, KZeroAndKBeyondTheVocab) {
  const std::vector<float> row = {0.5f, -1.0f, 2.0f};
  const std::vector<double> ref = reference_logprobs(row);
  Sampler s;
  const TokenLogprobs none = s.logprobs(row.data(), 3, 1, 0);
  EXPECT_TRUE(none.top_ids.empty());
  EXPECT_TRUE(none.top_logprobs.empty());
  EXPECT_NEAR(none.logprob, ref[1], 1e-6);
  const TokenLogprobs all = s.logprobs(row.data(), 3, 1, kMaxLogprobs);  // clamped to the vocab of 3
  EXPECT_EQ(all.top_ids, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(all.top_logprobs.size(), 3u);
}

TEST(SamplerLogprobs, ClampedToZeroAndMinusInfinityKept) {
  Sampler s;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> dominant = {1e4f, -1e4f, 0.0f};
  const TokenLogprobs d = s.logprobs(dominant.data(), 3, 0, 3);
  EXPECT_EQ(d.logprob, 0.0f);
  EXPECT_LE(d.top_logprobs[0], 0.0f);
  const float single = 3.5f;
  EXPECT_EQ(s.logprobs(&single, 1, 0, 1).logprob, 0.0f);
  const std::vector<float> masked = {1.0f, -inf, 1.0f};
  const TokenLogprobs m = s.logprobs(masked.data(), 3, 1, 3);
  EXPECT_EQ(m.logprob, -inf);
  EXPECT_EQ(m.top_ids, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_NEAR(m.top_logprobs[0], std::log(0.5), 1e-7);
  // Many equal logits: every logprob <= 0 even where rounding could push log(1/n) around.
  const std::vector<float> flat(7, 1e3f);
  for (float l : s.logprobs(flat.data(), 7, 3, 7).top_logprobs) EXPECT_NEAR(l, -std::log(7.0), 1e-6);
}

TEST(SamplerLogprobs, RefusesBadArguments) {
  const std::vector<float> row = {0.0f, 1.0f};
  Sampler s;
  EXPECT_THROW(s.logprobs(row.data(), 2, 2, 1), Error);
  EXPECT_THROW(s.logprobs(row.data(), 2, -1, 1), Error);
  EXPECT_THROW(s.logprobs(row.data(), 2, 0, -1), Error);
  const std::vector<float> bad = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(s.logprobs(bad.data(), 2, 0, 1), Error);
  const std::vector<float> all_masked(3, -std::numeric_limits<float>::infinity());
  EXPECT_THROW(s.logprobs(all_masked.data(), 3, 0, 1), Error);
}

}  // namespace
}  // namespace tp
