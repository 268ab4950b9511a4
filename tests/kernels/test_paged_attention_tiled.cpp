// The tiled (flash-style) paged_attention against paged_attention_naive, the one-(token, head)-at-a-time
// reference, on the same pool bytes: GQA ratios 1/3/4/8, head_dim 64/128, block sizes 16/32, ragged context
// lengths, chunked prefill starting mid-block (start_pos > 0), 1..N query tokens, every KV dtype (with block
// and tensor scales), 1 and 2 threads, split-K on (the default partitions and one block per split) and off,
// both the AVX2 and the portable rows. The blocks sit shuffled in a pool filled with garbage.
//
// Error bound: max |tiled − naive| <= kTol = 2e-6 (the AMX tile kernel: kAmxTol, below) over outputs of magnitude
// <= 2 (inputs as in test_paged_attention.cpp: q in [-1, 1], K/V rows uniform [-1, 1] × a per-token factor in
// [0.25, 2]).
// Both kernels read the same stored values and accumulate in F32; they differ in summation order, in where the
// scale multiplies (q for tiled, the score for naive) and in the online softmax's rescaling by e^(m_old − m_new).
// Largest difference measured (AMD EPYC Zen 2, every case below, both paths): 6.3e-7 (fp8 / int8 tensor scale,
// head_dim 128, 45-token prefill), 5.1e-7 f32, 4.4e-7 bf16. ChecksCanFail shows that a kernel one position short,
// or one V element off, misses the bound by far (> 100 kTol).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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
using test::TestPool;

constexpr double kTol = 2e-6;
// The AMX tile kernel carries q and the softmax weights P as two BF16 parts each (16 significant bits; the rest of
// the F32 value, relative 2^-18 or less, is dropped), so its scores differ from the F32 ones by up to about
// 2^-18 · scale · Σ|q k|: errors grow with the scores. Measured on the AMX Xeon: 1.5e-6 over the cases here, 4.3e-6 in
// test_paged_attention.cpp, 1.7e-4 with the 40x scores of RandomBatchesMatchNaive (kAmxTolLargeScores) — the F32
// kernels' 2.2e-5 there. Storing K in BF16 already moves those scores 2^9 times more (test_paged_attention.cpp's
// bf16 bound against the F32 inputs).
constexpr double kAmxTol = 1e-5, kAmxTolLargeScores = 4e-4;

struct Variant {
  KvDType dtype;
  bool tensor_scales;
  float tensor_scale;
};
const Variant kVariants[] = {
    {KvDType::F32, false, 1.0f},      {KvDType::BF16, false, 1.0f},        {KvDType::FP8_E4M3, false, 1.0f},
    {KvDType::FP8_E4M3, true, 1.0f / 64}, {KvDType::INT8, false, 1.0f}, {KvDType::INT8, true, 2.0f / 127},
};

// One sequence's context written into a shuffled block table of a garbage-filled pool.
struct Fixture {
  Fixture(const Variant& var, int64_t n_kv, int64_t head_dim, int64_t block_size, int64_t n_ctx, uint32_t seed)
      : n_seq_blocks((n_ctx + block_size - 1) / block_size),
        layout{var.dtype, block_size, n_kv, head_dim, var.tensor_scales},
        k(layout, 2 * n_seq_blocks + 3, var.tensor_scale, 0x5A),
        v(layout, 2 * n_seq_blocks + 3, var.tensor_scale, 0xA5) {
    std::vector<int32_t> all(static_cast<size_t>(2 * n_seq_blocks + 3));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(seed));
    table.assign(all.begin(), all.begin() + n_seq_blocks);
    const int64_t row = n_kv * head_dim;
    std::vector<float> kk = random_floats(size_t(n_ctx * row), seed + 1), vv = random_floats(size_t(n_ctx * row), seed + 2);
    std::mt19937 rng(seed + 3);
    std::uniform_real_distribution<float> mag(0.25f, 2.0f);
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float mk = mag(rng), mv = mag(rng);
      for (int64_t i = 0; i < row; ++i) kk[size_t(p * row + i)] *= mk, vv[size_t(p * row + i)] *= mv;
    }
    std::vector<int64_t> slots(static_cast<size_t>(n_ctx));
    for (int64_t p = 0; p < n_ctx; ++p) slots[size_t(p)] = int64_t(table[size_t(p / block_size)]) * block_size + p % block_size;
    write_kv(kk.data(), vv.data(), n_ctx, slots.data(), k.view, v.view);
  }
  int64_t n_seq_blocks;
  KvBlockLayout layout;
  TestPool k, v;
  std::vector<int32_t> table;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  }
  return d;
}

// (n_heads, n_kv_heads), head_dim, block_size, (start_pos, n_tokens), variant, impl
using Param = std::tuple<std::pair<int64_t, int64_t>, int64_t, int64_t, std::pair<int64_t, int64_t>, size_t,
                         AttentionImpl>;

class TiledAttentionTest : public ::testing::TestWithParam<Param> {};

TEST_P(TiledAttentionTest, MatchesNaive) {
  const auto [heads, head_dim, block_size, span, vi, impl] = GetParam();
  const auto [n_heads, n_kv] = heads;
  const auto [start_pos, n_tokens] = span;
  if (impl == AttentionImpl::Avx2 && !attention_has_avx2()) GTEST_SKIP() << "no avx2/fma/f16c on this CPU";
  if (impl == AttentionImpl::Avx512 && !attention_has_avx512()) GTEST_SKIP() << "no avx512f/bw/vl/dq on this CPU";
  const Variant& var = kVariants[vi];
  const int64_t n_ctx = start_pos + n_tokens;
  const Fixture f(var, n_kv, head_dim, block_size, n_ctx, uint32_t(n_ctx * 7 + head_dim));
  const auto q = random_floats(size_t(n_tokens * n_heads * head_dim), 77);
  const float scale = 1.0f / std::sqrt(float(head_dim));

  std::vector<float> ref(q.size(), NAN);
  set_num_threads(1);
  paged_attention_naive(q.data(), n_tokens, start_pos, n_heads, f.k.view, f.v.view, f.table.data(), scale, ref.data(),
                        impl);
  // Split-K: default partitions, one block per split, never; small query tiles too (several tiles, ragged last).
  // The AVX-512 lane kernels (AttentionTiling::lanes, the default) too, on default tiles and small ones, with the
  // AMX tile kernel where it runs (bf16 pools, head_dim % 32 == 0, a CPU with AMX) and without.
  const AttentionTiling tilings[] = {{0, 0, false}, {0, 1, false}, {0, -1, false}, {3, 1, false}, {0, 0, true},
                                     {3, 1, true}, {0, 0, true, false}, {3, 1, true, false}};
  double worst = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const AttentionTiling& t : tilings) {
      std::vector<float> out(q.size(), NAN);
      paged_attention(q.data(), n_tokens, start_pos, n_heads, f.k.view, f.v.view, f.table.data(), scale, out.data(),
                      impl, t);
      const double d = max_abs_diff(out, ref);
      EXPECT_LE(d, attention_uses_amx(var.dtype, head_dim, impl, t) ? kAmxTol : kTol)
          << test::dtype_label(var.dtype, var.tensor_scales) << " threads " << threads << " q_tokens " << t.q_tokens
          << " split_blocks " << t.split_blocks << " lanes " << t.lanes << " amx " << t.amx;
      worst = std::max(worst, d);
    }
  }
  set_num_threads(1);
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", worst);
  RecordProperty("max_abs_diff", text);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& p = info.param;
  const Variant& v = kVariants[std::get<4>(p)];
  return test::dtype_label(v.dtype, v.tensor_scales) + "_" + attention_impl_name(std::get<5>(p)) + "_h" +
         std::to_string(std::get<0>(p).first) + "kv" + std::to_string(std::get<0>(p).second) + "_d" +
         std::to_string(std::get<1>(p)) + "_bs" + std::to_string(std::get<2>(p)) + "_start" +
         std::to_string(std::get<3>(p).first) + "_n" + std::to_string(std::get<3>(p).second);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TiledAttentionTest,
    ::testing::Combine(
        ::testing::Values(std::pair<int64_t, int64_t>{4, 4}, std::pair<int64_t, int64_t>{9, 3},
                          std::pair<int64_t, int64_t>{8, 2}, std::pair<int64_t, int64_t>{8, 1}),
        ::testing::Values(64, 128), ::testing::Values(16, 32),
        // decode at 1 and at a ragged depth; prefill from 0; chunks starting mid-block; a long decode (split-K)
        ::testing::Values(std::pair<int64_t, int64_t>{0, 1}, std::pair<int64_t, int64_t>{300, 1},
                          std::pair<int64_t, int64_t>{0, 45}, std::pair<int64_t, int64_t>{21, 7},
                          std::pair<int64_t, int64_t>{37, 40}, std::pair<int64_t, int64_t>{1000, 3}),
        ::testing::Range(size_t(0), std::size(kVariants)),
        ::testing::Values(AttentionImpl::Avx512, AttentionImpl::Avx2, AttentionImpl::Portable)),
    param_name);

// Shapes off the vector widths: head_dim 20 (AVX2's 8-wide rows leave 4, the lanes' 16 leave 4), blocks of 3 and
// 7 positions (runs of whole blocks that end mid-vector), groups of 5 and 6 query heads (AVX2's row groups 3 + 2,
// 3 + 3) and of 1.
INSTANTIATE_TEST_SUITE_P(
    OddShapes, TiledAttentionTest,
    ::testing::Combine(
        ::testing::Values(std::pair<int64_t, int64_t>{10, 2}, std::pair<int64_t, int64_t>{6, 1},
                          std::pair<int64_t, int64_t>{3, 3}),
        ::testing::Values(20), ::testing::Values(3, 7),
        ::testing::Values(std::pair<int64_t, int64_t>{0, 1}, std::pair<int64_t, int64_t>{300, 1},
                          std::pair<int64_t, int64_t>{37, 40}, std::pair<int64_t, int64_t>{130, 3}),
        ::testing::Values(size_t(1), size_t(3), size_t(4)),  // bf16, fp8 tensor scale, int8 block scales
        ::testing::Values(AttentionImpl::Avx512, AttentionImpl::Avx2, AttentionImpl::Portable)),
    param_name);

// The comparison above can fail: a kernel that attended one position too few (the newest) for every query, or
// whose V held one wrong element, differs from the reference by far more than kTol.
TEST(TiledAttention, ChecksCanFail) {
  const Variant var{KvDType::BF16, false, 1.0f};
  const int64_t n_heads = 9, n_kv = 3, d = 64, bs = 16, start = 200, n = 5;
  const Fixture f(var, n_kv, d, bs, start + n, 5);
  const auto q = random_floats(size_t(n * n_heads * d), 6);
  std::vector<float> ref(q.size()), out(q.size());
  paged_attention_naive(q.data(), n, start, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f, ref.data());
  paged_attention(q.data(), n, start, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f, out.data());
  const double tol = attention_uses_amx(var.dtype, d, AttentionImpl::Auto, {}) ? kAmxTol : kTol;
  EXPECT_LE(max_abs_diff(out, ref), tol);
  // One position short: token t attends [0, start + t) instead of [0, start + t].
  std::vector<float> shifted(q.size());
  for (int64_t t = 0; t < n; ++t)
    paged_attention(q.data() + t * n_heads * d, 1, start + t - 1, n_heads, f.k.view, f.v.view, f.table.data(),
                    0.125f, shifted.data() + t * n_heads * d);
  EXPECT_GT(max_abs_diff(shifted, ref), 100 * tol);
  // One V element of the newest position changed by 0.5.
  const int64_t p = start + n - 1;
  uint8_t* row = f.v.view.block(f.table[size_t(p / bs)]) + (p % bs) * f.layout.row_bytes();
  uint16_t h;
  std::memcpy(&h, row, sizeof h);
  h = f32_to_bf16(bf16_to_f32(h) + 0.5f);
  std::memcpy(row, &h, sizeof h);
  paged_attention(q.data(), n, start, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f, out.data());
  EXPECT_GT(max_abs_diff(out, ref), 100 * tol);
}

// Decode at a long context on two threads (the row kernel with split-K, and the lane kernels) is the same, bit
// for bit, as on one thread (the cuts do not depend on the thread count).
TEST(TiledAttention, SplitKThreadCountInvariant) {
  const Variant var{KvDType::BF16, false, 1.0f};
  const Fixture f(var, 3, 64, 16, 4096, 9);
  const auto q = random_floats(size_t(9 * 64), 10);
  for (const bool lanes : {false, true}) {
    AttentionTiling tiling;
    tiling.lanes = lanes;
    std::vector<float> o1(q.size()), o2(q.size());
    set_num_threads(1);
    paged_attention(q.data(), 1, 4095, 9, f.k.view, f.v.view, f.table.data(), 0.125f, o1.data(), AttentionImpl::Auto,
                    tiling);
    set_num_threads(2);
    paged_attention(q.data(), 1, 4095, 9, f.k.view, f.v.view, f.table.data(), 0.125f, o2.data(), AttentionImpl::Auto,
                    tiling);
    set_num_threads(1);
    EXPECT_EQ(o1, o2) << "lanes " << lanes;
  }
}

// With the AVX-512 lane kernels (the default) a token's attention is the same bit for bit however its sequence
// was cut: one prefill of the whole context, token-by-token decode, ragged chunks (1..100 tokens, starting
// mid-block and mid-chunk), small query tiles, 1 and 2 threads — over every KV dtype, GQA 1/3/4, head_dim 64/128,
// block sizes 16/32/5 (chunks of 16 positions end mid-block or are cut by the block), without split-K and with
// 3-block split-K segments (decode: segments in parallel, then folded; prefill: folded in turn); for bf16 on a CPU
// with AMX also the AMX tile kernel (AttentionTiling::amx), whose decode (few rows) takes the softmax row by row and
// whose prefill takes it across the lanes. The row kernel (lanes off)
// does differ between decode (split-K past 128 positions) and prefill on the same data, which shows the
// comparison can fail.
TEST(TiledAttention, LanesPrefillEqualsDecodeBitForBit) {
  if (!attention_has_avx512()) GTEST_SKIP() << "no avx512f/bw/vl/dq on this CPU: the lane kernels do not run";
  constexpr int64_t kCtx = 203;
  const std::pair<int64_t, int64_t> heads[] = {{9, 3}, {4, 4}, {8, 2}};
  const int64_t chunks[] = {1, 7, 16, 100, 3, 33, 2, 41};
  bool row_kernel_differs = false;
  for (size_t vi = 0; vi < std::size(kVariants); ++vi)
    for (const auto& [n_heads, n_kv] : heads)
      for (const int64_t hd : {64, 128})
        for (const int64_t bs : {16, 32, 5}) {
          if (vi > 1 && (hd != 64 || bs == 32)) continue;  // fp8 / int8: one head_dim, two block sizes
          const Variant& var = kVariants[vi];
          const Fixture f(var, n_kv, hd, bs, kCtx, uint32_t(vi * 31 + hd + bs));
          const int64_t row = n_heads * hd;
          const auto q = random_floats(size_t(kCtx * row), uint32_t(vi + 5));
          const float scale = 1.0f / std::sqrt(float(hd));
          const std::string what = test::dtype_label(var.dtype, var.tensor_scales) + " h" + std::to_string(n_heads) +
                                   " kv" + std::to_string(n_kv) + " d" + std::to_string(hd) + " bs" + std::to_string(bs);
          const auto run = [&](const AttentionTiling& t, const std::vector<int64_t>& cut) {
            std::vector<float> out(q.size(), NAN);
            int64_t p = 0;
            for (size_t i = 0; p < kCtx; ++i) {
              const int64_t n = std::min(cut[i % cut.size()], kCtx - p);
              paged_attention(q.data() + p * row, n, p, n_heads, f.k.view, f.v.view, f.table.data(), scale,
                              out.data() + p * row, AttentionImpl::Avx512, t);
              p += n;
            }
            return out;
          };
          // Split-K: the default (512 positions: none here) and segments of 3 blocks (15..96 positions).
          // The AMX tile kernel where it runs (bf16 pools on a CPU with AMX), and the lane kernels.
          for (const auto& [split, amx] : {std::pair<int64_t, bool>{0, true}, {3, true}, {0, false}, {3, false}}) {
            if (amx && !(var.dtype == KvDType::BF16 && attention_has_amx())) continue;
            const AttentionTiling lanes{0, split, true, amx}, small_tiles{3, split, true, amx};
            set_num_threads(1);
            const std::vector<float> whole = run(lanes, {kCtx});
            ASSERT_TRUE(std::all_of(whole.begin(), whole.end(), [](float x) { return std::isfinite(x); })) << what;
            for (int threads : {1, 2}) {
              set_num_threads(threads);
              const std::vector<std::pair<const char*, std::vector<float>>> cuts = {
                  {"token by token", run(lanes, {1})},
                  {"ragged chunks", run(lanes, std::vector<int64_t>(std::begin(chunks), std::end(chunks)))},
                  {"whole, 3-token tiles", run(small_tiles, {kCtx})},
                  {"ragged chunks, 3-token tiles",
                   run(small_tiles, std::vector<int64_t>(std::begin(chunks) + 2, std::end(chunks)))}};
              for (const auto& [name, out] : cuts)
                EXPECT_EQ(std::memcmp(out.data(), whole.data(), whole.size() * sizeof(float)), 0)
                    << what << ": " << name << ", threads " << threads << ", split_blocks " << split << ", amx " << amx;
            }
          }
          set_num_threads(1);
          const AttentionTiling rows_only{0, 0, false};
          const std::vector<float> a = run(rows_only, {kCtx}), b = run(rows_only, {1});
          row_kernel_differs |= std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
        }
  EXPECT_TRUE(row_kernel_differs);
}

// Decode at depth with the lane kernels' default split-K (segments of 512 positions, in parallel on 2 threads):
// the last 70 tokens of a 1,600-token context decoded one by one equal, bit for bit, the same tokens prefilled as
// one chunk and as ragged chunks, and are within kTol of the naive kernel; GQA 3 and 1, head_dim 64, bf16 / f32.
// Unsplit, the same attention differs in its last bits (the segments' fold does run) and is within kTol too.
TEST(TiledAttention, LanesSplitKDecodeEqualsPrefillAtDepth) {
  if (!attention_has_avx512()) GTEST_SKIP() << "no avx512f/bw/vl/dq on this CPU: the lane kernels do not run";
  constexpr int64_t kCtx = 1600, kTail = 70, kStart = kCtx - kTail;
  for (const Variant& var : {kVariants[1], kVariants[0]})
    for (const auto& [n_heads, n_kv] : {std::pair<int64_t, int64_t>{9, 3}, std::pair<int64_t, int64_t>{4, 4}}) {
      const int64_t hd = 64, row = n_heads * hd;
      const Fixture f(var, n_kv, hd, 16, kCtx, uint32_t(n_heads + 40));
      const auto q = random_floats(size_t(kTail * row), 41);
      const std::string what = test::dtype_label(var.dtype, var.tensor_scales) + " h" + std::to_string(n_heads);
      const auto run = [&](int64_t chunk) {
        std::vector<float> out(q.size(), NAN);
        for (int64_t p = 0; p < kTail; p += chunk) {
          const int64_t n = std::min(chunk, kTail - p);
          paged_attention(q.data() + p * row, n, kStart + p, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f,
                          out.data() + p * row, AttentionImpl::Avx512);
        }
        return out;
      };
      std::vector<float> ref(q.size());
      set_num_threads(1);
      paged_attention_naive(q.data(), kTail, kStart, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f, ref.data(),
                            AttentionImpl::Portable);
      const std::vector<float> whole = run(kTail);
      const double tol = attention_uses_amx(var.dtype, hd, AttentionImpl::Avx512, {}) ? kAmxTol : kTol;
      EXPECT_LE(max_abs_diff(whole, ref), tol) << what;
      // The segments do run: unsplit (split_blocks -1), the same rows round differently.
      std::vector<float> unsplit(q.size(), NAN);
      AttentionTiling no_split;
      no_split.split_blocks = -1;
      paged_attention(q.data(), kTail, kStart, n_heads, f.k.view, f.v.view, f.table.data(), 0.125f, unsplit.data(),
                      AttentionImpl::Avx512, no_split);
      EXPECT_LE(max_abs_diff(unsplit, ref), tol) << what;
      EXPECT_NE(std::memcmp(unsplit.data(), whole.data(), whole.size() * sizeof(float)), 0) << what;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (const int64_t chunk : {int64_t(1), int64_t(13)})
          EXPECT_EQ(std::memcmp(run(chunk).data(), whole.data(), whole.size() * sizeof(float)), 0)
              << what << " chunks of " << chunk << ", threads " << threads;
      }
      set_num_threads(1);
    }
}

// The AMX tile kernel (AttentionTiling::amx; bf16 pools, head_dim % 32 == 0, CPUs with AMX) does run: within kTol
// of the naive kernel for decode and prefill, head_dim 64 and 96 (an odd count of 32-wide slices), blocks of 16
// and 5, GQA 3 and 1 — and its bits differ from the lane kernels' on the same inputs (another summation order).
TEST(TiledAttention, AmxTilesMatchNaiveAndAreNotTheLaneKernels) {
  if (!attention_has_amx()) GTEST_SKIP() << "no AMX (amx_tile + amx_bf16, granted by the OS) on this CPU";
  const Variant var{KvDType::BF16, false, 1.0f};
  bool differs = false;
  for (const int64_t hd : {64, 96})
    for (const int64_t bs : {16, 5})
      for (const auto& [n_heads, n_kv] : {std::pair<int64_t, int64_t>{9, 3}, std::pair<int64_t, int64_t>{4, 4}})
        for (const auto& [start, n_tok] : {std::pair<int64_t, int64_t>{700, 1}, std::pair<int64_t, int64_t>{30, 77}}) {
          const int64_t n_ctx = start + n_tok;
          const Fixture f(var, n_kv, hd, bs, n_ctx, uint32_t(hd + bs + n_tok));
          const auto q = random_floats(size_t(n_tok * n_heads * hd), 91);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> ref(q.size()), amx(q.size(), NAN), lanes(q.size(), NAN);
          set_num_threads(1);
          paged_attention_naive(q.data(), n_tok, start, n_heads, f.k.view, f.v.view, f.table.data(), scale, ref.data(),
                                AttentionImpl::Portable);
          paged_attention(q.data(), n_tok, start, n_heads, f.k.view, f.v.view, f.table.data(), scale, amx.data(),
                          AttentionImpl::Avx512, AttentionTiling{0, 0, true, true});
          paged_attention(q.data(), n_tok, start, n_heads, f.k.view, f.v.view, f.table.data(), scale, lanes.data(),
                          AttentionImpl::Avx512, AttentionTiling{0, 0, true, false});
          const std::string what = "d" + std::to_string(hd) + " bs" + std::to_string(bs) + " h" +
                                   std::to_string(n_heads) + " n" + std::to_string(n_tok);
          EXPECT_LE(max_abs_diff(amx, ref), kAmxTol) << what;
          EXPECT_LE(max_abs_diff(lanes, ref), kTol) << what;
          differs |= std::memcmp(amx.data(), lanes.data(), amx.size() * sizeof(float)) != 0;
        }
  EXPECT_TRUE(differs);
}

// A step's batch — decodes short and long (split-K), a prefill chunk mid-block, a sequence with no tokens, GQA 3
// — through paged_attention_batch equals one paged_attention call per sequence bit for bit, on 1 and 2 threads
// and every path this CPU has; a negative start_pos is an InputError naming the sequence.
TEST(TiledAttention, BatchEqualsOneCallPerSequence) {
  const Variant var{KvDType::BF16, false, 1.0f};
  const int64_t n_heads = 9, n_kv = 3, d = 64, bs = 16;
  const Fixture f(var, n_kv, d, bs, 3000, 11);  // one pool; the sequences share its blocks (read only)
  const AttentionSeqArgs seqs[] = {{1, 5, f.table.data()},    {1, 2999, f.table.data()}, {0, 40, f.table.data()},
                                   {45, 21, f.table.data()},  {1, 700, f.table.data()},  {3, 1000, f.table.data()}};
  int64_t n_tok = 0;
  for (const AttentionSeqArgs& s : seqs) n_tok += s.n_tokens;
  const auto q = random_floats(size_t(n_tok * n_heads * d), 12);
  for (AttentionImpl impl : {AttentionImpl::Avx512, AttentionImpl::Avx2, AttentionImpl::Portable}) {
    if (impl == AttentionImpl::Avx512 && !attention_has_avx512()) continue;
    if (impl == AttentionImpl::Avx2 && !attention_has_avx2()) continue;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> one(q.size(), NAN), batch(q.size(), NAN);
      int64_t t0 = 0;
      for (const AttentionSeqArgs& s : seqs) {
        paged_attention(q.data() + t0 * n_heads * d, s.n_tokens, s.start_pos, n_heads, f.k.view, f.v.view,
                        s.block_table, 0.125f, one.data() + t0 * n_heads * d, impl);
        t0 += s.n_tokens;
      }
      paged_attention_batch(q.data(), seqs, int64_t(std::size(seqs)), n_heads, f.k.view, f.v.view, 0.125f,
                            batch.data(), impl);
      EXPECT_EQ(std::memcmp(one.data(), batch.data(), one.size() * sizeof(float)), 0)
          << attention_impl_name(impl) << " threads " << threads;
      EXPECT_TRUE(std::all_of(batch.begin(), batch.end(), [](float x) { return std::isfinite(x); }));
    }
  }
  set_num_threads(1);
  const AttentionSeqArgs bad[] = {{1, 5, f.table.data()}, {1, -1, f.table.data()}};
  std::vector<float> out(size_t(2 * n_heads * d));
  try {
    paged_attention_batch(q.data(), bad, 2, n_heads, f.k.view, f.v.view, 0.125f, out.data());
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1"), std::string::npos) << e.what();
  }
}

// Engine-shaped batches: random prompt chunks (1..160 tokens, including ragged last tiles) at random depths
// (0..1200, mid-block) and decodes, f32 and bf16 pools, every path: each sequence's rows within kTol of the
// naive kernel run on that sequence alone.
TEST(TiledAttention, RandomBatchesMatchNaive) {
  const int64_t n_heads = 9, n_kv = 3, d = 64, bs = 16;
  std::mt19937 rng(2024);
  for (const Variant& var : {Variant{KvDType::F32, false, 1.0f}, Variant{KvDType::BF16, false, 1.0f}}) {
    const Fixture f(var, n_kv, d, bs, 1400, 13);
    for (int trial = 0; trial < 2; ++trial) {
      std::vector<AttentionSeqArgs> seqs;
      std::uniform_int_distribution<int64_t> start(0, 1200), len(1, 160), shortlen(2, 12), coin(0, 2);
      for (int i = 0; i < 6; ++i) {
        const int64_t k = coin(rng);
        const int64_t n = k == 0 ? 1 : k == 1 ? shortlen(rng) : len(rng);
        seqs.push_back({n, start(rng), f.table.data()});
      }
      int64_t n_tok = 0;
      for (const AttentionSeqArgs& s : seqs) n_tok += s.n_tokens;
      auto q = random_floats(size_t(n_tok * n_heads * d), uint32_t(100 + trial));
      if (trial % 2 == 1)  // the real model's range: scores of tens, one position dominating
        for (float& x : q) x *= 40.0f;
      std::vector<float> ref(q.size());
      set_num_threads(1);
      int64_t t0 = 0;
      for (const AttentionSeqArgs& s : seqs) {
        paged_attention_naive(q.data() + t0 * n_heads * d, s.n_tokens, s.start_pos, n_heads, f.k.view, f.v.view,
                              s.block_table, 0.125f, ref.data() + t0 * n_heads * d, AttentionImpl::Portable);
        t0 += s.n_tokens;
      }
      for (AttentionImpl impl : {AttentionImpl::Avx512, AttentionImpl::Avx2, AttentionImpl::Portable}) {
        if (impl == AttentionImpl::Avx512 && !attention_has_avx512()) continue;
        if (impl == AttentionImpl::Avx2 && !attention_has_avx2()) continue;
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          std::vector<float> out(q.size(), NAN);
          AttentionTiling tiling;
          tiling.lanes = threads == 2;  // the lane kernel on the AVX-512 rows
          paged_attention_batch(q.data(), seqs.data(), int64_t(seqs.size()), n_heads, f.k.view, f.v.view, 0.125f,
                                out.data(), impl, tiling);
          t0 = 0;
          for (const AttentionSeqArgs& s : seqs) {
            const size_t a = size_t(t0 * n_heads * d), b = size_t((t0 + s.n_tokens) * n_heads * d);
            const double diff = max_abs_diff(std::vector<float>(out.begin() + long(a), out.begin() + long(b)),
                                             std::vector<float>(ref.begin() + long(a), ref.begin() + long(b)));
            // Scores 40x larger: errors grow with them (measured <= 2.2e-5 on every F32 path, Zen 4; AMX above).
            const bool amx = attention_uses_amx(var.dtype, d, impl, tiling);
            EXPECT_LE(diff, trial % 2 == 0 ? (amx ? kAmxTol : kTol)
                            : amx          ? kAmxTolLargeScores
                                           : 20 * kTol)
                << test::dtype_label(var.dtype, var.tensor_scales) << " " << attention_impl_name(impl) << " trial "
                << trial << " threads " << threads << " seq start " << s.start_pos << " n " << s.n_tokens;
            t0 += s.n_tokens;
          }
        }
      }
      set_num_threads(1);
    }
  }
}

}  // namespace
}  // namespace tp::cpu
