// write_kv: what each KV dtype stores, against the scalar reference conversions of common/ (bf16, E4M3) and
// the int8 scheme of kernels/cpu/kv_write.h — block scales set at offset 0 and raised (with requantization)
// by a larger token, the documented error bound, and stored bytes that do not depend on how tokens were
// chunked into calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/fp_formats.h"
#include "kernels/cpu/kv_write.h"
#include "tests/kernels/fixtures.h"
#include "tests/kernels/kv_fixtures.h"

namespace tp::cpu {
namespace {

using test::block_scale;
using test::random_floats;
using test::stored_value;
using test::TestPool;

// The bit-twiddling F32 -> E4M3 equals the reference on every code's neighbourhood (values, midpoints
// between codes — the ties —, ±1 ulp around them), on a sweep of 2^32 / 4099 bit patterns of each sign, and
// on the specials.
TEST(KvConvert, E4m3MatchesReference) {
  std::vector<float> probes = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 480.0f, 1e30f, INFINITY, -INFINITY, NAN,
                               std::ldexp(1.0f, -10), std::ldexp(1.0f, -9), std::ldexp(1.5f, -10)};
  for (int c = 0; c < 0x7F; ++c) {
    const float a = fp8_e4m3_to_f32(uint8_t(c)), b = fp8_e4m3_to_f32(uint8_t(c + 1));
    for (float x : {a, 0.5f * (a + b)})
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
        probes.push_back(y);
        probes.push_back(-y);
      }
  }
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) probes.push_back(std::bit_cast<float>(uint32_t(u)));
  for (float f : probes) ASSERT_EQ(f32_to_e4m3(f), f32_to_fp8_e4m3(f)) << f << " bits " << std::bit_cast<uint32_t>(f);
  for (int c = 0; c < 256; ++c) {
    const float want = fp8_e4m3_to_f32(uint8_t(c)), got = e4m3_table()[c];
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << c;
    else
      EXPECT_EQ(got, want) << c;
  }
}

TEST(KvConvert, QuantizeI8RoundsHalfToEvenAndClamps) {
  EXPECT_EQ(quantize_i8(2.5f, 1.0f), 2);
  EXPECT_EQ(quantize_i8(-3.5f, 1.0f), -4);
  EXPECT_EQ(quantize_i8(500.0f, 1.0f), 127);
  EXPECT_EQ(quantize_i8(-500.0f, 1.0f), -127);
  EXPECT_EQ(quantize_i8(NAN, 1.0f), 0);
}

// Each dtype without block scales stores exactly the reference conversion of x / tensor_scale; padding slots
// and other slots stay untouched.
TEST(WriteKv, StoresTheReferenceConversion) {
  const int64_t n_kv = 2, d = 12, bs = 4, n_blocks = 3, row = n_kv * d;
  const std::vector<int64_t> slots = {9, -1, 2, 4};
  const auto k = random_floats(size_t(4 * row), 41, -3.0f, 3.0f);
  const auto v = random_floats(size_t(4 * row), 42, -3.0f, 3.0f);
  struct Case {
    KvDType dtype;
    bool tensor_scales;
    float scale;
  };
  for (const Case& c : {Case{KvDType::F32, false, 1.0f}, Case{KvDType::BF16, false, 1.0f},
                        Case{KvDType::FP8_E4M3, false, 1.0f}, Case{KvDType::FP8_E4M3, true, 0.01f},
                        Case{KvDType::INT8, true, 3.0f / 127}}) {
    const KvBlockLayout layout{c.dtype, bs, n_kv, d, c.tensor_scales};
    TestPool kp(layout, n_blocks, c.scale, 0xEE), vp(layout, n_blocks, c.scale, 0xEE);
    write_kv(k.data(), v.data(), int64_t(slots.size()), slots.data(), kp.view, vp.view);
    const int64_t esz = kv_dtype_bytes(c.dtype);
    for (int64_t s = 0; s < n_blocks * bs; ++s) {
      const auto t = std::find(slots.begin(), slots.end(), s);
      for (int which = 0; which < 2; ++which) {
        const TestPool& pool = which == 0 ? kp : vp;
        const std::vector<float>& x = which == 0 ? k : v;
        const uint8_t* at = pool.view.block(s / bs) + (s % bs) * layout.row_bytes();
        for (int64_t i = 0; i < row; ++i) {
          if (t == slots.end()) {
            for (int64_t byte = 0; byte < esz; ++byte) ASSERT_EQ(at[i * esz + byte], 0xEE) << "slot " << s;
            continue;
          }
          const float xi = x[size_t((t - slots.begin()) * row + i)];
          switch (c.dtype) {
            case KvDType::F32: ASSERT_EQ(stored_value(pool.view, s, 0, i), xi); break;
            case KvDType::BF16: ASSERT_EQ(stored_value(pool.view, s, 0, i), bf16_to_f32(f32_to_bf16(xi))); break;
            case KvDType::FP8_E4M3: ASSERT_EQ(at[i], f32_to_fp8_e4m3(xi * (1.0f / c.scale))) << xi; break;
            case KvDType::INT8:
              ASSERT_EQ(float(int8_t(at[i])), std::clamp<float>(std::nearbyint(xi * (1.0f / c.scale)), -127, 127)) << xi;
              break;
          }
        }
      }
    }
  }
}

// int8 with block scales on a 40-token sequence through a shuffled table, heads with different magnitudes
// and a per-token magnitude that sometimes grows (raising block scales):
//   - each (block, head) scale = max over its tokens of amax / 127 (over garbage: offset 0 starts the block);
//   - every stored value is within 0.5 · s_final · (1 + raises after it was written) of its input;
//   - the stored bytes are the same whether the tokens came in one call, one at a time or in random chunks.
TEST(WriteKv, Int8BlockScalesRaiseAndRequantize) {
  const int64_t n = 40, n_kv = 3, d = 20, bs = 16, n_blocks = 5, row = n_kv * d;
  const std::vector<int32_t> table = {3, 0, 4};
  std::vector<float> x = random_floats(size_t(n * row), 61);
  std::mt19937 rng(62);
  std::uniform_real_distribution<float> mag(0.1f, 3.0f);
  for (int64_t p = 0; p < n; ++p)
    for (int64_t h = 0; h < n_kv; ++h) {
      const float m = mag(rng) * float(h + 1);
      for (int64_t i = 0; i < d; ++i) x[size_t(p * row + h * d + i)] *= m;
    }
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) slots[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
  const KvBlockLayout layout{KvDType::INT8, bs, n_kv, d, false};

  // Garbage scale bytes 0x7F7F7F7F (a huge float) in every block: offset 0 must start each block afresh.
  auto write_chunks = [&](const std::vector<int64_t>& cuts) {
    auto pool = std::make_unique<TestPool>(layout, n_blocks, 1.0f, 0x7F);
    TestPool vpool(layout, n_blocks, 1.0f, 0x7F);
    for (size_t c = 0; c + 1 < cuts.size(); ++c)
      write_kv(x.data() + cuts[c] * row, x.data() + cuts[c] * row, cuts[c + 1] - cuts[c], slots.data() + cuts[c],
               pool->view, vpool.view);
    EXPECT_EQ(pool->bytes, vpool.bytes);
    return pool;
  };
  const auto whole = write_chunks({0, n});
  std::vector<int64_t> one_by_one;
  for (int64_t p = 0; p <= n; ++p) one_by_one.push_back(p);
  EXPECT_TRUE(write_chunks(one_by_one)->bytes == whole->bytes);
  EXPECT_TRUE(write_chunks({0, 3, 17, 18, 31, n})->bytes == whole->bytes);

  double worst_in_scales = 0;  // max |x̂ - x| / s_final
  int64_t total_raises = 0;
  for (int64_t b = 0; b < (n + bs - 1) / bs; ++b)
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t p0 = b * bs, p1 = std::min(n, p0 + bs);
      std::vector<int64_t> raises_after(static_cast<size_t>(p1 - p0), 0);
      float need_max = 0;
      for (int64_t p = p0; p < p1; ++p) {
        float amax = 0;
        for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[size_t(p * row + h * d + i)]));
        const float need = amax / 127.0f;
        if (p > p0 && need > need_max) {
          for (int64_t e = p0; e < p; ++e) ++raises_after[size_t(e - p0)];
          ++total_raises;
        }
        need_max = std::max(need_max, need);
      }
      const float s = block_scale(whole->view, table[size_t(b)], h);
      ASSERT_EQ(s, need_max) << "block " << b << " head " << h;
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t i = 0; i < d; ++i) {
          const double err = std::fabs(double(stored_value(whole->view, slots[size_t(p)], h, i)) -
                                       double(x[size_t(p * row + h * d + i)]));
          ASSERT_LE(err, 0.5 * s * (1 + raises_after[size_t(p - p0)]) * (1 + 1e-5))
              << "position " << p << " head " << h << " dim " << i;
          worst_in_scales = std::max(worst_in_scales, err / s);
        }
    }
  EXPECT_GT(total_raises, 0) << "the input should raise some block scales";
  std::printf("[measured] int8 block scales: %lld raises, max |error| = %.3f x the final block scale\n",
              (long long)total_raises, worst_in_scales);
}

// A small token, then one 10x larger in the same block: the first is requantized to the larger scale.
TEST(WriteKv, Int8RequantizesEarlierRowsWhenTheScaleGrows) {
  const KvBlockLayout layout{KvDType::INT8, 4, 1, 4, false};
  TestPool kp(layout, 1), vp(layout, 1);
  const std::vector<float> a = {0.1f, -0.05f, 0.02f, 0.0f}, b = {1.0f, 0.5f, -0.25f, 0.127f};
  const std::vector<int64_t> s0 = {0}, s1 = {1};
  write_kv(a.data(), a.data(), 1, s0.data(), kp.view, vp.view);
  EXPECT_EQ(block_scale(kp.view, 0, 0), 0.1f / 127.0f);
  EXPECT_EQ(stored_value(kp.view, 0, 0, 0), 127 * (0.1f / 127.0f));
  write_kv(b.data(), b.data(), 1, s1.data(), kp.view, vp.view);
  const float s = 1.0f / 127.0f;
  EXPECT_EQ(block_scale(kp.view, 0, 0), s);
  // Token 0 now reads round(127 · 0.1 / 1) = 13 steps of the new scale.
  EXPECT_EQ(stored_value(kp.view, 0, 0, 0), 13 * s);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(stored_value(kp.view, 0, 0, i), a[size_t(i)], 0.5 * (0.1f / 127) + 0.5 * s) << i;
    EXPECT_NEAR(stored_value(kp.view, 1, 0, i), b[size_t(i)], 0.5 * s) << i;
  }
  // A smaller token keeps the scale; writing offset 0 again starts the block afresh.
  const std::vector<float> c = {0.01f, 0.0f, 0.0f, 0.0f};
  const std::vector<int64_t> s2 = {2};
  write_kv(c.data(), c.data(), 1, s2.data(), kp.view, vp.view);
  EXPECT_EQ(block_scale(kp.view, 0, 0), s);
  write_kv(c.data(), c.data(), 1, s0.data(), kp.view, vp.view);
  EXPECT_EQ(block_scale(kp.view, 0, 0), 0.01f / 127.0f);
  // An all-zero row stores zeros with a zero scale.
  const std::vector<float> z(4, 0.0f);
  write_kv(z.data(), z.data(), 1, s0.data(), kp.view, vp.view);
  EXPECT_EQ(block_scale(kp.view, 0, 0), 0.0f);
  EXPECT_EQ(stored_value(kp.view, 0, 0, 0), 0.0f);
}

}  // namespace
}  // namespace tp::cpu
