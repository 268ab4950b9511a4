// TP layout math: head / KV-head / intermediate / vocab slices, validation messages, KV bytes per token.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/error.h"
#include "parallel/tp_layout.h"

namespace tp {
namespace {

// SmolLM2-135M-Instruct: 30 layers, 576 hidden, 9 heads, 3 KV heads, head_dim 64, 1536 ffn, 49152 vocab.
const TpShape kSmolLM2{30, 9, 3, 64, 576, 1536, 49152};
// The same heads with an intermediate size 9 divides, so tp 9 is valid.
const TpShape kSmolLM2Ffn1152{30, 9, 3, 64, 576, 1152, 49152};
const TpShape kGqa8x4{4, 8, 4, 32, 256, 512, 1000};

std::string message_of(const TpShape& s, int tp, const std::string& name) {
  try {
    validate_tp(s, tp, name);
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TpLayout, SmolLM2ValidDegrees) {
  EXPECT_EQ(valid_tp_degrees(kSmolLM2), (std::vector<int>{1, 3}));  // 1536 % 9 != 0
  EXPECT_EQ(valid_tp_degrees(kSmolLM2Ffn1152), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(valid_tp_degrees(kGqa8x4), (std::vector<int>{1, 2, 4, 8}));
}

TEST(TpLayout, RefusesImpossibleTpWithTheValidChoices) {
  EXPECT_EQ(message_of(kSmolLM2Ffn1152, 2, "SmolLM2-135M-Instruct"),
            "tp=2 does not divide the 9 attention heads of SmolLM2-135M-Instruct; valid: 1, 3, 9");
  EXPECT_EQ(message_of(kSmolLM2, 2, "SmolLM2-135M-Instruct"),
            "tp=2 does not divide the 9 attention heads of SmolLM2-135M-Instruct; valid: 1, 3");
  EXPECT_EQ(message_of(kSmolLM2, 9, "SmolLM2-135M-Instruct"),
            "tp=9 does not divide the intermediate size 1536 of SmolLM2-135M-Instruct; valid: 1, 3");
  EXPECT_EQ(message_of(kSmolLM2, 0, "m"), "tp=0 is not >= 1 for m; valid: 1, 3");
  // 12 heads, 4 KV heads: tp 6 divides the heads but neither divides nor is a multiple of 4 KV heads.
  const TpShape s12{2, 12, 4, 16, 192, 384, 100};
  EXPECT_EQ(message_of(s12, 6, "x"), "tp=6 neither divides nor is a multiple of the 4 KV heads of x; valid: 1, 2, 4, 12");
  EXPECT_THROW(make_tp_layout(kSmolLM2, 2, 0, "SmolLM2"), InputError);
  EXPECT_THROW(make_tp_layout(kSmolLM2, 3, 3, "SmolLM2"), InputError);  // rank out of range
  EXPECT_THROW(make_tp_layout(kSmolLM2, 3, -1, "SmolLM2"), InputError);
  EXPECT_THROW(valid_tp_degrees(TpShape{1, 9, 2, 64, 576, 1536, 10}), InputError);  // 2 KV heads don't divide 9
  EXPECT_THROW(valid_tp_degrees(TpShape{1, 0, 1, 64, 576, 1536, 10}), InputError);
}

// Invariants every valid layout must meet, for every rank: slices tile the whole range, KV heads cover the
// Q heads' groups, vocab padding is minimal.
void check_layout_invariants(const TpShape& s, int tp) {
  SCOPED_TRACE("tp=" + std::to_string(tp));
  const int64_t group = s.n_heads / s.n_kv_heads;
  int64_t next_q = 0, next_i = 0, next_v = 0;
  std::set<int64_t> kv_seen;
  for (int r = 0; r < tp; ++r) {
    const TpLayout l = make_tp_layout(s, tp, r, "m");
    EXPECT_EQ(l.q_heads.begin, next_q);
    EXPECT_EQ(l.intermediate.begin, next_i);
    EXPECT_EQ(l.vocab_rows.begin, next_v);
    next_q = l.q_heads.end;
    next_i = l.intermediate.end;
    next_v = l.vocab_rows.end;
    EXPECT_EQ(l.local_q_heads(), s.n_heads / tp);
    EXPECT_GE(l.local_kv_heads(), 1);
    EXPECT_EQ(l.kv_replicated, tp > s.n_kv_heads);
    for (int64_t q = l.q_heads.begin; q < l.q_heads.end; ++q) {
      EXPECT_TRUE(l.kv_heads.contains(q / group)) << "rank " << r << " q head " << q;
      EXPECT_EQ(l.local_kv_head_of_q(q, s.n_heads, s.n_kv_heads), q / group - l.kv_heads.begin);
    }
    for (int64_t k = l.kv_heads.begin; k < l.kv_heads.end; ++k) kv_seen.insert(k);
    EXPECT_EQ(l.vocab_padded % tp, 0);
    EXPECT_GE(l.vocab_padded, s.vocab);
    EXPECT_LT(l.vocab_padded - s.vocab, tp);
  }
  EXPECT_EQ(next_q, s.n_heads);
  EXPECT_EQ(next_i, s.intermediate);
  EXPECT_EQ(int64_t(kv_seen.size()), s.n_kv_heads);
}

TEST(TpLayout, InvariantsHoldForEveryValidDegree) {
  for (const TpShape& s : {kSmolLM2, kSmolLM2Ffn1152, kGqa8x4, TpShape{2, 32, 8, 128, 4096, 14336, 128256}})
    for (int tp : valid_tp_degrees(s)) check_layout_invariants(s, tp);
}

TEST(TpLayout, SmolLM2AtTp3SplitsKvHeads) {
  const TpLayout l = make_tp_layout(kSmolLM2, 3, 1, "SmolLM2");
  EXPECT_EQ(l.q_heads, (Range{3, 6}));
  EXPECT_EQ(l.kv_heads, (Range{1, 2}));
  EXPECT_FALSE(l.kv_replicated);
  EXPECT_EQ(l.intermediate, (Range{512, 1024}));
  EXPECT_EQ(l.vocab_padded, 49152);  // 49152 = 3 * 16384: no padding
  EXPECT_EQ(l.vocab_rows, (Range{16384, 32768}));
  EXPECT_EQ(l.local_real_vocab_rows(), 16384);
}

TEST(TpLayout, Tp9ReplicatesKvHeads) {
  for (int r = 0; r < 9; ++r) {
    const TpLayout l = make_tp_layout(kSmolLM2Ffn1152, 9, r, "m");
    EXPECT_EQ(l.q_heads, (Range{r, r + 1}));
    EXPECT_EQ(l.kv_heads, (Range{r / 3, r / 3 + 1}));  // group of 3 Q heads per KV head
    EXPECT_TRUE(l.kv_replicated);
    EXPECT_EQ(l.intermediate, (Range{r * 128, (r + 1) * 128}));
  }
}

TEST(TpLayout, EightHeadsFourKvHeads) {
  struct Row {
    int tp, rank;
    Range q, kv;
    bool replicated;
  };
  const Row rows[] = {
      {1, 0, {0, 8}, {0, 4}, false}, {2, 0, {0, 4}, {0, 2}, false}, {2, 1, {4, 8}, {2, 4}, false},
      {4, 0, {0, 2}, {0, 1}, false}, {4, 3, {6, 8}, {3, 4}, false}, {8, 0, {0, 1}, {0, 1}, true},
      {8, 1, {1, 2}, {0, 1}, true},  {8, 5, {5, 6}, {2, 3}, true},  {8, 7, {7, 8}, {3, 4}, true},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE("tp=" + std::to_string(row.tp) + " rank=" + std::to_string(row.rank));
    const TpLayout l = make_tp_layout(kGqa8x4, row.tp, row.rank, "m");
    EXPECT_EQ(l.q_heads, row.q);
    EXPECT_EQ(l.kv_heads, row.kv);
    EXPECT_EQ(l.kv_replicated, row.replicated);
  }
}

TEST(TpLayout, VocabPaddedToMultipleOfTp) {
  const TpShape s{1, 3, 3, 8, 24, 48, 1000};  // 1000 = 3 * 333 + 1
  const int64_t expected_real[] = {334, 334, 332};
  for (int r = 0; r < 3; ++r) {
    const TpLayout l = make_tp_layout(s, 3, r, "m");
    EXPECT_EQ(l.vocab_padded, 1002);
    EXPECT_EQ(l.vocab_rows, (Range{r * 334, (r + 1) * 334}));
    EXPECT_EQ(l.local_real_vocab_rows(), expected_real[r]);  // rank 2 holds rows 1000, 1001 as padding
  }
  const TpLayout l1 = make_tp_layout(s, 1, 0, "m");
  EXPECT_EQ(l1.vocab_padded, 1000);
  EXPECT_EQ(l1.local_real_vocab_rows(), 1000);
}

TEST(TpLayout, KvBytesPerToken) {
  // SmolLM2 bf16 at tp 1: 2 * 30 * 3 * 64 * 2 = 23040 bytes; at tp 3: one KV head per rank.
  EXPECT_EQ(kv_bytes_per_token(30, 3, 64, 2), 23040);
  EXPECT_EQ(kv_bytes_per_token(kSmolLM2, make_tp_layout(kSmolLM2, 3, 0, "m"), 2), 7680);
  // Replicated at tp 9: still one KV head per rank, not 1/3.
  EXPECT_EQ(kv_bytes_per_token(kSmolLM2Ffn1152, make_tp_layout(kSmolLM2Ffn1152, 9, 4, "m"), 4), 2 * 30 * 64 * 4);
  EXPECT_EQ(kv_bytes_per_token(kGqa8x4, make_tp_layout(kGqa8x4, 2, 1, "m"), 2), 2 * 4 * 2 * 32 * 2);
}

}  // namespace
}  // namespace tp
