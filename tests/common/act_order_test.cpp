// sort_columns_by_group (common/act_order.h): act-order weights held with their columns sorted by group — each
// held column the given code of the column col_order names, the groups contiguous, the values (dequantize_rows)
// those of the weight as given; the weights it leaves as they are; check_packed_weight's refusals of col_order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "common/act_order.h"
#include "common/error.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

// An Int8 / Int4 weight [n_out, n_in] of random codes, scales (and zero points), g_idx a shuffled assignment of
// whole groups of `group` columns (the last group the rest), as GPTQ's actorder "group" writes them.
PackedWeight act_order_weight(WeightFormat f, int64_t n_out, int64_t n_in, int64_t group, bool zeros, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = f;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = group;
  w.data = AlignedBytes(n_out * w.row_bytes());
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  if (f == WeightFormat::Int4 && n_in % 2)  // the unused high nibble of each row's last byte is 0
    for (int64_t r = 0; r < n_out; ++r) w.data.data()[r * w.row_bytes() + w.row_bytes() - 1] &= 0x0f;
  for (int64_t c = 0; c < n_in; ++c) w.g_idx.push_back(int32_t(c / group));
  std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  w.scales.resize(size_t(n_out * w.n_groups()));
  for (float& s : w.scales) s = scale(rng);
  if (zeros) {
    w.zeros.resize(w.scales.size());
    for (int8_t& z : w.zeros) z = int8_t(int(rng() % 15) - 7);
  }
  check_packed_weight(w);
  return w;
}

int32_t code(const PackedWeight& w, int64_t r, int64_t c) {
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  if (w.format == WeightFormat::Int8) return int8_t(row[c]);
  return (c % 2 ? row[c / 2] >> 4 : row[c / 2]) & 15;
}

std::vector<float> values(const PackedWeight& w) {
  std::vector<float> v(size_t(w.n_out * w.n_in));
  dequantize_rows(w, 0, w.n_out, v.data());
  return v;
}

TEST(ActOrder, SortsWholeGroupsKeepingTheValues) {
  struct C {
    WeightFormat f;
    int64_t n_out, n_in, group;
    bool zeros;
  };
  for (const C& c : {C{WeightFormat::Int4, 5, 256, 64, false}, C{WeightFormat::Int4, 3, 203, 32, true},
                     C{WeightFormat::Int8, 4, 576, 128, true}, C{WeightFormat::Int8, 2, 100, 100, false}}) {
    const PackedWeight given = act_order_weight(c.f, c.n_out, c.n_in, c.group, c.zeros, 11);
    PackedWeight w = copy_packed_weight(given);
    ASSERT_TRUE(sort_columns_by_group(&w)) << c.n_in;
    check_packed_weight(w);
    EXPECT_TRUE(w.g_idx.empty());
    EXPECT_EQ(w.g_idx_groups, 0);
    EXPECT_EQ(w.n_groups(), given.n_groups());
    EXPECT_EQ(w.scales, given.scales);
    EXPECT_EQ(w.zeros, given.zeros);
    const bool one_group = c.group == c.n_in;  // nothing moves: held in order, no col_order
    ASSERT_EQ(int64_t(w.col_order.size()), one_group ? 0 : c.n_in);
    EXPECT_EQ(w.n_bytes(), given.n_bytes() - (one_group ? c.n_in * 4 : 0));  // col_order where g_idx was
    for (int64_t j = 0; j < int64_t(w.col_order.size()); ++j) {
      const int32_t col = w.col_order[size_t(j)];
      EXPECT_EQ(given.g_idx[size_t(col)], j / c.group) << "held column " << j;  // the groups contiguous
      if (j > 0 && given.g_idx[size_t(col)] == given.g_idx[size_t(w.col_order[size_t(j - 1)])]) {
        EXPECT_LT(w.col_order[size_t(j - 1)], col);  // in column order within a group (a stable sort)
      }
      for (int64_t r = 0; r < c.n_out; ++r) ASSERT_EQ(code(w, r, j), code(given, r, col)) << r << " " << j;
    }
    const std::vector<float> a = values(given), b = values(w);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << c.n_in;
    if (c.f == WeightFormat::Int4 && c.n_in % 2) {  // the last byte's unused nibble stays 0
      for (int64_t r = 0; r < c.n_out; ++r) EXPECT_EQ(w.data.data()[r * w.row_bytes() + w.row_bytes() - 1] >> 4, 0);
    }
  }
}

TEST(ActOrder, LeavesWhatItCannotSort) {
  const PackedWeight base = act_order_weight(WeightFormat::Int4, 3, 128, 32, false, 5);
  auto unchanged = [](PackedWeight w, const char* why) {
    const PackedWeight before = copy_packed_weight(w);
    EXPECT_FALSE(sort_columns_by_group(&w)) << why;
    EXPECT_EQ(w.g_idx, before.g_idx) << why;
    EXPECT_TRUE(w.col_order.empty()) << why;
    EXPECT_EQ(0, std::memcmp(w.data.data(), before.data.data(), size_t(w.data.size()))) << why;
  };
  PackedWeight slice = copy_packed_weight(base);  // a row-parallel slice: 5 groups kept, one of them unused
  slice.g_idx_groups = 5;
  slice.scales.resize(size_t(3 * 5), 0.5f);
  for (int32_t& g : slice.g_idx) g = g >= 1 ? g + 1 : g;
  check_packed_weight(slice);
  unchanged(copy_packed_weight(slice), "a group not held");
  PackedWeight uneven = copy_packed_weight(base);  // two columns moved from group 3 to group 0
  for (int n = 0; int32_t& g : uneven.g_idx)
    if (g == 3 && n < 2) g = 0, ++n;
  unchanged(std::move(uneven), "groups of 34 and 30 columns");
  PackedWeight act_group = copy_packed_weight(base);
  act_group.act = ActQuant::Int8Dynamic;
  act_group.act_group = 64;
  unchanged(std::move(act_group), "activation scales a 64 columns");
  PackedWeight no_gidx = copy_packed_weight(base);
  no_gidx.g_idx.clear();
  EXPECT_FALSE(sort_columns_by_group(&no_gidx));
  EXPECT_TRUE(no_gidx.col_order.empty());
  PackedWeight per_token = copy_packed_weight(base);  // a per-token activation scale does not see the order
  per_token.act = ActQuant::Int8Dynamic;
  EXPECT_TRUE(sort_columns_by_group(&per_token));
}

TEST(ActOrder, CheckRefusesABadColumnOrder) {
  PackedWeight w = act_order_weight(WeightFormat::Int8, 2, 64, 32, false, 3);
  ASSERT_TRUE(sort_columns_by_group(&w));
  check_packed_weight(w);
  auto refused = [](const PackedWeight& v, const char* needle) {
    try {
      check_packed_weight(v);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PackedWeight dup = copy_packed_weight(w);
  dup.col_order[5] = dup.col_order[6];
  refused(dup, "not a permutation");
  PackedWeight out_of_range = copy_packed_weight(w);
  out_of_range.col_order[0] = 64;
  refused(out_of_range, "not a permutation");
  PackedWeight short_order = copy_packed_weight(w);
  short_order.col_order.pop_back();
  refused(short_order, "63 col_order entries");
  PackedWeight both = copy_packed_weight(w);
  both.g_idx.assign(64, 0);
  refused(both, "col_order with g_idx");
  PackedWeight grouped_act = copy_packed_weight(w);
  grouped_act.act = ActQuant::Int8Dynamic;
  grouped_act.act_group = 32;
  refused(grouped_act, "col_order with act_group");
  PackedWeight fp8;
  fp8.format = WeightFormat::Fp8E4M3;
  fp8.n_out = 1;
  fp8.n_in = 2;
  fp8.data = AlignedBytes(2);
  fp8.scales = {1.0f};
  fp8.col_order = {1, 0};
  refused(fp8, "col_order on a format without groups");
}

}  // namespace
}  // namespace tp
