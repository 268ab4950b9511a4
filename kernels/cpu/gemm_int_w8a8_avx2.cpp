// W8A8 / W4A8 on AVX2 + FMA without VNNI (packed_kernels.h: w8a8_avx2_rows): Int8 or Int4 weights against
// x already quantized to int8 (gemm_int_w8a8.cpp quantizes it, here its AVX2 amax / quantize helpers), exact
// int32 sums a segment, then  out += (w_scale · x_scale) · float(Σ qw·qx − zero · Σ qx)  a segment, from 0, in
// segment order — the portable loop's operations, so every m and tile gives a row of x the same bits.
//   Small m (decode, m < kW8a8Avx2TileM): 4 weight rows at a time (contiguous, read once from memory with a
//     software prefetch ahead) against each row of x: vpmaddubsw on |qw| and qx · sign(qw) (pairs ≤ 2·128·127:
//     no saturation), vpmaddwd by 1 into int32; Int4 nibbles unpacked to q = u − 8 in registers.
//   Large m (prefill): x sign-extended to int16 once a call ([m, n_pad], zero-padded to 16 columns) and each
//     block of 4 weight rows once a chunk of x rows into an L1 panel of int16; the tile 4 weight rows × 2 x rows
//     keeps 8 int32 accumulators in registers, vpmaddwd (2 exact products a lane) + vpaddd — oneDNN's pre-VNNI
//     int8 kernels saturate (vpmaddubsw on u8·s8 sums), this does not. x rows are taken kChunkM at a time so
//     their int16 copy stays in L2 while every weight block of the thread passes over it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

constexpr int kRw = 4;                  // weight rows a block
constexpr int64_t kPrefetchBytes = 4096;  // decode: how far ahead of the block being read W is prefetched
constexpr int64_t kChunkM = 48;         // prefill: rows of x a pass over the thread's weight blocks
constexpr int kPrw = 4, kPrx = 2;  // prefill tile: weight rows × x rows (3 × 3 measured alike; 4 × 3, 2 × 4 slower)

// The fold of one segment, written once (no contraction: -ffp-contract=off for this file).
inline float fold(float out, float sw, float xs, int32_t d) { return out + sw * xs * float(d); }

__attribute__((target("avx2,fma"))) inline __m256i unpack_q4(const uint8_t* w) {  // 32 nibbles -> q = u - 8
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i m = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), eight);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);
  return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

inline int q_at(const uint8_t* row, int64_t c, bool int4) {
  return int4 ? int((row[c / 2] >> (4 * (c % 2))) & 15) - 8 : int(int8_t(row[c]));
}

// The 4 int32 lane sums of a0..a3 as one vector [Σa0, Σa1, Σa2, Σa3].
__attribute__((target("avx2,fma"))) inline __m128i hsum4(__m256i a0, __m256i a1, __m256i a2, __m256i a3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

__attribute__((target("avx2,fma"))) inline int32_t hsum1(__m256i a) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

struct Args {
  const PackedWeight& w;
  int64_t seg, n_seg, wg, ng;
  const int8_t* xq;
  const float* xs;
  const int32_t* xsum;
  float* y;
};

// Decode: weight rows [r, r + RW) against row i of x.
template <int RW, bool INT4>
__attribute__((target("avx2,fma"))) void rows_small(const Args& a, int64_t r, int64_t i, bool prefetch) {
  const PackedWeight& w = a.w;
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const int8_t* xq = a.xq + i * n_in;
  const __m256i ones = _mm256_set1_epi16(1);
  constexpr int64_t kStep = INT4 ? 16 : 32;  // weight bytes a row a 32-column step
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  float out[RW] = {};
  for (int64_t sg = 0; sg < a.n_seg; ++sg) {
    const int64_t c0 = sg * a.seg, c1 = std::min(n_in, c0 + a.seg), g = c0 / a.wg;
    __m256i acc[RW];
    for (int j = 0; j < RW; ++j) acc[j] = _mm256_setzero_si256();
    int64_t c = c0;
    for (; c + 32 <= c1; c += 32) {
      if (prefetch) {
        for (int64_t k = 0; k < RW * kStep; k += 64) _mm_prefetch(pf + k, _MM_HINT_T0);
        pf += RW * kStep;
      }
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c));
      for (int j = 0; j < RW; ++j) {
        const uint8_t* p = row0 + j * rb;
        const __m256i wv = INT4 ? unpack_q4(p + c / 2) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
        acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p16, ones));
      }
    }
    int32_t d[RW];
    if constexpr (RW == 4) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d), hsum4(acc[0], acc[1], acc[2], acc[3]));
    } else {
      for (int j = 0; j < RW; ++j) d[j] = hsum1(acc[j]);
    }
    for (int j = 0; j < RW; ++j) {
      const uint8_t* p = row0 + j * rb;
      for (int64_t k = c; k < c1; ++k) d[j] += q_at(p, k, INT4) * int32_t(xq[k]);
      const int64_t rg = (r + j) * a.ng + g;
      if (!w.zeros.empty()) d[j] -= int32_t(w.zeros[size_t(rg)]) * a.xsum[i * a.n_seg + sg];
      out[j] = fold(out[j], w.scales[size_t(rg)], a.xs[i * a.n_seg + sg], d[j]);
    }
  }
  for (int j = 0; j < RW; ++j) a.y[i * w.n_out + r + j] = out[j];
}

template <bool INT4>
void run_small(const Args& a, int64_t r0, int64_t r1, int64_t m) {
  int64_t r = r0;
  for (; r + kRw <= r1; r += kRw)
    for (int64_t i = 0; i < m; ++i) rows_small<kRw, INT4>(a, r, i, i == 0);
  for (; r < r1; ++r)
    for (int64_t i = 0; i < m; ++i) rows_small<1, INT4>(a, r, i, false);
}

// acc += vpmaddwd(w, x), as one madd and its add: GCC otherwise issued a tile's 8 madds into 8 fresh registers
// and copied each sum back to its accumulator (8 vmovdqa a step; the 4 x 2 tile has no registers to spare).
__attribute__((target("avx2,fma"), always_inline)) inline void madd_add(__m256i& acc, __m256i w, __m256i x) {
  __m256i t;
  asm("vpmaddwd %[x], %[w], %[t]\n\tvpaddd %[t], %[acc], %[acc]" : [acc] "+x"(acc), [t] "=&x"(t) : [w] "x"(w), [x] "x"(x));
}

// Prefill: rows [0, RW) of the int16 panel (n_pad apart) against rows [i, i + RX) of x16.
template <int RW, int RX>
__attribute__((target("avx2,fma"))) void tile16(const Args& a, const int16_t* panel, int64_t r, const int16_t* x16,
                                                int64_t n_pad, int64_t i) {
  const PackedWeight& w = a.w;
  float out[RX][RW] = {};
  for (int64_t sg = 0; sg < a.n_seg; ++sg) {
    const int64_t c0 = sg * a.seg, c1 = sg + 1 == a.n_seg ? n_pad : c0 + a.seg, g = c0 / a.wg;
    __m256i acc[RX][RW];
    for (int k = 0; k < RX; ++k)
      for (int j = 0; j < RW; ++j) acc[k][j] = _mm256_setzero_si256();
    for (int64_t c = c0; c < c1; c += 16) {
      __m256i xv[RX];
      for (int k = 0; k < RX; ++k) xv[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + (i + k) * n_pad + c));
      for (int j = 0; j < RW; ++j) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + j * n_pad + c));
        for (int k = 0; k < RX; ++k) madd_add(acc[k][j], wv, xv[k]);
      }
    }
    for (int k = 0; k < RX; ++k) {
      int32_t d[RW];
      if constexpr (RW == 4) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d), hsum4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]));
      } else if constexpr (RW == 3) {
        int32_t d4[4];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d4), hsum4(acc[k][0], acc[k][1], acc[k][2], _mm256_setzero_si256()));
        for (int j = 0; j < RW; ++j) d[j] = d4[j];
      } else {
        for (int j = 0; j < RW; ++j) d[j] = hsum1(acc[k][j]);
      }
      const int64_t ix = (i + k) * a.n_seg + sg;
      for (int j = 0; j < RW; ++j) {
        const int64_t rg = (r + j) * a.ng + g;
        if (!w.zeros.empty()) d[j] -= int32_t(w.zeros[size_t(rg)]) * a.xsum[ix];
        out[k][j] = fold(out[k][j], w.scales[size_t(rg)], a.xs[ix], d[j]);
      }
    }
  }
  for (int k = 0; k < RX; ++k)
    for (int j = 0; j < RW; ++j) a.y[(i + k) * w.n_out + r + j] = out[k][j];
}

// Rows [r, r + rw) of W as int16 [rw, n_pad] (zero-padded).
__attribute__((target("avx2,fma"))) void make_panel(const PackedWeight& w, int64_t r, int rw, int64_t n_pad,
                                                    int16_t* panel) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const bool int4 = w.format == WeightFormat::Int4;
  for (int j = 0; j < rw; ++j) {
    const uint8_t* p = w.data.data() + (r + j) * rb;
    int16_t* o = panel + j * n_pad;
    int64_t c = 0;
    for (; c + 32 <= n_in; c += 32) {
      const __m256i q = int4 ? unpack_q4(p + c / 2) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c + 16), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
    }
    for (; c < n_in; ++c) o[c] = int16_t(q_at(p, c, int4));
    for (; c < n_pad; ++c) o[c] = 0;
  }
}

template <int RW>
void panel_rows(const Args& a, const int16_t* panel, int64_t r, const int16_t* x16, int64_t n_pad, int64_t i0,
                int64_t i1) {
  int64_t i = i0;
  for (; i + kPrx <= i1; i += kPrx) tile16<RW, kPrx>(a, panel, r, x16, n_pad, i);
  for (; i < i1; ++i) tile16<RW, 1>(a, panel, r, x16, n_pad, i);
}

void run_tiles(const Args& a, int64_t r0, int64_t r1, int64_t m, const int16_t* x16, int64_t n_pad) {
  thread_local std::vector<int16_t> panel;
  panel.resize(size_t(kPrw * n_pad));
  for (int64_t i0 = 0; i0 < m; i0 += kChunkM) {
    const int64_t i1 = std::min(m, i0 + kChunkM);
    int64_t r = r0;
    for (; r + kPrw <= r1; r += kPrw) {
      make_panel(a.w, r, kPrw, n_pad, panel.data());
      panel_rows<kPrw>(a, panel.data(), r, x16, n_pad, i0, i1);
    }
    for (; r < r1; ++r) {
      make_panel(a.w, r, 1, n_pad, panel.data());
      panel_rows<1>(a, panel.data(), r, x16, n_pad, i0, i1);
    }
  }
}

}  // namespace

__attribute__((target("avx2,fma"))) float amax_avx2(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 a = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) a = _mm256_max_ps(a, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + c)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  float r = _mm_cvtss_f32(s);
  for (; c < n; ++c) r = std::max(r, std::fabs(x[c]));
  return r;
}

__attribute__((target("avx2,fma"))) void quantize_avx2(const float* x, int64_t n, float s, int8_t* q) {
  if (s == 0.0f) {
    std::memset(q, 0, size_t(n));
    return;
  }
  const __m256 sv = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const bool fast = std::fabs(s) >= kQuotientMinScale && std::fabs(s) <= kQuotientMaxScale;
  const __m256 rv = _mm256_set1_ps(1.0f / s), inf = _mm256_set1_ps(INFINITY), sign = _mm256_set1_ps(-0.0f);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    __m256 d;
    if (fast) {  // x / s exactly, without a division (packed_kernels.h: kQuotientMinScale)
      const __m256 q = _mm256_mul_ps(xv, rv);
      const __m256 q1 = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, sv, xv), rv, q);
      d = _mm256_blendv_ps(q, q1, _mm256_cmp_ps(_mm256_andnot_ps(sign, q), inf, _CMP_LT_OQ));
    } else {
      d = _mm256_div_ps(xv, sv);
    }
    __m256 v = _mm256_round_ps(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i i32 = _mm256_cvtps_epi32(v);
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + c), _mm_packs_epi16(i16, i16));
  }
  for (; c < n; ++c) q[c] = int8_t(std::clamp(std::nearbyint(x[c] / s), -127.0f, 127.0f));
}

bool w8a8_avx2_rows(const PackedWeight& w, int64_t m, const int8_t* xq, const float* xs, const int32_t* xsum,
                    int64_t seg, int64_t n_seg, int64_t wg, float* y, int n_threads) {
  const bool int4 = w.format == WeightFormat::Int4;
  // wg: columns a weight group (n_in per channel); ng: scale groups a row (per channel: 1).
  const Args args{w, seg, n_seg, wg, w.n_groups(), xq, xs, xsum, y};
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
  if (m < kW8a8Avx2TileM) {
#pragma omp parallel num_threads(n_threads) if (parallel)
    {
      const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
      if (int4)
        run_small<true>(args, r0, r1, m);
      else
        run_small<false>(args, r0, r1, m);
    }
    return true;
  }
  if (n_seg > 1 && seg % 16 != 0) return false;
  const int64_t n_pad = (w.n_in + 15) / 16 * 16;
  thread_local std::vector<int16_t> x16;
  x16.resize(size_t(m * n_pad));
  for (int64_t i = 0; i < m; ++i) {
    int64_t c = 0;
    for (; c < w.n_in; ++c) x16[size_t(i * n_pad + c)] = xq[i * w.n_in + c];
    for (; c < n_pad; ++c) x16[size_t(i * n_pad + c)] = 0;
  }
  const int16_t* xd = x16.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    run_tiles(args, r0, r1, m, xd, n_pad);
  }
  return true;
}

}  // namespace tp::cpu::detail
