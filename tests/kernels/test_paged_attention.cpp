// write_kv + paged_attention (tiled) and paged_attention_naive for every KV dtype against naive causal attention over contiguous K/V (double
// precision), through a shuffled, non-contiguous block table over garbage-filled blocks, on both the AVX2 and
// the portable path. Each case checks two things:
//   stored:   the reference run on the values the pool stores (decoded by tests/kernels/kv_fixtures.h) — the
//             kernel reads the stored dtype exactly: |out - ref| <= kStoredTol (F32 accumulation only; the AMX
//             tile kernel, with q and the softmax weights in two BF16 parts, kAmxStoredTol);
//   original: the reference run on the F32 inputs — the error the dtype costs, bounded per dtype below.
// Inputs: q in [-1, 1]; each K/V token row is uniform [-1, 1] times a per-token factor in [0.25, 2] (so int8
// block scales get raised and rows requantized). The bounds hold over all the shapes below; the largest error
// measured (AMD EPYC Zen 2, both paths) is in the comment of each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"
#include "tests/kernels/fixtures.h"
#include "tests/kernels/kv_fixtures.h"

namespace tp::cpu {
namespace {

using test::random_floats;
using test::stored_value;
using test::TestPool;

constexpr double kStoredTol = 2e-6;  // measured 3.7e-7
// The AMX tile kernel (bf16 pools on CPUs with AMX) carries q and the softmax weights as two BF16 parts each
// (relative 2^-18 dropped; tests/kernels/test_paged_attention_tiled.cpp): measured 4.3e-6 (h8kv1, start 0).
constexpr double kAmxStoredTol = 1e-5;

// A KV dtype as the pool holds it: block-scaled int8, or a tensor scale for fp8 / int8.
struct KvVariant {
  KvDType dtype;
  bool tensor_scales;
  float tensor_scale;
  double original_tol;  // max |out - reference on the F32 inputs|
};

// Bounds about 2x the maxima measured over the shapes below (in the comments), for outputs of magnitude <= 2:
// bf16 keeps 8 mantissa bits (relative 2^-9 per element), e4m3 3 (2^-4), int8 0.5 / 127 of the block's or the
// tensor's range (+ requantization, kv_write.h).
const KvVariant kVariants[] = {
    {KvDType::F32, false, 1.0f, 2e-6},                   // 3.5e-7
    {KvDType::BF16, false, 1.0f, 7e-3},                  // 3.5e-3
    {KvDType::FP8_E4M3, false, 1.0f, 0.1},               // 5.9e-2
    {KvDType::FP8_E4M3, true, 1.0f / 64, 0.1},           // 5.9e-2 (x / s in [-128, 128])
    {KvDType::INT8, false, 1.0f, 3e-2},                  // 1.5e-2 (block scales)
    {KvDType::INT8, true, 2.0f / 127, 2e-2},             // 9.5e-3 (the inputs' range [-2, 2])
};

std::string variant_name(const KvVariant& v) { return test::dtype_label(v.dtype, v.tensor_scales); }

// Contiguous context [n_ctx, n_kv_heads, head_dim] with per-token magnitudes in [0.25, 2].
std::vector<float> context_rows(int64_t n_ctx, int64_t row, uint32_t seed) {
  std::vector<float> x = random_floats(size_t(n_ctx * row), seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  for (int64_t p = 0; p < n_ctx; ++p) {
    const float m = mag(rng);
    for (int64_t i = 0; i < row; ++i) x[size_t(p * row + i)] *= m;
  }
  return x;
}

// Element i of KV head kvh at position p.
using KvGet = std::function<double(int64_t p, int64_t kvh, int64_t i)>;

// Causal attention of one query row over positions [0, n_pos) of KV head kvh, in double.
std::vector<double> reference(const float* qh, int64_t n_pos, int64_t kvh, int64_t head_dim, float scale,
                              const KvGet& k, const KvGet& v) {
  std::vector<double> s(static_cast<size_t>(n_pos));
  double mx = -INFINITY;
  for (int64_t p = 0; p < n_pos; ++p) {
    double d = 0;
    for (int64_t i = 0; i < head_dim; ++i) d += double(qh[i]) * k(p, kvh, i);
    s[size_t(p)] = d * scale;
    mx = std::max(mx, s[size_t(p)]);
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  std::vector<double> o(static_cast<size_t>(head_dim), 0.0);
  for (int64_t i = 0; i < head_dim; ++i) {
    for (int64_t p = 0; p < n_pos; ++p) o[size_t(i)] += s[size_t(p)] * v(p, kvh, i);
    o[size_t(i)] /= sum;
  }
  return o;
}

// (n_heads, n_kv_heads), head_dim, block_size, start_pos, n_tokens, variant, impl
using AttnParam = std::tuple<std::pair<int64_t, int64_t>, int64_t, int64_t, int64_t, int64_t, size_t, AttentionImpl>;

class PagedAttentionTest : public ::testing::TestWithParam<AttnParam> {};

TEST_P(PagedAttentionTest, MatchesContiguousReference) {
  const auto [heads, head_dim, block_size, start_pos, n_tokens, vi, impl] = GetParam();
  const auto [n_heads, n_kv_heads] = heads;
  const KvVariant& var = kVariants[vi];
  if (impl == AttentionImpl::Avx2 && !attention_has_avx2()) GTEST_SKIP() << "no avx2/fma/f16c on this CPU";
  if (impl == AttentionImpl::Avx512 && !attention_has_avx512()) GTEST_SKIP() << "no avx512f/bw/vl/dq on this CPU";
  const int64_t n_ctx = start_pos + n_tokens;
  const int64_t n_seq_blocks = (n_ctx + block_size - 1) / block_size;
  const int64_t n_pool_blocks = 2 * n_seq_blocks + 3;
  const int64_t row = n_kv_heads * head_dim;

  const auto k = context_rows(n_ctx, row, 21);
  const auto v = context_rows(n_ctx, row, 22);
  const auto q = random_floats(size_t(n_tokens * n_heads * head_dim), 23);

  // Shuffled block table over a pool with unused blocks; unused memory (and old scales) hold garbage.
  std::vector<int32_t> all(static_cast<size_t>(n_pool_blocks));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(uint32_t(n_ctx)));
  const std::vector<int32_t> table(all.begin(), all.begin() + n_seq_blocks);
  const KvBlockLayout layout{var.dtype, block_size, n_kv_heads, head_dim, var.tensor_scales};
  TestPool k_pool(layout, n_pool_blocks, var.tensor_scale, 0x5A), v_pool(layout, n_pool_blocks, var.tensor_scale, 0xA5);

  // Write the context in two calls (history, then the new tokens), with -1 padding slots interleaved.
  std::vector<int64_t> slot_of(static_cast<size_t>(n_ctx));
  auto write = [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> slots;
    std::vector<float> kk, vv;
    for (int64_t p = p0; p < p1; ++p) {
      if (p % 5 == 0) {  // a padding token before every fifth real one
        slots.push_back(-1);
        kk.insert(kk.end(), size_t(row), 7.0f);
        vv.insert(vv.end(), size_t(row), 7.0f);
      }
      slot_of[size_t(p)] = int64_t(table[size_t(p / block_size)]) * block_size + p % block_size;
      slots.push_back(slot_of[size_t(p)]);
      kk.insert(kk.end(), k.begin() + p * row, k.begin() + (p + 1) * row);
      vv.insert(vv.end(), v.begin() + p * row, v.begin() + (p + 1) * row);
    }
    write_kv(kk.data(), vv.data(), int64_t(slots.size()), slots.data(), k_pool.view, v_pool.view);
  };
  write(0, start_pos);
  write(start_pos, n_ctx);

  const float scale = 1.0f / std::sqrt(float(head_dim));
  // The tiled kernel (the model's) and the naive one (its reference) meet the same bounds.
  std::vector<float> tiled(q.size(), NAN), naive(q.size(), NAN);
  paged_attention(q.data(), n_tokens, start_pos, n_heads, k_pool.view, v_pool.view, table.data(), scale,
                  tiled.data(), impl);
  paged_attention_naive(q.data(), n_tokens, start_pos, n_heads, k_pool.view, v_pool.view, table.data(), scale,
                        naive.data(), impl);

  auto orig_k = [&](int64_t p, int64_t h, int64_t i) { return double(k[size_t(p * row + h * head_dim + i)]); };
  auto orig_v = [&](int64_t p, int64_t h, int64_t i) { return double(v[size_t(p * row + h * head_dim + i)]); };
  auto st_k = [&](int64_t p, int64_t h, int64_t i) { return double(stored_value(k_pool.view, slot_of[size_t(p)], h, i)); };
  auto st_v = [&](int64_t p, int64_t h, int64_t i) { return double(stored_value(v_pool.view, slot_of[size_t(p)], h, i)); };
  const int64_t group = n_heads / n_kv_heads;
  for (const std::vector<float>* outp : {&tiled, &naive}) {
    const std::vector<float>& out = *outp;
    const std::string kernel = outp == &tiled ? "tiled" : "naive";
    double err_stored = 0, err_original = 0;
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* qh = q.data() + (t * n_heads + h) * head_dim;
        const float* o = out.data() + (t * n_heads + h) * head_dim;
        const int64_t n_pos = start_pos + t + 1;
        const auto rs = reference(qh, n_pos, h / group, head_dim, scale, st_k, st_v);
        const auto ro = reference(qh, n_pos, h / group, head_dim, scale, orig_k, orig_v);
        for (int64_t i = 0; i < head_dim; ++i) {
          ASSERT_TRUE(std::isfinite(o[i])) << kernel << " token " << t << " head " << h << " dim " << i;
          err_stored = std::max(err_stored, std::fabs(o[i] - rs[size_t(i)]));
          err_original = std::max(err_original, std::fabs(o[i] - ro[size_t(i)]));
        }
      }
    const bool amx = outp == &tiled && attention_uses_amx(var.dtype, head_dim, impl, {});
    EXPECT_LE(err_stored, amx ? kAmxStoredTol : kStoredTol) << kernel << " " << variant_name(var);
    EXPECT_LE(err_original, var.original_tol) << kernel << " " << variant_name(var);
    RecordProperty("err_stored_" + kernel, std::to_string(err_stored));
    RecordProperty("err_original_" + kernel, std::to_string(err_original));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Combine(::testing::Values(std::pair<int64_t, int64_t>{4, 4}, std::pair<int64_t, int64_t>{9, 3},
                                         std::pair<int64_t, int64_t>{8, 1}),
                       ::testing::Values(64, 17), ::testing::Values(16, 3), ::testing::Values(0, 37),
                       ::testing::Values(1, 50), ::testing::Range(size_t(0), std::size(kVariants)),
                       ::testing::Values(AttentionImpl::Avx512, AttentionImpl::Avx2, AttentionImpl::Portable)),
    [](const ::testing::TestParamInfo<AttnParam>& info) {
      const auto& p = info.param;
      return variant_name(kVariants[std::get<5>(p)]) + "_" +
             attention_impl_name(std::get<6>(p)) + "_h" +
             std::to_string(std::get<0>(p).first) + "kv" + std::to_string(std::get<0>(p).second) + "_d" +
             std::to_string(std::get<1>(p)) + "_bs" + std::to_string(std::get<2>(p)) + "_start" +
             std::to_string(std::get<3>(p)) + "_n" + std::to_string(std::get<4>(p));
    });

// The AVX-512, AVX2 and portable paths agree on every dtype (the same stored bytes; only the summation order
// differs), for a decode-sized and a prefill-sized (AVX-512 lane kernel) query; Auto takes the widest path the
// CPU has.
TEST(PagedAttention, SimdPathsAndPortableAgree) {
  if (!attention_has_avx2()) GTEST_SKIP() << "no avx2/fma/f16c on this CPU";
  const int64_t n = 40, n_heads = 9, n_kv = 3, d = 64, bs = 16, n_blocks = (n + bs - 1) / bs;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.rbegin(), table.rend(), 0);
  const auto k = context_rows(n, n_kv * d, 51), v = context_rows(n, n_kv * d, 52);
  const auto q = random_floats(size_t(n * n_heads * d), 53);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) slots[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
  const AttentionImpl best = attention_has_avx512() ? AttentionImpl::Avx512 : AttentionImpl::Avx2;
  for (const KvVariant& var : kVariants) {
    const KvBlockLayout layout{var.dtype, bs, n_kv, d, var.tensor_scales};
    TestPool kp(layout, n_blocks, var.tensor_scale), vp(layout, n_blocks, var.tensor_scale);
    write_kv(k.data(), v.data(), n, slots.data(), kp.view, vp.view);
    for (const int64_t n_q : {int64_t(1), n}) {
      const int64_t start = n - n_q;
      const size_t len = size_t(n_q * n_heads * d);
      std::vector<float> port(len), automatic(len);
      paged_attention(q.data(), n_q, start, n_heads, kp.view, vp.view, table.data(), 0.125f, port.data(),
                      AttentionImpl::Portable);
      paged_attention(q.data(), n_q, start, n_heads, kp.view, vp.view, table.data(), 0.125f, automatic.data());
      for (AttentionImpl impl : {AttentionImpl::Avx512, AttentionImpl::Avx2}) {
        if (impl == AttentionImpl::Avx512 && !attention_has_avx512()) continue;
        std::vector<float> a(len);
        paged_attention(q.data(), n_q, start, n_heads, kp.view, vp.view, table.data(), 0.125f, a.data(), impl);
        for (size_t i = 0; i < len; ++i)
          ASSERT_NEAR(a[i], port[i], 2e-5) << variant_name(var) << " " << attention_impl_name(impl) << " " << i;
        if (impl == best) {
          EXPECT_EQ(a, automatic) << variant_name(var) << ": Auto takes " << attention_impl_name(best);
        }
      }
    }
  }
}

// Asking for rows the CPU lacks is an InputError naming them, not a crash.
TEST(PagedAttention, MissingSimdPathIsRefused) {
  if (attention_has_avx512()) GTEST_SKIP() << "this CPU has avx512f/bw/vl/dq";
  const KvBlockLayout layout{KvDType::BF16, 16, 1, 64, false};
  TestPool kp(layout, 1, 1.0f), vp(layout, 1, 1.0f);
  const std::vector<float> q(64, 0.5f);
  std::vector<float> out(64);
  const int32_t table[1] = {0};
  EXPECT_THROW(paged_attention(q.data(), 1, 0, 1, kp.view, vp.view, table, 0.125f, out.data(), AttentionImpl::Avx512),
               InputError);
}

// A 512-token prefill (SmolLM2 shape: 9 heads, 3 KV heads, head_dim 64) on two threads matches one thread.
TEST(PagedAttention, PrefillThreadsAgree) {
  const int64_t n = 512, n_heads = 9, n_kv = 3, d = 64, bs = 16, n_blocks = n / bs;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.rbegin(), table.rend(), 0);
  const auto k = random_floats(size_t(n * n_kv * d), 31);
  const auto v = random_floats(size_t(n * n_kv * d), 32);
  const auto q = random_floats(size_t(n * n_heads * d), 33);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) slots[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
  for (KvDType dt : kKvDTypes) {
    const KvBlockLayout layout{dt, bs, n_kv, d, false};
    TestPool kp(layout, n_blocks), vp(layout, n_blocks);
    write_kv(k.data(), v.data(), n, slots.data(), kp.view, vp.view);
    std::vector<float> o1(q.size()), o2(q.size());
    set_num_threads(1);
    paged_attention(q.data(), n, 0, n_heads, kp.view, vp.view, table.data(), 0.125f, o1.data());
    set_num_threads(2);
    paged_attention(q.data(), n, 0, n_heads, kp.view, vp.view, table.data(), 0.125f, o2.data());
    EXPECT_EQ(o1, o2) << kv_dtype_name(dt);
  }
  set_num_threads(1);
}

TEST(PagedAttention, RejectsBadGroupingAndMismatchedPools) {
  std::vector<float> buf(64);
  const int32_t table = 0;
  TestPool a({KvDType::F32, 16, 3, 8, false}, 1), b({KvDType::BF16, 16, 3, 8, false}, 1);
  EXPECT_THROW(paged_attention(buf.data(), 1, 0, 4, a.view, a.view, &table, 1.0f, buf.data()), InputError);
  EXPECT_THROW(paged_attention(buf.data(), 1, 0, 3, a.view, b.view, &table, 1.0f, buf.data()), InputError);
  EXPECT_THROW(write_kv(buf.data(), buf.data(), 0, nullptr, a.view, b.view), InputError);
}

}  // namespace
}  // namespace tp::cpu
