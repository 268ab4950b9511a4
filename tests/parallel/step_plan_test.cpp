// StepPlan / StepResult serialization: round trips, and malformed buffers (every truncation, every single-byte
// corruption, random garbage) must throw tp::Error and never read out of bounds (run under ASan to be sure).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "common/error.h"
#include "parallel/step_plan.h"

namespace tp {
namespace {

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
  prefill.sampling = {0.7f, 0.9f, 40, 0.05f, 1234567890123ull};
  SeqPlan decode;
  decode.seq_id = int64_t(1) << 40;
  decode.tokens = {42};
  decode.start_pos = 300;
  decode.block_table = {0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  decode.want_logits = true;
  decode.sampling = {0.0f, 1.0f, 0, 0.0f, 0};
  SeqPlan chunk;  // a prefill chunk that wants no logits yet
  chunk.seq_id = 8;
  chunk.tokens = std::vector<int32_t>(64, 17);
  chunk.start_pos = 128;
  chunk.block_table = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  p.seqs = {prefill, decode, chunk};
  p.block_copies = {{4, 33}, {5, 34}};
  return p;
}

TEST(StepPlan, RoundTrips) {
  const StepPlan p = sample_plan();
  const std::vector<uint8_t> b = serialize(p);
  EXPECT_EQ(deserialize_step_plan(b), p);
  EXPECT_EQ(p.n_tokens(), 5 + 1 + 64);
  // 40-byte header + 3 * 56-byte seq headers + int32 arrays + 2 copies * 8 bytes
  EXPECT_EQ(b.size(), 40u + 3 * 56 + (5 + 2 + 1 + 19 + 64 + 12) * 4 + 2 * 8);

  StepPlan empty;
  EXPECT_EQ(deserialize_step_plan(serialize(empty)), empty);
  StepPlan shutdown;
  shutdown.kind = StepKind::Shutdown;
  shutdown.step_id = 99;
  EXPECT_EQ(deserialize_step_plan(serialize(shutdown)), shutdown);
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

// Rewrites the checksum after corrupting, so the structural checks (counts, sizes, values) are exercised
// rather than the checksum alone. Must throw or return a plan that re-serializes to the same bytes.
void reseal(std::vector<uint8_t>& c) {
  if (c.size() < 40) return;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < c.size(); ++i)
    if (i < 32 || i >= 36) h = (h ^ c[i]) * 16777619u;
  std::memcpy(c.data() + 32, &h, 4);
}

TEST(StepPlan, ResealedCorruptionsThrowOrStayConsistent) {
  const std::vector<uint8_t> b = serialize(sample_plan());
  std::mt19937 rng(42);
  int thrown = 0, accepted = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<uint8_t> c = b;
      c[i] = uint8_t(rng());
      if (trial == 3) c[i] = 0xff;
      reseal(c);
      try {
        const StepPlan p = deserialize_step_plan(c);
        EXPECT_EQ(serialize(p), c) << "byte " << i;
        ++accepted;
      } catch (const Error&) {
        ++thrown;
      }
    }
  }
  EXPECT_GT(thrown, 0);
  EXPECT_GT(accepted, 0);  // e.g. a different token id is still a valid plan
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

TEST(StepResult, RoundTripsAndRejectsMalformed) {
  StepResult r;
  r.step_id = 12;
  r.seq_ids = {7, int64_t(1) << 40};
  r.tokens = {198, 0};
  const std::vector<uint8_t> b = serialize(r);
  EXPECT_EQ(deserialize_step_result(b), r);
  EXPECT_EQ(deserialize_step_result(serialize(StepResult{})), StepResult{});
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> t(b.begin(), b.begin() + ptrdiff_t(n));
    EXPECT_THROW(deserialize_step_result(t), Error) << n;
  }
  for (size_t i = 0; i < b.size(); ++i) {
    std::vector<uint8_t> c = b;
    c[i] ^= 0x10;
    EXPECT_THROW(deserialize_step_result(c), Error) << i;
  }
  EXPECT_THROW(deserialize_step_result(serialize(sample_plan())), Error);  // a plan is not a result
  StepResult bad = r;
  bad.tokens.pop_back();
  EXPECT_THROW(serialize(bad), Error);
}

}  // namespace
}  // namespace tp
