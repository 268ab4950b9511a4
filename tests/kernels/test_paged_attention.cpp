// write_kv and paged_attention against naive causal attention over contiguous K/V (double precision).
// The pool is addressed through a shuffled, non-contiguous block table.
// Tolerance: 2e-5 absolute with q, k, v in [-1, 1] (F32 dot products of ≤ 128 terms, F32 softmax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"
#include "tests/kernels/fixtures.h"

namespace tp::cpu {
namespace {

using test::random_floats;

// n_heads, n_kv_heads, head_dim, block_size, start_pos, n_tokens
using AttnParam = std::tuple<std::pair<int64_t, int64_t>, int64_t, int64_t, int64_t, int64_t>;

class PagedAttentionTest : public ::testing::TestWithParam<AttnParam> {};

TEST_P(PagedAttentionTest, MatchesContiguousReference) {
  const auto [heads, head_dim, block_size, start_pos, n_tokens] = GetParam();
  const auto [n_heads, n_kv_heads] = heads;
  const int64_t n_ctx = start_pos + n_tokens;
  const int64_t n_seq_blocks = (n_ctx + block_size - 1) / block_size;
  const int64_t n_pool_blocks = 2 * n_seq_blocks + 3;
  const int64_t row = n_kv_heads * head_dim;

  // Contiguous K/V of the whole context [n_ctx, n_kv_heads, head_dim], queries of the new tokens.
  const auto k = random_floats(size_t(n_ctx * row), 21);
  const auto v = random_floats(size_t(n_ctx * row), 22);
  const auto q = random_floats(size_t(n_tokens * n_heads * head_dim), 23);

  // Shuffled block table over a pool with unused blocks; unused memory holds garbage.
  std::vector<int32_t> all(static_cast<size_t>(n_pool_blocks));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(uint32_t(n_ctx)));
  const std::vector<int32_t> table(all.begin(), all.begin() + n_seq_blocks);
  std::vector<float> k_pool(size_t(n_pool_blocks * block_size * row), 1e6f);
  std::vector<float> v_pool(k_pool.size(), -1e6f);

  // Write the context in two calls (history, then the new tokens), with -1 padding slots interleaved.
  auto write = [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> slots;
    std::vector<float> kk, vv;
    for (int64_t p = p0; p < p1; ++p) {
      if (p % 5 == 0) {  // a padding token before every fifth real one
        slots.push_back(-1);
        kk.insert(kk.end(), size_t(row), 7.0f);
        vv.insert(vv.end(), size_t(row), 7.0f);
      }
      slots.push_back(int64_t(table[size_t(p / block_size)]) * block_size + p % block_size);
      kk.insert(kk.end(), k.begin() + p * row, k.begin() + (p + 1) * row);
      vv.insert(vv.end(), v.begin() + p * row, v.begin() + (p + 1) * row);
    }
    write_kv(kk.data(), vv.data(), int64_t(slots.size()), n_kv_heads, head_dim, slots.data(), k_pool.data(),
             v_pool.data());
  };
  write(0, start_pos);
  write(start_pos, n_ctx);

  const float scale = 1.0f / std::sqrt(float(head_dim));
  std::vector<float> out(q.size(), NAN);
  paged_attention(q.data(), n_tokens, start_pos, n_heads, n_kv_heads, head_dim, k_pool.data(), v_pool.data(),
                  table.data(), block_size, scale, out.data());

  const int64_t group = n_heads / n_kv_heads;
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kvh = h / group, n_pos = start_pos + t + 1;
      const float* qh = q.data() + (t * n_heads + h) * head_dim;
      std::vector<double> s(static_cast<size_t>(n_pos));
      double mx = -INFINITY;
      for (int64_t p = 0; p < n_pos; ++p) {
        double d = 0;
        for (int64_t i = 0; i < head_dim; ++i) d += double(qh[i]) * k[size_t(p * row + kvh * head_dim + i)];
        s[size_t(p)] = d * scale;
        mx = std::max(mx, s[size_t(p)]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < head_dim; ++i) {
        double o = 0;
        for (int64_t p = 0; p < n_pos; ++p) o += s[size_t(p)] * v[size_t(p * row + kvh * head_dim + i)];
        ASSERT_NEAR(out[size_t((t * n_heads + h) * head_dim + i)], o / sum, 2e-5)
            << "token " << t << " head " << h << " dim " << i;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Combine(::testing::Values(std::pair<int64_t, int64_t>{4, 4}, std::pair<int64_t, int64_t>{9, 3},
                                         std::pair<int64_t, int64_t>{8, 2}),
                       ::testing::Values(64, 17), ::testing::Values(16, 3), ::testing::Values(0, 37),
                       ::testing::Values(1, 50)),
    [](const ::testing::TestParamInfo<AttnParam>& info) {
      const auto& p = info.param;
      return "h" + std::to_string(std::get<0>(p).first) + "kv" + std::to_string(std::get<0>(p).second) + "_d" +
             std::to_string(std::get<1>(p)) + "_bs" + std::to_string(std::get<2>(p)) + "_start" +
             std::to_string(std::get<3>(p)) + "_n" + std::to_string(std::get<4>(p));
    });

// A 512-token prefill (SmolLM2 shape: 9 heads, 3 KV heads, head_dim 64) on two threads matches one thread.
TEST(PagedAttention, PrefillThreadsAgree) {
  const int64_t n = 512, n_heads = 9, n_kv = 3, d = 64, bs = 16, n_blocks = n / bs;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  const auto k_pool = random_floats(size_t(n * n_kv * d), 31);
  const auto v_pool = random_floats(size_t(n * n_kv * d), 32);
  const auto q = random_floats(size_t(n * n_heads * d), 33);
  std::vector<float> o1(q.size()), o2(q.size());
  set_num_threads(1);
  paged_attention(q.data(), n, 0, n_heads, n_kv, d, k_pool.data(), v_pool.data(), table.data(), bs, 0.125f,
                  o1.data());
  set_num_threads(2);
  paged_attention(q.data(), n, 0, n_heads, n_kv, d, k_pool.data(), v_pool.data(), table.data(), bs, 0.125f,
                  o2.data());
  EXPECT_EQ(o1, o2);
}

TEST(PagedAttention, RejectsBadGrouping) {
  std::vector<float> buf(64);
  const int32_t table = 0;
  EXPECT_THROW(paged_attention(buf.data(), 1, 0, 4, 3, 8, buf.data(), buf.data(), &table, 16, 1.0f, buf.data()),
               InputError);
}

TEST(WriteKv, SkipsPaddingSlots) {
  const int64_t n_kv = 2, d = 4, row = n_kv * d;
  std::vector<float> k_pool(10 * row, 0.0f), v_pool(10 * row, 0.0f);
  const auto k = random_floats(3 * row, 41);
  const auto v = random_floats(3 * row, 42);
  const std::vector<int64_t> slots = {9, -1, 2};
  write_kv(k.data(), v.data(), 3, n_kv, d, slots.data(), k_pool.data(), v_pool.data());
  for (int64_t s = 0; s < 10; ++s)
    for (int64_t i = 0; i < row; ++i) {
      const float wk = s == 9 ? k[size_t(i)] : s == 2 ? k[size_t(2 * row + i)] : 0.0f;
      const float wv = s == 9 ? v[size_t(i)] : s == 2 ? v[size_t(2 * row + i)] : 0.0f;
      ASSERT_EQ(k_pool[size_t(s * row + i)], wk) << s << "," << i;
      ASSERT_EQ(v_pool[size_t(s * row + i)], wv) << s << "," << i;
    }
}

}  // namespace
}  // namespace tp::cpu
