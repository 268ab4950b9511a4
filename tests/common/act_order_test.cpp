// hold_sorted_by_group (common/act_order.h): act-order weights held with their columns sorted by group — whole
// groups: each held column the given code of the column the gather names, the groups contiguous (a stable sort),
// scales and zero points as given; groups held partly (a row-parallel slice): the groups holding columns, each
// padded to the most columns any holds rounded up to 32 (code 0, gather −1), their scales and zero points only —
// either way every held column's values (dequantize_rows) those of the given column it reads; the weights it
// leaves as they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
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
  if (f == WeightFormat::Int4 && n_in % 2) {  // the unused high nibble of each row's last byte is 0
    for (int64_t r = 0; r < n_out; ++r) w.data.data()[r * w.row_bytes() + w.row_bytes() - 1] &= 0x0f;
  }
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

// Columns [c0, c1) of w with their g_idx, every group's scales kept (a row-parallel slice, as the loaders cut it).
PackedWeight column_slice(const PackedWeight& w, int64_t c0, int64_t c1) {
  PackedWeight s = copy_packed_weight(w);
  s.n_in = c1 - c0;
  s.g_idx.assign(w.g_idx.begin() + c0, w.g_idx.begin() + c1);
  s.g_idx_groups = w.n_groups();
  s.data = AlignedBytes(w.n_out * s.row_bytes());
  for (int64_t r = 0; r < w.n_out; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const uint8_t* row = w.data.data() + r * w.row_bytes();
      uint8_t* d = s.data.data() + r * s.row_bytes();
      if (w.format == WeightFormat::Int8) {
        d[c - c0] = row[c];
      } else {
        const uint8_t q = (c % 2 ? row[c / 2] >> 4 : row[c / 2]) & 15;
        d[(c - c0) / 2] |= uint8_t((c - c0) % 2 ? q << 4 : q);
      }
    }
  check_packed_weight(s);
  return s;
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

// Every held column's values are those of the given column it reads (0 for padding), bit for bit.
void expect_same_values(const PackedWeight& given, const PackedWeight& held, const std::vector<int32_t>& gather) {
  const std::vector<float> a = values(given), b = values(held);
  for (int64_t r = 0; r < given.n_out; ++r)
    for (int64_t j = 0; j < held.n_in; ++j) {
      const int64_t c = gather.empty() ? j : gather[size_t(j)];
      const float want = c < 0 ? b[size_t(r * held.n_in + j)] : a[size_t(r * given.n_in + c)];
      ASSERT_EQ(0, std::memcmp(&want, &b[size_t(r * held.n_in + j)], sizeof(float))) << "row " << r << " held " << j;
    }
}

TEST(ActOrder, WholeGroupsAreSortedKeepingTheValues) {
  struct C {
    WeightFormat f;
    int64_t n_out, n_in, group;
    bool zeros;
  };
  for (const C& c : {C{WeightFormat::Int4, 5, 256, 64, false}, C{WeightFormat::Int4, 3, 203, 32, true},
                     C{WeightFormat::Int8, 4, 576, 128, true}, C{WeightFormat::Int8, 2, 100, 100, false}}) {
    const PackedWeight given = act_order_weight(c.f, c.n_out, c.n_in, c.group, c.zeros, 11);
    PackedWeight w = copy_packed_weight(given);
    std::vector<int32_t> gather{99};
    ASSERT_TRUE(hold_sorted_by_group(&w, &gather)) << c.n_in;
    check_packed_weight(w);
    EXPECT_TRUE(w.g_idx.empty());
    EXPECT_EQ(w.g_idx_groups, 0);
    EXPECT_EQ(w.n_in, c.n_in);
    EXPECT_EQ(w.group_size, c.group);
    EXPECT_EQ(w.scales, given.scales);
    EXPECT_EQ(w.zeros, given.zeros);
    const bool one_group = c.group == c.n_in;  // nothing moves: held in order, no gather
    ASSERT_EQ(int64_t(gather.size()), one_group ? 0 : c.n_in);
    std::vector<int32_t> sorted_gather = gather;
    std::sort(sorted_gather.begin(), sorted_gather.end());
    for (int64_t j = 0; j < int64_t(gather.size()); ++j) {
      ASSERT_EQ(sorted_gather[size_t(j)], j);  // a permutation
      const int32_t col = gather[size_t(j)];
      EXPECT_EQ(given.g_idx[size_t(col)], j / c.group) << "held column " << j;  // the groups contiguous
      if (j > 0 && given.g_idx[size_t(col)] == given.g_idx[size_t(gather[size_t(j - 1)])]) {
        EXPECT_LT(gather[size_t(j - 1)], col);  // in column order within a group (a stable sort)
      }
      for (int64_t r = 0; r < c.n_out; ++r) ASSERT_EQ(code(w, r, j), code(given, r, col)) << r << " " << j;
    }
    expect_same_values(given, w, gather);
    if (c.f == WeightFormat::Int4 && c.n_in % 2) {  // the last byte's unused nibble stays 0
      for (int64_t r = 0; r < c.n_out; ++r) EXPECT_EQ(w.data.data()[r * w.row_bytes() + w.row_bytes() - 1] >> 4, 0);
    }
  }
}

TEST(ActOrder, GroupsHeldPartlyArePaddedIn32s) {
  struct C {
    WeightFormat f;
    int64_t n_in, group, c0, c1;
    bool zeros;
    int64_t granule = 32;
  };
  // the second half of a 1152-column weight in groups of 128 (a tp 2 slice); a third of 1536 in 128s (tp 3's
  // down_proj); a half of 512 in 128s — each within 2x the columns
  for (const C& c : {C{WeightFormat::Int4, 1152, 128, 576, 1152, false}, C{WeightFormat::Int8, 1536, 128, 512, 1024, true},
                     C{WeightFormat::Int4, 512, 128, 0, 256, true}, C{WeightFormat::Int4, 1152, 128, 576, 1152, true, 16},
                     C{WeightFormat::Int4, 576, 64, 192, 384, false, 16}}) {
    const int64_t n_out = 7;
    const PackedWeight whole = act_order_weight(c.f, n_out, c.n_in, c.group, c.zeros, 17);
    const PackedWeight given = column_slice(whole, c.c0, c.c1);
    PackedWeight w = copy_packed_weight(given);
    std::vector<int32_t> gather;
    ASSERT_TRUE(hold_sorted_by_group(&w, &gather, c.granule));
    check_packed_weight(w);
    EXPECT_TRUE(w.g_idx.empty());
    const int64_t p = w.group_size, n_held_groups = w.n_groups();
    EXPECT_EQ(p % c.granule, 0);
    EXPECT_EQ(w.n_in % 32, 0);
    EXPECT_EQ(w.n_in, p * n_held_groups);
    EXPECT_LE(w.n_in, 2 * given.n_in);
    ASSERT_EQ(int64_t(gather.size()), w.n_in);
    std::printf("[act-order] columns [%lld, %lld) of %lld in groups of %lld, granule %lld: %lld held groups of %lld, "
                "%lld columns held, %lld -> %lld bytes\n", (long long)c.c0, (long long)c.c1, (long long)c.n_in,
                (long long)c.group, (long long)c.granule, (long long)n_held_groups, (long long)p, (long long)w.n_in,
                (long long)given.n_bytes(), (long long)w.n_bytes());
    std::vector<int> seen(size_t(given.n_in), 0);
    int32_t last_group = -1;
    for (int64_t k = 0; k < n_held_groups; ++k) {
      if (gather[size_t(k * p)] < 0) {  // padding alone (to 32 columns held), after the rest, scale 0
        for (int64_t j = k * p; j < (k + 1) * p; ++j) EXPECT_LT(gather[size_t(j)], 0);
        for (int64_t r = 0; r < n_out; ++r) EXPECT_EQ(w.scales[size_t(r * n_held_groups + k)], 0.0f);
        last_group = INT32_MAX;
        continue;
      }
      ASSERT_NE(last_group, INT32_MAX) << "a held group after padding alone";
      const int32_t g = given.g_idx[size_t(gather[size_t(k * p)])];  // a held group starts with a column
      EXPECT_GE(g, last_group) << "held group " << k;  // in group order
      last_group = g;
      for (int64_t r = 0; r < n_out; ++r) {  // the given group's scale and zero point
        EXPECT_EQ(w.scales[size_t(r * n_held_groups + k)], given.scales[size_t(r * given.n_groups() + g)]);
        if (c.zeros) {
          EXPECT_EQ(w.zeros[size_t(r * n_held_groups + k)], given.zeros[size_t(r * given.n_groups() + g)]);
        }
      }
      bool padding = false;
      for (int64_t j = k * p; j < (k + 1) * p; ++j) {
        const int32_t col = gather[size_t(j)];
        if (col < 0) {  // padding: after the group's columns, code 0
          padding = true;
          for (int64_t r = 0; r < n_out; ++r) EXPECT_EQ(code(w, r, j), c.f == WeightFormat::Int4 ? 8 : 0);
          continue;
        }
        EXPECT_FALSE(padding) << "a column after padding, held " << j;
        EXPECT_EQ(given.g_idx[size_t(col)], g) << "held " << j;
        if (j > k * p) {
          EXPECT_LT(gather[size_t(j - 1)], col);  // sorted
        }
        ++seen[size_t(col)];
        for (int64_t r = 0; r < n_out; ++r) ASSERT_EQ(code(w, r, j), code(given, r, col));
      }
      if (padding && k + 1 < n_held_groups) {  // only a group's last held group is padded
        EXPECT_NE(given.g_idx[size_t(gather[size_t((k + 1) * p)])], g);
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), given.n_in);  // every column held once
    expect_same_values(given, w, gather);
  }
}

// 16 columns of each of 3 groups in 16s: 48 columns held, then a held group of padding alone to 64 (a multiple of
// 32), its scale 0 and x 0.
TEST(ActOrder, HeldColumnsAreAMultipleOf32) {
  PackedWeight w = act_order_weight(WeightFormat::Int4, 2, 48, 32, true, 3);
  w.g_idx_groups = 3;
  w.scales.resize(size_t(2 * 3), 0.5f);
  w.zeros.resize(size_t(2 * 3), 1);
  for (int64_t c = 0; c < 48; ++c) w.g_idx[size_t(c)] = int32_t((c * 7) % 48 / 16);  // 16 of each, spread
  check_packed_weight(w);
  const PackedWeight given = copy_packed_weight(w);
  std::vector<int32_t> gather;
  ASSERT_TRUE(hold_sorted_by_group(&w, &gather, 16));
  check_packed_weight(w);
  EXPECT_EQ(w.n_in, 64);
  EXPECT_EQ(w.group_size, 16);
  ASSERT_EQ(gather.size(), 64u);
  for (int64_t j = 48; j < 64; ++j) EXPECT_EQ(gather[size_t(j)], -1);
  for (int64_t j = 0; j < 48; ++j) EXPECT_EQ(given.g_idx[size_t(gather[size_t(j)])], j / 16);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.scales[size_t(r * 4 + 3)], 0.0f);
    EXPECT_EQ(w.zeros[size_t(r * 4 + 3)], 0);
  }
  expect_same_values(given, w, gather);
  EXPECT_THROW(hold_sorted_by_group(&w, &gather, 12), Error);
}

TEST(ActOrder, LeavesWhatItCannotSort) {
  const PackedWeight base = act_order_weight(WeightFormat::Int4, 3, 128, 32, false, 5);
  auto unchanged = [](PackedWeight w, const char* why) {
    const PackedWeight before = copy_packed_weight(w);
    std::vector<int32_t> gather;
    EXPECT_FALSE(hold_sorted_by_group(&w, &gather)) << why;
    EXPECT_TRUE(gather.empty()) << why;
    EXPECT_EQ(w.g_idx, before.g_idx) << why;
    EXPECT_EQ(w.n_in, before.n_in) << why;
    EXPECT_EQ(0, std::memcmp(w.data.data(), before.data.data(), size_t(w.data.size()))) << why;
  };
  PackedWeight act_group = copy_packed_weight(base);
  act_group.act = ActQuant::Int8Dynamic;
  act_group.act_group = 64;
  unchanged(std::move(act_group), "activation scales a 64 columns");
  PackedWeight no_gidx = copy_packed_weight(base);
  no_gidx.g_idx.clear();
  unchanged(std::move(no_gidx), "no g_idx");
  PackedWeight lopsided = copy_packed_weight(base);  // 97 columns in group 0, one in each other: 4 x 128 held
  lopsided.group_size = 32;
  lopsided.g_idx_groups = 32;
  lopsided.scales.assign(size_t(3 * 32), 0.5f);
  for (int64_t c = 0; c < 128; ++c) lopsided.g_idx[size_t(c)] = c < 97 ? 0 : int32_t(c - 96);
  check_packed_weight(lopsided);
  unchanged(std::move(lopsided), "padding past twice the columns");
  const PackedWeight wide = act_order_weight(WeightFormat::Int4, 3, 256, 32, false, 9);
  unchanged(column_slice(wide, 0, 48), "48 columns of 8 groups: 8 held groups of 32 at the least");
  PackedWeight per_token = copy_packed_weight(base);  // a per-token activation scale does not see the order
  per_token.act = ActQuant::Int8Dynamic;
  std::vector<int32_t> gather;
  EXPECT_TRUE(hold_sorted_by_group(&per_token, &gather));
}

}  // namespace
}  // namespace tp
