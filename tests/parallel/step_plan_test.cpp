// StepPlan / StepResult serialization: round trips, and malformed buffers (every truncation, every single-byte
// corruption, random garbage) must throw tp::Error and never read out of bounds (run under ASan to be sure).
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "common/error.h"
#include "parallel/step_plan.h"

namespace tp {
namespace {

// A v3 plan: a prefill with every penalty, top-20 logprobs, two logit biases and prompt logprobs (top 3) for
// its first 4 rows, a decode with a history (2 prompt + 3 output tokens), repetition penalty and logprobs 0,
// and a prefill chunk without logits (and so without history) whose 64 rows all yield prompt logprobs (k 0).
StepPlan sample_plan() {
  StepPlan p;
  p.step_id = 0x0102030405060708ull;
  p.kind = StepKind::Run;
  SeqPlan prefill;
  prefill.seq_id = 7;
  prefill.tokens = {1, 9038, 2114, 28, 49151};
  prefill.start_pos = 0;
  prefill.block_table = {3, 4};
  prefill.want_logits = true;
  prefill.sampling = {.temperature = 0.7f,
                      .top_p = 0.9f,
                      .top_k = 40,
                      .min_p = 0.05f,
                      .seed = 1234567890123ull,
                      .presence_penalty = 0.5f,
                      .frequency_penalty = -1.25f,
                      .repetition_penalty = 1.1f,
                      .logprobs = kMaxLogprobs};
  prefill.history = prefill.tokens;
  prefill.n_history_prompt = 5;
  prefill.logit_bias = {{50256, -100.0f}, {7, 2.5f}};
  prefill.prompt_logprobs = 3;
  prefill.prompt_targets = {9038, 2114, 28, 49151};
  SeqPlan decode;
  decode.seq_id = int64_t(1) << 40;
  decode.tokens = {42};
  decode.start_pos = 300;
  decode.block_table = {0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  decode.want_logits = true;
  decode.sampling = {.temperature = 0.0f, .repetition_penalty = 2.0f, .logprobs = 0};
  decode.history = {11, 12, 13, 13, 0};
  decode.n_history_prompt = 2;
  SeqPlan chunk;  // a prefill chunk that wants no logits yet
  chunk.seq_id = 8;
  chunk.tokens = std::vector<int32_t>(64, 17);
  chunk.start_pos = 128;
  chunk.block_table = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  chunk.prompt_logprobs = 0;
  chunk.prompt_targets = std::vector<int32_t>(64, 18);
  p.seqs = {prefill, decode, chunk};
  p.block_copies = {{4, 33}, {5, 34}};
  return p;
}

// Byte offsets of the v3 wire format (parallel/step_plan.cpp), for the tests that patch fields.
constexpr size_t kPlanHeaderBytes = 40;
constexpr size_t kSeqHeaderBytes = 96;
size_t seq_field(size_t seq, size_t offset) { return kPlanHeaderBytes + seq * kSeqHeaderBytes + offset; }
constexpr size_t kNHistory = 24, kNHistoryPrompt = 28, kPresence = 56, kFrequency = 60, kRepetition = 64,
                 kLogprobs = 68, kWantLogits = 72, kPromptLogprobs = 76, kNPromptTargets = 80, kNLogitBias = 84;
// Per-sequence arrays, in order: tokens, block table, history, prompt targets (int32 each), logit bias (8 B).
constexpr size_t kSeq0ArrayBytes = (5 + 2 + 5 + 4) * 4 + 2 * 8, kSeq1ArrayBytes = (1 + 19 + 5) * 4;

// Rewrites the checksum after corrupting, so the structural checks (counts, sizes, values) are exercised
// rather than the checksum alone. Plan and result headers both keep the checksum at bytes [32, 36).
void reseal(std::vector<uint8_t>& c) {
  if (c.size() < 40) return;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < c.size(); ++i)
    if (i < 32 || i >= 36) h = (h ^ c[i]) * 16777619u;
  std::memcpy(c.data() + 32, &h, 4);
}

template <class T>
void patch(std::vector<uint8_t>& b, size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof(T));
  reseal(b);
}

// Runs f, expecting a tp::Error whose message contains every one of `needles`.
template <class F>
void expect_error_naming(F f, std::initializer_list<const char*> needles, const char* context) {
  try {
    f();
    ADD_FAILURE() << context << ": no error";
  } catch (const Error& e) {
    for (const char* n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << context << ": \"" << e.what() << "\" lacks " << n;
  }
}

TEST(StepPlan, RoundTrips) {
  const StepPlan p = sample_plan();
  const std::vector<uint8_t> b = serialize(p);
  EXPECT_EQ(deserialize_step_plan(b), p);
  EXPECT_EQ(p.n_tokens(), 5 + 1 + 64);
  // 40-byte header + 3 * 96-byte seq headers + int32 arrays (tokens, block tables, histories, prompt targets)
  // + 2 logit biases * 8 + 2 copies * 8
  EXPECT_EQ(b.size(), 40u + 3 * 96 + (5 + 2 + 5 + 4 + 1 + 19 + 5 + 64 + 12 + 64) * 4 + 2 * 8 + 2 * 8);

  StepPlan empty;
  EXPECT_EQ(deserialize_step_plan(serialize(empty)), empty);
  StepPlan shutdown;
  shutdown.kind = StepKind::Shutdown;
  shutdown.step_id = 99;
  EXPECT_EQ(deserialize_step_plan(serialize(shutdown)), shutdown);
}

TEST(StepPlan, RoundTripsPenaltiesLogprobsAndHistory) {
  const StepPlan q = deserialize_step_plan(serialize(sample_plan()));
  ASSERT_EQ(q.seqs.size(), 3u);
  const SamplingParams& a = q.seqs[0].sampling;
  EXPECT_EQ(a.temperature, 0.7f);
  EXPECT_EQ(a.top_p, 0.9f);
  EXPECT_EQ(a.top_k, 40);
  EXPECT_EQ(a.min_p, 0.05f);
  EXPECT_EQ(a.seed, 1234567890123ull);
  EXPECT_EQ(a.presence_penalty, 0.5f);
  EXPECT_EQ(a.frequency_penalty, -1.25f);
  EXPECT_EQ(a.repetition_penalty, 1.1f);
  EXPECT_EQ(a.logprobs, kMaxLogprobs);
  EXPECT_EQ(q.seqs[0].history, (std::vector<int32_t>{1, 9038, 2114, 28, 49151}));
  EXPECT_EQ(q.seqs[0].n_history_prompt, 5);
  EXPECT_EQ(q.seqs[1].sampling.repetition_penalty, 2.0f);
  EXPECT_EQ(q.seqs[1].sampling.logprobs, 0);
  EXPECT_EQ(q.seqs[1].history, (std::vector<int32_t>{11, 12, 13, 13, 0}));
  EXPECT_EQ(q.seqs[1].n_history_prompt, 2);
  EXPECT_EQ(q.seqs[2].sampling, SamplingParams{});  // defaults: no penalties, logprobs -1
  EXPECT_TRUE(q.seqs[2].history.empty());
  // Extremes of every range survive.
  StepPlan p = sample_plan();
  p.seqs[0].sampling.presence_penalty = -2.0f;
  p.seqs[0].sampling.frequency_penalty = 2.0f;
  p.seqs[0].sampling.repetition_penalty = 1e-6f;
  p.seqs[1].sampling.logprobs = -1;
  p.seqs[1].n_history_prompt = 0;
  p.seqs[0].history.clear();
  p.seqs[0].n_history_prompt = 0;
  EXPECT_EQ(deserialize_step_plan(serialize(p)), p);
}

TEST(StepPlan, SerializeRefusesInvalidPlans) {
  auto refuses = [](auto mutate) {
    StepPlan p = sample_plan();
    mutate(p);
    EXPECT_THROW(serialize(p), Error);
  };
  refuses([](StepPlan& p) { p.seqs[0].tokens[1] = -1; });
  refuses([](StepPlan& p) { p.seqs[1].block_table[0] = -5; });
  refuses([](StepPlan& p) { p.seqs[0].start_pos = -1; });
  refuses([](StepPlan& p) { p.seqs[0].seq_id = -1; });
  refuses([](StepPlan& p) { p.seqs[2].seq_id = p.seqs[0].seq_id; });
  refuses([](StepPlan& p) { p.seqs[0].sampling.temperature = -0.5f; });
  refuses([](StepPlan& p) { p.seqs[0].sampling.temperature = std::numeric_limits<float>::quiet_NaN(); });
  refuses([](StepPlan& p) { p.seqs[0].sampling.top_p = 0.0f; });
  refuses([](StepPlan& p) { p.seqs[0].sampling.top_p = 1.5f; });
  refuses([](StepPlan& p) { p.seqs[0].sampling.top_k = -1; });
  refuses([](StepPlan& p) { p.seqs[0].sampling.min_p = 2.0f; });
  refuses([](StepPlan& p) { p.block_copies[0].dst = -1; });
  refuses([](StepPlan& p) { p.kind = StepKind::Shutdown; });  // with sequences
  refuses([](StepPlan& p) { p.kind = StepKind(7); });
}

// One test per v2 rule, on both sides: serialize refuses the plan, and deserialize refuses a valid buffer
// with the field patched (checksum rewritten). The message names the sequence and the field.
TEST(StepPlan, RefusesBadPenaltiesLogprobsAndHistory) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto refuses = [](auto mutate, std::initializer_list<const char*> needles) {
    StepPlan p = sample_plan();
    mutate(p);
    expect_error_naming([&] { serialize(p); }, needles, needles.begin()[1]);
  };
  refuses([](StepPlan& p) { p.seqs[1].sampling.presence_penalty = 2.5f; }, {"seq[1]", "presence_penalty"});
  refuses([](StepPlan& p) { p.seqs[1].sampling.presence_penalty = -2.01f; }, {"seq[1]", "presence_penalty"});
  refuses([&](StepPlan& p) { p.seqs[1].sampling.presence_penalty = nan; }, {"seq[1]", "presence_penalty"});
  refuses([](StepPlan& p) { p.seqs[0].sampling.frequency_penalty = -3.0f; }, {"seq[0]", "frequency_penalty"});
  refuses([&](StepPlan& p) { p.seqs[0].sampling.frequency_penalty = inf; }, {"seq[0]", "frequency_penalty"});
  refuses([](StepPlan& p) { p.seqs[0].sampling.repetition_penalty = 0.0f; }, {"seq[0]", "repetition_penalty"});
  refuses([](StepPlan& p) { p.seqs[0].sampling.repetition_penalty = -1.0f; }, {"seq[0]", "repetition_penalty"});
  refuses([](StepPlan& p) { p.seqs[0].sampling.repetition_penalty = 2.5f; }, {"seq[0]", "repetition_penalty"});
  refuses([&](StepPlan& p) { p.seqs[0].sampling.repetition_penalty = nan; }, {"seq[0]", "repetition_penalty"});
  refuses([](StepPlan& p) { p.seqs[2].sampling.logprobs = -2; }, {"seq[2]", "logprobs"});
  refuses([](StepPlan& p) { p.seqs[2].sampling.logprobs = kMaxLogprobs + 1; }, {"seq[2]", "logprobs"});
  refuses([](StepPlan& p) { p.seqs[1].history[3] = -1; }, {"seq[1]", "history"});
  refuses([](StepPlan& p) { p.seqs[1].n_history_prompt = 6; }, {"seq[1]", "n_history_prompt"});
  refuses([](StepPlan& p) { p.seqs[1].n_history_prompt = -1; }, {"seq[1]", "n_history_prompt"});
  refuses([](StepPlan& p) { p.seqs[0].want_logits = false; }, {"seq[0]", "history", "want_logits"});
  refuses([](StepPlan& p) { p.seqs[0].history.clear(), p.seqs[0].n_history_prompt = 0, p.seqs[0].want_logits = false; },
          {"seq[0]", "logit_bias", "want_logits"});
  refuses([](StepPlan& p) { p.seqs[0].logit_bias[1].bias = 100.5f; }, {"seq[0]", "logit_bias"});
  refuses([](StepPlan& p) { p.seqs[0].logit_bias[0].token = -1; }, {"seq[0]", "logit_bias"});
  refuses([](StepPlan& p) { p.seqs[0].prompt_logprobs = kMaxLogprobs + 1; }, {"seq[0]", "prompt_logprobs"});
  refuses([](StepPlan& p) { p.seqs[2].prompt_logprobs = -1; }, {"seq[2]", "prompt_targets", "prompt_logprobs"});
  refuses([](StepPlan& p) { p.seqs[0].prompt_targets.push_back(1); }, {"seq[0]", "5 prompt_targets", "sampling row"});
  refuses([](StepPlan& p) { p.seqs[2].prompt_targets.push_back(1); }, {"seq[2]", "65 prompt_targets"});
  refuses([](StepPlan& p) { p.seqs[2].prompt_targets[9] = -4; }, {"seq[2]", "prompt_targets"});

  const std::vector<uint8_t> good = serialize(sample_plan());
  auto rejects = [&](size_t offset, auto value, std::initializer_list<const char*> needles) {
    std::vector<uint8_t> b = good;
    patch(b, offset, value);
    expect_error_naming([&] { deserialize_step_plan(b); }, needles, needles.begin()[1]);
  };
  rejects(seq_field(1, kPresence), 2.5f, {"seq[1]", "presence_penalty"});
  rejects(seq_field(1, kPresence), nan, {"seq[1]", "presence_penalty"});
  rejects(seq_field(0, kFrequency), -inf, {"seq[0]", "frequency_penalty"});
  rejects(seq_field(0, kRepetition), 0.0f, {"seq[0]", "repetition_penalty"});
  rejects(seq_field(0, kRepetition), 2.001f, {"seq[0]", "repetition_penalty"});
  rejects(seq_field(2, kLogprobs), int32_t(-2), {"seq[2]", "logprobs"});
  rejects(seq_field(2, kLogprobs), int32_t(kMaxLogprobs + 1), {"seq[2]", "logprobs"});
  rejects(seq_field(1, kNHistoryPrompt), uint32_t(6), {"seq[1]", "n_history_prompt"});
  rejects(seq_field(0, kWantLogits), uint8_t(0), {"seq[0]", "history", "want_logits"});
  rejects(seq_field(0, kPromptLogprobs), int32_t(kMaxLogprobs + 1), {"seq[0]", "prompt_logprobs"});
  rejects(seq_field(0, kPromptLogprobs), int32_t(-1), {"seq[0]", "prompt_targets", "prompt_logprobs"});
  rejects(seq_field(2, kNPromptTargets), uint32_t(0), {"StepPlan", "trailing bytes"});
  rejects(seq_field(0, kNLogitBias), uint32_t(1000), {"logit bias", "past the end"});
  // seq[1]'s history[3] follows the seq headers, seq[0]'s arrays and seq[1]'s tokens and table (1 + 19).
  rejects(kPlanHeaderBytes + 3 * kSeqHeaderBytes + kSeq0ArrayBytes + (1 + 19 + 3) * 4, int32_t(-7), {"seq[1]", "history"});
  // seq[0]'s second logit bias value (after its tokens, table, history and targets, and the first bias).
  rejects(kPlanHeaderBytes + 3 * kSeqHeaderBytes + (5 + 2 + 5 + 4) * 4 + 8 + 4, 1e9f, {"seq[0]", "logit_bias"});
  (void)kSeq1ArrayBytes;
  // A history count beyond the buffer is a bounds error, not an over-read.
  rejects(seq_field(2, kNHistory), uint32_t(1000), {"history", "past the end"});
}

TEST(StepPlan, EveryTruncationThrows) {
  const std::vector<uint8_t> b = serialize(sample_plan());
  for (size_t n = 0; n < b.size(); ++n) {
    // A fresh heap copy of exactly n bytes, so ASan flags any read past it.
    std::vector<uint8_t> t(b.begin(), b.begin() + ptrdiff_t(n));
    EXPECT_THROW(deserialize_step_plan(t), Error) << "truncated to " << n;
  }
  std::vector<uint8_t> longer = b;
  longer.push_back(0);
  EXPECT_THROW(deserialize_step_plan(longer), Error);
}

TEST(StepPlan, EverySingleByteCorruptionThrows) {
  const std::vector<uint8_t> b = serialize(sample_plan());
  for (size_t i = 0; i < b.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      std::vector<uint8_t> c = b;
      c[i] ^= mask;
      EXPECT_THROW(deserialize_step_plan(c), Error) << "byte " << i << " ^ " << int(mask);
    }
  }
}

// Every byte of `b` replaced (three random values, then 0xff) and the checksum rewritten: `parse` must throw
// or return a message that re-serializes to the same bytes. Both must happen at least once (a different
// token id, say, is still a valid message).
template <class Parse>
void expect_resealed_corruptions_throw_or_round_trip(const std::vector<uint8_t>& b, Parse parse, uint32_t seed) {
  std::mt19937 rng(seed);
  int thrown = 0, accepted = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<uint8_t> c = b;
      c[i] = uint8_t(rng());
      if (trial == 3) c[i] = 0xff;
      reseal(c);
      try {
        EXPECT_EQ(serialize(parse(c)), c) << "byte " << i;
        ++accepted;
      } catch (const Error&) {
        ++thrown;
      }
    }
  }
  EXPECT_GT(thrown, 0);
  EXPECT_GT(accepted, 0);
}

TEST(StepPlan, ResealedCorruptionsThrowOrStayConsistent) {
  const std::vector<uint8_t> b = serialize(sample_plan());
  expect_resealed_corruptions_throw_or_round_trip(b, [](const auto& c) { return deserialize_step_plan(c); }, 42);
  // Counts that claim more than the buffer holds, with a valid checksum: the header's n_seqs at offset 16.
  for (uint32_t n : {4u, 1000u, 0xffffffffu}) {
    std::vector<uint8_t> c = b;
    std::memcpy(c.data() + 16, &n, 4);
    reseal(c);
    EXPECT_THROW(deserialize_step_plan(c), Error) << n;
  }
  // The first sequence's n_tokens (header 40 + seq_id 8 + start_pos 8).
  for (uint32_t n : {6u, 0x40000000u, 0xffffffffu}) {
    std::vector<uint8_t> c = b;
    std::memcpy(c.data() + 56, &n, 4);
    reseal(c);
    EXPECT_THROW(deserialize_step_plan(c), Error) << n;
  }
}

TEST(StepPlan, RandomGarbageThrows) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> g(rng() % 300);
    for (auto& x : g) x = uint8_t(rng());
    if (g.size() >= 4 && trial % 2) std::memcpy(g.data(), &kStepPlanMagic, 4);
    EXPECT_THROW(deserialize_step_plan(g), Error);
  }
}

TokenLogprobs token_logprobs(float logprob, std::vector<int32_t> ids, std::vector<float> lps) {
  TokenLogprobs t;
  t.logprob = logprob;
  t.top_ids = std::move(ids);
  t.top_logprobs = std::move(lps);
  return t;
}

// A v3 result: four sampled tokens, logprobs for three of them (k = 3, k = 0 and the k = kMaxLogprobs
// maximum with a -inf value), and prompt logprobs of two sequences (3 entries with k = 2 and rank 5, 1 with
// k = 0).
StepResult sample_result() {
  StepResult r;
  r.step_id = 12;
  r.seq_ids = {7, int64_t(1) << 40, 3, 9};
  r.tokens = {198, 0, 5, 77};
  TokenLogprobs full = token_logprobs(-0.25f, {}, {});
  for (int32_t i = 0; i < kMaxLogprobs; ++i) {
    full.top_ids.push_back(1000 + i);
    full.top_logprobs.push_back(-0.5f * float(i));
  }
  full.top_logprobs.back() = -std::numeric_limits<float>::infinity();
  r.logprobs = {token_logprobs(-1.5f, {198, 3, 4}, {-1.5f, -2.0f, -2.0f}), std::nullopt,
                token_logprobs(0.0f, {}, {}), full};
  TokenLogprobs ranked = token_logprobs(-3.0f, {8, 9}, {-0.1f, -2.5f});
  ranked.rank = 5;
  r.prompt_logprobs = {{7, 1, {ranked, ranked, ranked}}, {3, 130, {token_logprobs(-0.5f, {}, {})}}};
  return r;
}

TEST(StepResult, RoundTrips) {
  const StepResult r = sample_result();
  const std::vector<uint8_t> b = serialize(r);
  EXPECT_EQ(deserialize_step_result(b), r);
  // header + 4 * (8 + 4) + entries (k, logprob, rank + k * 8): (12 + 3 * 8), 4 (nullopt), 12, (12 + 20 * 8)
  // + prompt logprobs (seq_id, first_position, n: 20 bytes + entries): 20 + 3 * (12 + 2 * 8), 20 + 12
  EXPECT_EQ(b.size(), 48u + 4 * 12 + (12 + 3 * 8) + 4 + 12 + (12 + 20 * 8) + 20 + 3 * (12 + 2 * 8) + 20 + 12);

  StepResult none = r;
  none.logprobs.clear();  // no sequence asked: no logprobs section at all
  none.prompt_logprobs.clear();
  const std::vector<uint8_t> nb = serialize(none);
  EXPECT_EQ(nb.size(), 48u + 4 * 12);
  EXPECT_EQ(deserialize_step_result(nb), none);

  StepResult all_null = r;
  all_null.logprobs.assign(4, std::nullopt);
  EXPECT_EQ(deserialize_step_result(serialize(all_null)), all_null);
  EXPECT_EQ(deserialize_step_result(serialize(StepResult{})), StepResult{});

  StepResult slack = r;  // tiny positive rounding is accepted, up to 1e-6
  slack.logprobs[2]->logprob = 5e-7f;
  EXPECT_EQ(deserialize_step_result(serialize(slack)), slack);
}

TEST(StepResult, RefusesBadLogprobs) {
  auto refuses = [](auto mutate, const char* needle) {
    StepResult r = sample_result();
    mutate(r);
    expect_error_naming([&] { serialize(r); }, {needle}, needle);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  refuses([](StepResult& r) { r.logprobs.pop_back(); }, "logprobs entries");
  refuses([](StepResult& r) { r.logprobs[0]->top_ids.push_back(9); }, "top_logprobs");
  refuses([](StepResult& r) {
    r.logprobs[3]->top_ids.push_back(1);
    r.logprobs[3]->top_logprobs.push_back(-30.0f);
  }, "logprobs[3] k 21");
  refuses([](StepResult& r) { r.logprobs[0]->top_ids[1] = -3; }, "logprobs[0] top_ids");
  refuses([](StepResult& r) { r.logprobs[2]->logprob = 0.01f; }, "logprobs[2] logprob");
  refuses([&](StepResult& r) { r.logprobs[2]->logprob = nan; }, "logprobs[2] logprob");
  refuses([&](StepResult& r) { r.logprobs[2]->logprob = inf; }, "logprobs[2] logprob");
  refuses([&](StepResult& r) { r.logprobs[0]->top_logprobs[2] = nan; }, "logprobs[0] top_logprobs");
  refuses([](StepResult& r) { r.logprobs[3]->top_logprobs[0] = 0.5f; }, "logprobs[3] top_logprobs");
  refuses([](StepResult& r) { r.tokens.pop_back(); }, "tokens");
  refuses([](StepResult& r) { r.logprobs[0]->rank = 0; }, "logprobs[0] rank 0");
  refuses([](StepResult& r) { r.prompt_logprobs[1].first_position = 0; }, "prompt_logprobs[1] first_position");
  refuses([](StepResult& r) { r.prompt_logprobs[0].seq_id = -1; }, "prompt_logprobs[0] seq_id");
  refuses([](StepResult& r) { r.prompt_logprobs[0].entries[2].rank = -1; }, "prompt_logprobs[0] entry 2 rank");
  refuses([](StepResult& r) { r.prompt_logprobs[0].entries[1].top_ids[0] = -1; }, "prompt_logprobs[0] entry 1 top_ids");

  // Patched buffers (checksum rewritten). has_logprobs is the uint16 at offset 6; entry 0's k follows the
  // 48-byte header and the two arrays (4 * 12 bytes); entry 1 (nullopt) follows entry 0's 12 + 3 * 8 bytes.
  const std::vector<uint8_t> good = serialize(sample_result());
  auto rejects = [&](size_t offset, auto value, const char* needle) {
    std::vector<uint8_t> b = good;
    patch(b, offset, value);
    expect_error_naming([&] { deserialize_step_result(b); }, {needle}, needle);
  };
  const size_t k0 = 48 + 4 * 12, k1 = k0 + 12 + 3 * 8;
  rejects(6, uint16_t(2), "has_logprobs");
  rejects(6, uint16_t(0), "malformed StepResult");  // the logprobs section is then misread: refused
  rejects(k0, int32_t(kMaxLogprobs + 1), "logprobs[0] k");
  rejects(k0, int32_t(-2), "logprobs[0] k");
  rejects(k0, int32_t(4), "logprobs");  // k one too large: the entries after it are misread, and refused
  rejects(k1, int32_t(0), "logprobs");  // a nullopt turned into k = 0: likewise
  rejects(k0 + 4, 0.5f, "logprobs[0] logprob");
  rejects(k0 + 8, int32_t(0), "logprobs[0] rank");
  rejects(k0 + 12, int32_t(-1), "logprobs[0] top_ids");
  rejects(40, uint64_t(1000), "prompt logprobs");  // n_prompt_logprobs beyond the buffer
  // The first prompt-logprobs entry's first_position (after the four sampled entries) set to 0.
  const size_t p0 = k1 + 4 + 12 + (12 + 20 * 8);
  rejects(p0 + 8, int64_t(0), "first_position");
  rejects(p0 + 16, uint32_t(1u << 30), "past the end");
  std::vector<uint8_t> flagged_empty = serialize(StepResult{});
  patch(flagged_empty, 6, uint16_t(1));
  expect_error_naming([&] { deserialize_step_result(flagged_empty); }, {"has_logprobs"}, "n = 0");
}

TEST(StepResult, MalformedBuffersThrow) {
  for (const StepResult& r : {sample_result(), StepResult{}}) {
    const std::vector<uint8_t> b = serialize(r);
    for (size_t n = 0; n < b.size(); ++n) {
      std::vector<uint8_t> t(b.begin(), b.begin() + ptrdiff_t(n));
      EXPECT_THROW(deserialize_step_result(t), Error) << n;
    }
    std::vector<uint8_t> longer = b;
    longer.push_back(0);
    EXPECT_THROW(deserialize_step_result(longer), Error);
    for (size_t i = 0; i < b.size(); ++i) {
      for (uint8_t mask : {uint8_t(0x01), uint8_t(0x10), uint8_t(0x80), uint8_t(0xff)}) {
        std::vector<uint8_t> c = b;
        c[i] ^= mask;
        EXPECT_THROW(deserialize_step_result(c), Error) << "byte " << i << " ^ " << int(mask);
      }
    }
  }
  EXPECT_THROW(deserialize_step_result(serialize(sample_plan())), Error);  // a plan is not a result
  EXPECT_THROW(deserialize_step_plan(serialize(sample_result())), Error);  // nor a result a plan
}

TEST(StepResult, ResealedCorruptionsThrowOrStayConsistent) {
  const std::vector<uint8_t> b = serialize(sample_result());
  expect_resealed_corruptions_throw_or_round_trip(b, [](const auto& c) { return deserialize_step_result(c); }, 43);
  // n (offset 16) and n_prompt_logprobs (offset 40) claiming more than the buffer holds, with a valid checksum.
  for (uint64_t n : {5ull, 1000ull, ~0ull}) {
    std::vector<uint8_t> c = b;
    patch(c, 40, n);
    EXPECT_THROW(deserialize_step_result(c), Error) << n;
  }
  for (uint64_t n : {5ull, 1000ull, ~0ull}) {
    std::vector<uint8_t> c = b;
    patch(c, 16, n);
    EXPECT_THROW(deserialize_step_result(c), Error) << n;
  }
}

}  // namespace
}  // namespace tp
