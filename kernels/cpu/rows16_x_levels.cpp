// One row of x as int8 levels per block of columns for the AVX2 16-row kernels (rows16_avx2.h rows16_x_levels).
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/rows16_avx2.h"

namespace tp::cpu::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

// 2^e as F32 for e in [-126, 127].
inline float pow2(int e) { return std::bit_cast<float>(uint32_t(e + 127) << 23); }

template <int kLevels>
Rows16XRow levels_of(const float* x, int64_t n_in, int64_t bs, int8_t* lv, int32_t* sx, float* f) {
  const int64_t nb = n_in / bs;
  Rows16XRow r{};
  for (int l = 0; l < kLevels; ++l) r.q[l] = lv + l * n_in;
  r.sx = sx;
  r.f = f;
  // Pass 1: each block's exponent (INT_MIN: a zero block); the row's finiteness.
  thread_local std::vector<int> kb;
  kb.resize(size_t(nb));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 bad = _mm256_setzero_ps();
  int k0 = INT_MIN;
  for (int64_t b = 0; b < nb; ++b) {
    __m256 mx = _mm256_setzero_ps();
    for (int64_t c = b * bs; c < (b + 1) * bs; c += 8) {
      const __m256 v = _mm256_loadu_ps(x + c);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));  // NaN or ±inf
      mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    kb[size_t(b)] = amax > 0.0f ? std::ilogb(amax) - 5 : INT_MIN;  // amax / 2^k in [32, 64)
    k0 = std::max(k0, kb[size_t(b)]);
  }
  r.finite = _mm256_movemask_ps(bad) == 0;
  if (!r.finite || k0 == INT_MIN) {  // a NaN / infinity (the caller writes NaN) or a zero row: levels 0
    std::memset(lv, 0, size_t(kLevels * n_in));
    std::fill(sx, sx + nb, 0);
    std::fill(f, f + nb, 0.0f);
    r.post_a = r.post_b = 0.0f;
    return r;
  }
  // X's unit 2^(k0 − 7 (L − 1)), as two factors in range
  const int e = k0 - 7 * (kLevels - 1), ea = std::max(e, -126);
  r.post_a = pow2(std::min(ea, 127));
  r.post_b = pow2(e - ea);  // e − ea in [-126 + .., 0] for the rows F32 holds (k0 ≥ -154)
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i words = _mm256_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15, 0, 4, 1, 5, 2, 6, 3, 7, 8,
                                         12, 9, 13, 10, 14, 11, 15);  // rows16_q4_x_order within each 8 columns
  const __m256 step = _mm256_set1_ps(128.0f);
  for (int64_t c = 0; c < n_in; c += 32) {
    __m256i q[kLevels][4];
    __m256i xs = _mm256_setzero_si256();  // X of the 32 columns, summed a block below
    int32_t part[2];                      // X summed over columns c .. c + 15 and c + 16 .. c + 31
    for (int v = 0; v < 4; ++v) {
      const int k = kb[size_t((c + 8 * v) / bs)];
      __m256 z = _mm256_loadu_ps(x + c + 8 * v);
      if (k == INT_MIN) {
        z = _mm256_setzero_ps();
      } else if (k < -120) {  // 2^-k out of F32's range: in two steps (x this small is a subnormal's neighbour)
        z = _mm256_mul_ps(_mm256_mul_ps(z, _mm256_set1_ps(pow2(100))), _mm256_set1_ps(pow2(-k - 100)));
      } else {
        z = _mm256_mul_ps(z, _mm256_set1_ps(pow2(-k)));  // exact: |z| < 64
      }
      __m256i X = _mm256_setzero_si256();
      for (int l = 0; l < kLevels; ++l) {
        q[l][v] = _mm256_cvtps_epi32(z);  // nearest: |q1| ≤ 64, later levels |q| ≤ 64
        z = _mm256_mul_ps(_mm256_sub_ps(z, _mm256_cvtepi32_ps(q[l][v])), step);  // exact
        X = _mm256_add_epi32(_mm256_slli_epi32(X, 7), q[l][v]);
      }
      xs = v % 2 == 0 ? X : _mm256_add_epi32(xs, X);
      if (v % 2 == 1) {  // 16 columns' ΣX
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(xs), _mm256_extracti128_si256(xs, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        part[v / 2] = _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1)));
      }
    }
    if (bs == 16) {
      sx[c / 16] = part[0];
      sx[c / 16 + 1] = part[1];
    } else {
      sx[c / 32] = part[0] + part[1];
    }
    for (int l = 0; l < kLevels; ++l) {
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[l][0], q[l][1]), _mm256_packs_epi32(q[l][2], q[l][3]));
      const __m256i cols = _mm256_permutevar8x32_epi32(p, order);  // columns c .. c + 31 in order
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lv + l * n_in + c), _mm256_shuffle_epi8(cols, words));
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int d = kb[size_t(b)] == INT_MIN ? INT_MIN : kb[size_t(b)] - k0;
    f[b] = d < -126 ? 0.0f : pow2(d);  // a block 2^-126 below the row's largest: nothing F32 would keep
  }
  return r;
}

}  // namespace
#pragma GCC pop_options

Rows16XRow rows16_x_levels(const float* x, int64_t n_in, int64_t bs, int levels, int8_t* lv, int32_t* sx, float* f) {
  return levels == 2 ? levels_of<2>(x, n_in, bs, lv, sx, f) : levels_of<3>(x, n_in, bs, lv, sx, f);
}

const Rows16XRow* rows16_x_rows(const float* x, int64_t m, int64_t n_in, int64_t bs, int levels, bool bf16,
                                float unit) {
  const int64_t nb = n_in / bs;
  thread_local std::vector<int8_t> lv;
  thread_local std::vector<int32_t> sx;
  thread_local std::vector<float> f, xr;
  thread_local std::vector<Rows16XRow> xs;
  lv.resize(size_t(m * levels * n_in));
  sx.resize(size_t(m * nb));
  f.resize(size_t(m * nb));
  xs.resize(size_t(m));
  if (bf16) xr.resize(size_t(n_in));
  for (int64_t i = 0; i < m; ++i) {
    const float* src = x + i * n_in;
    if (bf16) {  // BF16 activations: x rounded as the reference does
      round_bf16_f32(src, n_in, xr.data());
      src = xr.data();
    }
    Rows16XRow& r = xs[size_t(i)];
    r = rows16_x_levels(src, n_in, bs, levels, lv.data() + i * levels * n_in, sx.data() + i * nb, f.data() + i * nb);
    r.post_a *= unit;
  }
  return xs.data();
}

}  // namespace tp::cpu::detail
