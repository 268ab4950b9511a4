// W4A16 / W8A16 decode on AVX2 without VNNI (packed_kernels.h: a16_avx2_levels): Int4 and Int8 weights (groups a
// multiple of 32 columns or per channel, symmetric or with zero points, no g_idx, Rows layout), n_in a multiple of 32,
// against x held as three int8 levels (gemm_a16_vnni.cpp's, made the same way), summed by vpmaddubsw.
//
// Why: the F32 kernel (gemm_a16_avx2.cpp) spends ~19 vector ops a 32-column block of an Int4 row (decode to int32,
// − zero, to F32, 4 FMAs) and ~20 a 32-byte block of an Int8 one: on a Zen 3 core SmolLM2 W4A16 decode read 5.9 GB/s
// of 13.4 (44% of the roofline, 0.78x llama.cpp's Q4_0, bench/results/decode-quant-zen3-20261202-1806.md). Here an
// Int4 block costs 9: the 16 bytes broadcast into both halves, the upper half's 64-bit lanes shifted right by 4,
// & 0x0f (32 u8 codes: the even columns, then the odd ones), then per level one vpmaddubsw (u8 code × s8 level,
// pairs summed in int16) and one vpaddw into the level's int16 sums; an Int8 block 11: the 32 bytes with the sign
// bit flipped (u = q + 128), per level a vpmaddubsw, a vpmaddwd by 1 and a vpaddd into the level's int32 sums.
//
// x, one row at a time (x_levels: as gemm_a16_vnni.cpp's): s = 2^k with max|x| / s in (T / 2, T] (T = 127 for Int4,
// 64 for Int8, whose u ≤ 255 would make 2 · 255 · 127 overflow vpmaddubsw's int16 pairs: 2 · 255 · 64 = 32640 does
// not), q1 = round(x / s), q2 = round((x / s − q1) · 2⁷), q3 = round(((x / s − q1) · 2⁷ − q2) · 2⁷), every step exact,
// |q2|, |q3| ≤ 64; X = q1 · 2¹⁴ + q2 · 2⁷ + q3 and x = s · 2⁻¹⁴ · X + e, |e| ≤ max|x| · 2⁻²¹ (Int4; Int8 2⁻²⁰). For
// Int4 each 32-column block of x is stored even columns then odd ones, the weight codes' order.
// A weight row is summed in segments. Int4: each scale group's columns, 256 at a time (the int16 sums of a level:
// |a pair| ≤ 2 · 15 · 127 = 3810, 8 blocks ≤ 30480); at a segment's end each level's int16 sums go to int32 lanes
// (vpmaddwd by 1: lane L holds the block bytes 4L..4L + 3), A = (A1 · 2⁷ + A2) · 2⁷ + A3, minus (8 + z) · ΣX (ΣX: the
// lane's columns of X over the segment, made once a row of x) — exact in wrapping int32, since the result is
// Σ (u − 8 − z) · X over ≤ 32 columns a lane, |·| ≤ 32 · 15 · (127 · 2¹⁴ + 64 · 2⁷ + 64) < 2³¹ — to F32. Int8: each
// group (the whole row per channel); per level Bk = Ak − (128 + z) · Σ qk (exact int32: |Bk| ≤ columns / 8 · 255 · 64
// a lane), F = (B1 · 2⁷ + B2) · 2⁷ + B3 in F32 (gemm_a16_vnni.cpp's channel sum). Either × the group's scale into the
// row's total (one FMA); y = the total's lane sum × s · 2⁻¹⁴. A zero row of x gives 0, a row with a NaN or an
// infinity NaN. Every row of x gets the same operations whatever m, the weight rows beside it or the threads: a
// row of a batch has the bits it has alone. Weight rows kRw a pass, software-prefetched ahead; with m > 1 the pass
// runs once a row of x (the weight rows then from L1).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

// The kernel's helpers are compiled for AVX2 + FMA as a region (lambdas do not take a function's target
// attribute); the entry below, outside it, checks the CPU first.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace {

enum class Codes { Int4, Int8 };

constexpr int kRw = 2;                    // weight rows a pass (3 sums each, with the levels' loads: 16 ymm)
constexpr int64_t kPrefetchBytes = 2048;  // how far ahead of the pass W is prefetched
// Columns of a segment at most: Int4 the int16 sums' bound above; Int8 a whole group.
template <Codes C>
constexpr int64_t kSegCols = C == Codes::Int4 ? 256 : int64_t(1) << 40;
// The u8 codes' offset (value = u − o − z) and the weight bytes of a 32-column block.
template <Codes C>
constexpr int kOffset = C == Codes::Int4 ? 8 : 128;
template <Codes C>
constexpr int64_t kBlockBytes = C == Codes::Int4 ? 16 : 32;

// One row of x as levels: q[3][n_in] (Int4: each 32-column block's even columns then its odd ones), sx: per
// segment 8 int32 lanes of ΣX (Int4) or 3 × 8 of Σ q1, Σ q2, Σ q3 (Int8), and y's factor s · 2⁻¹⁴ (0: a zero row;
// NaN: a row with a NaN or an infinity).
struct XLevels {
  const int8_t* q[3];
  const int32_t* sx;
  float scale;
};

// 32 F32 (4 vectors, rounded integers) -> 32 int8 in order.
inline __m256i pack32(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256i ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
  const __m256i cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The segments of a row: each group [g · gs, (g + 1) · gs), seg columns at a time. f(c0, c1, g) for each.
template <class F>
inline void for_segments(int64_t n_in, int64_t gs, int64_t seg, F&& f) {
  for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs)
    for (int64_t s = c0; s < std::min(n_in, c0 + gs); s += seg) f(s, std::min({n_in, c0 + gs, s + seg}), g);
}

inline int64_t segments_of(int64_t n_in, int64_t gs, int64_t seg) {
  int64_t n = 0;
  for_segments(n_in, gs, seg, [&](int64_t, int64_t, int64_t) { ++n; });
  return n;
}
// int32 values of ΣX a segment: 8 lanes (Int4), 3 levels × 8 lanes (Int8).
template <Codes C>
constexpr int64_t kSxPerSeg = C == Codes::Int4 ? 8 : 24;

// x row (n_in a multiple of 32) -> its levels into q (3 · n_in; xd [n_in]: scratch for x reordered, Int4; null: in
// column order), ΣX a
// segment (gs: the weight's columns a group) into sx (kSxPerSeg a segment); returns s · 2⁻¹⁴ (0 for a zero row, NaN
// for a row with a NaN or an infinity; the levels and ΣX are then all 0).
template <Codes C>
float x_levels(const float* x, int64_t n_in, int64_t gs, float* xd, int8_t* q, int32_t* sx) {
  if (C == Codes::Int4 && xd != nullptr) {  // (xd null: columns in order, for a16_x_levels_in_order)
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // within 8: even lanes, then odd ones
    for (int64_t c = 0; c < n_in; c += 32) {
      __m256 v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + c + 8 * k), even);
      // v[k] = [4 even, 4 odd] of columns c + 8k ..; evens of the block: v0 lo, v1 lo, v2 lo, v3 lo.
      _mm256_storeu_ps(xd + c, _mm256_permute2f128_ps(v[0], v[1], 0x20));
      _mm256_storeu_ps(xd + c + 8, _mm256_permute2f128_ps(v[2], v[3], 0x20));
      _mm256_storeu_ps(xd + c + 16, _mm256_permute2f128_ps(v[0], v[1], 0x31));
      _mm256_storeu_ps(xd + c + 24, _mm256_permute2f128_ps(v[2], v[3], 0x31));
    }
    x = xd;
  }
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx = _mm256_setzero_ps();
  int unordered = 0;
  for (int64_t c = 0; c < n_in; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
    unordered |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  const float amax = *std::max_element(lanes, lanes + 8);
  const bool finite = unordered == 0 && std::isfinite(amax);
  const int64_t n_seg = segments_of(n_in, gs, kSegCols<C>);
  if (!finite || amax < 0x1p-100f) {
    std::memset(q, 0, size_t(3 * n_in));
    std::memset(sx, 0, size_t(kSxPerSeg<C> * n_seg) * sizeof(int32_t));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  constexpr float kTop = C == Codes::Int4 ? 127.0f : 64.0f;
  int k = std::ilogb(amax) - (C == Codes::Int4 ? 6 : 5);  // amax / 2^k in [64, 128) (Int8: [32, 64))
  if (std::ldexp(amax, -k) > kTop) ++k;
  const __m256 inv = _mm256_set1_ps(std::ldexp(1.0f, -k)), f7 = _mm256_set1_ps(128.0f);
  int8_t* q1 = q;
  int8_t* q2 = q + n_in;
  int8_t* q3 = q + 2 * n_in;
  for (int64_t c = 0; c < n_in; c += 32) {
    __m256 r1[4], r2[4], r3[4];
    for (int h = 0; h < 4; ++h) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * h), inv);
      r1[h] = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256 v2 = _mm256_mul_ps(_mm256_sub_ps(v, r1[h]), f7);
      r2[h] = _mm256_round_ps(v2, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r3[h] = _mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(v2, r2[h]), f7), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q1 + c), pack32(r1[0], r1[1], r1[2], r1[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q2 + c), pack32(r2[0], r2[1], r2[2], r2[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q3 + c), pack32(r3[0], r3[1], r3[2], r3[3]));
  }
  // The levels' lane sums a segment: the kernel's own sums with every code 1.
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const auto lane_sums = [&](const int8_t* p) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), ones16);
  };
  int32_t* out = sx;
  for_segments(n_in, gs, kSegCols<C>, [&](int64_t c0, int64_t c1, int64_t) {
    __m256i a1 = _mm256_setzero_si256(), a2 = a1, a3 = a1;
    for (int64_t c = c0; c < c1; c += 32) {
      a1 = _mm256_add_epi32(a1, lane_sums(q1 + c));
      a2 = _mm256_add_epi32(a2, lane_sums(q2 + c));
      a3 = _mm256_add_epi32(a3, lane_sums(q3 + c));
    }
    if constexpr (C == Codes::Int4) {  // ΣX
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                          _mm256_add_epi32(_mm256_slli_epi32(_mm256_add_epi32(_mm256_slli_epi32(a1, 7), a2), 7), a3));
    } else {  // each level's
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), a1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), a2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), a3);
    }
    out += kSxPerSeg<C>;
  });
  return std::ldexp(1.0f, k - 14);
}

// The 32 u8 codes of columns [c, c + 32) of a row: Int4 the even columns, then the odd ones; Int8 in column order,
// q + 128.
template <Codes C>
__attribute__((always_inline)) inline __m256i codes(const uint8_t* row, int64_t c) {
  if constexpr (C == Codes::Int8) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)), _mm256_set1_epi8(char(0x80)));
  } else {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
  }
}

// Rows [r, r + RW) against one row of x's levels: y[j] for j < RW.
template <Codes C, int RW, bool kZeros>
void rows(const PackedWeight& w, int64_t ng, int64_t gs, int64_t r, const XLevels& xl, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const float* sc = w.scales.data() + r * ng;
  const int8_t* zp = kZeros ? w.zeros.data() + r * ng : nullptr;
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 total[RW];
  for (int j = 0; j < RW; ++j) total[j] = _mm256_setzero_ps();
  const int32_t* sx = xl.sx;
  for_segments(n_in, gs, kSegCols<C>, [&](int64_t c0, int64_t c1, int64_t g) {
    __m256i a[RW][3];  // Int4: int16 sums; Int8: int32 sums
    for (int j = 0; j < RW; ++j) a[j][0] = a[j][1] = a[j][2] = _mm256_setzero_si256();
    for (int64_t c = c0; c < c1; c += 32) {
      if (prefetch) {
        for (int64_t b = 0; b < RW * kBlockBytes<C>; b += 64) _mm_prefetch(pf + b, _MM_HINT_T0);
        pf += RW * kBlockBytes<C>;
      }
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl.q[0] + c));
      const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl.q[1] + c));
      const __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl.q[2] + c));
#pragma GCC unroll 4
      for (int j = 0; j < RW; ++j) {
        const __m256i u = codes<C>(row0 + j * rb, c);
        if constexpr (C == Codes::Int4) {
          a[j][0] = _mm256_add_epi16(a[j][0], _mm256_maddubs_epi16(u, x1));
          a[j][1] = _mm256_add_epi16(a[j][1], _mm256_maddubs_epi16(u, x2));
          a[j][2] = _mm256_add_epi16(a[j][2], _mm256_maddubs_epi16(u, x3));
        } else {
          a[j][0] = _mm256_add_epi32(a[j][0], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x1), ones16));
          a[j][1] = _mm256_add_epi32(a[j][1], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x2), ones16));
          a[j][2] = _mm256_add_epi32(a[j][2], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x3), ones16));
        }
      }
    }
    if constexpr (C == Codes::Int4) {
      const __m256i sxv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx));
      const __m256i corr8 = _mm256_slli_epi32(sxv, 3);  // 8 · ΣX (symmetric weights: no multiply a row)
      const __m256i p14 = _mm256_set1_epi16(1 << 14), p7 = _mm256_set1_epi16(1 << 7);
#pragma GCC unroll 4
      for (int j = 0; j < RW; ++j) {
        // (A1 · 2⁷ + A2) · 2⁷ + A3 by vpmaddwd with the powers: the int16 pair sums × 2¹⁴, × 2⁷, × 1 (wrapping)
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(a[j][0], p14), _mm256_madd_epi16(a[j][1], p7)),
                                           _mm256_madd_epi16(a[j][2], ones16));
        const __m256i d = _mm256_sub_epi32(
            s, kZeros ? _mm256_mullo_epi32(sxv, _mm256_set1_epi32(8 + int32_t(zp[j * ng + g]))) : corr8);
        total[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sc[j * ng + g]), total[j]);
      }
    } else {
      const __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx));
      const __m256i s2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx + 8));
      const __m256i s3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sx + 16));
      const __m256 f7 = _mm256_set1_ps(128.0f);
#pragma GCC unroll 4
      for (int j = 0; j < RW; ++j) {
        const __m256i o = _mm256_set1_epi32(128 + (kZeros ? int32_t(zp[j * ng + g]) : 0));
        const __m256 b1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(a[j][0], _mm256_mullo_epi32(o, s1)));
        const __m256 b2 = _mm256_cvtepi32_ps(_mm256_sub_epi32(a[j][1], _mm256_mullo_epi32(o, s2)));
        const __m256 b3 = _mm256_cvtepi32_ps(_mm256_sub_epi32(a[j][2], _mm256_mullo_epi32(o, s3)));
        const __m256 f = _mm256_fmadd_ps(_mm256_fmadd_ps(b1, f7, b2), f7, b3);
        total[j] = _mm256_fmadd_ps(f, _mm256_set1_ps(sc[j * ng + g]), total[j]);
      }
    }
    sx += kSxPerSeg<C>;
  });
  for (int j = 0; j < RW; ++j) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(total[j]), _mm256_extractf128_ps(total[j], 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    y[j] = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1))) * xl.scale;
  }
}

template <Codes C, bool kZeros>
void run(const PackedWeight& w, int64_t ng, int64_t gs, const std::vector<XLevels>& xs, float* y, int n_threads) {
  const int64_t m = int64_t(xs.size());
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    int64_t r = r0;
    for (; r + kRw <= r1; r += kRw)
      for (int64_t i = 0; i < m; ++i) rows<C, kRw, kZeros>(w, ng, gs, r, xs[size_t(i)], y + i * w.n_out + r, i == 0);
    for (; r < r1; ++r)
      for (int64_t i = 0; i < m; ++i) rows<C, 1, kZeros>(w, ng, gs, r, xs[size_t(i)], y + i * w.n_out + r, false);
  }
}

// The levels of x's m rows, then the weight's rows against each.
template <Codes C>
void levels_linear(const float* x, int64_t m, const PackedWeight& w, int64_t ng, int64_t gs, float* y, int n_threads) {
  const int64_t n_in = w.n_in, per_row = kSxPerSeg<C> * segments_of(n_in, gs, kSegCols<C>);
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> sx;
  thread_local std::vector<float> xd;
  thread_local std::vector<XLevels> xs;
  q.resize(size_t(m * 3 * n_in));
  sx.resize(size_t(m * per_row));
  xd.resize(size_t(n_in));
  xs.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    int8_t* qi = q.data() + i * 3 * n_in;
    int32_t* si = sx.data() + i * per_row;
    XLevels& l = xs[size_t(i)];
    l.scale = x_levels<C>(x + i * n_in, n_in, gs, xd.data(), qi, si);
    l.q[0] = qi, l.q[1] = qi + n_in, l.q[2] = qi + 2 * n_in, l.sx = si;
  }
  if (w.zeros.empty()) run<C, false>(w, ng, gs, xs, y, n_threads);
  else run<C, true>(w, ng, gs, xs, y, n_threads);
}

}  // namespace

float a16_x_levels_in_order(const float* x, int64_t n_in, int8_t* q) {
  thread_local std::vector<int32_t> sx;  // the lane sums the Rows kernel reads; not wanted here
  sx.resize(size_t(kSxPerSeg<Codes::Int4> * segments_of(n_in, n_in, kSegCols<Codes::Int4>)));
  return x_levels<Codes::Int4>(x, n_in, n_in, nullptr, q, sx.data());
}
#pragma GCC pop_options

bool a16_avx2_levels(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Int4 && w.format != WeightFormat::Int8) || w.act != ActQuant::None ||
      !w.g_idx.empty() || w.n_in % 32 != 0 || m >= kA16Avx2LevelsMaxM || w.rows_layout != RowsLayout::Rows ||
      !cpu_has_avx2())
    return false;
  const int64_t ng = w.n_groups(), gs = ng > 1 ? w.group_size : w.n_in;
  if (gs % 32 != 0) return false;
  if (w.format == WeightFormat::Int4) levels_linear<Codes::Int4>(x, m, w, ng, gs, y, n_threads);
  else levels_linear<Codes::Int8>(x, m, w, ng, gs, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
