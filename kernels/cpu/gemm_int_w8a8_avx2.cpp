// W8A8 / W4A8 on AVX2 + FMA without VNNI (packed_kernels.h: w8a8_avx2_rows): Int8 or Int4 weights against
// x already quantized to int8 (gemm_int_w8a8.cpp quantizes it, here its AVX2 amax / quantize helpers), exact
// int32 sums a segment, then  out += (w_scale · x_scale) · float(Σ qw·qx − zero · Σ qx)  a segment, from 0, in
// segment order — the portable loop's operations, so every m and tile gives a row of x the same bits.
//   Small m (decode, m < kW8a8Avx2TileM): 4 weight rows at a time (contiguous, read once from memory with a
//     software prefetch ahead) against each row of x: vpmaddubsw on |qw| and qx · sign(qw) (pairs ≤ 2·128·127:
//     no saturation), vpmaddwd by 1 into int32; Int4 nibbles unpacked to q = u − 8 in registers.
//   Large m (prefill, batched decode): each 16 weight rows once a call into a panel interleaved 4 columns at a
//     time (an 8 × 8 dword transpose in registers; Int4 unpacked), then against 4 (or 3) x rows at a time: x's
//     4 bytes broadcast, lane l of two int32 accumulators a row of x holding weight rows l and 8 + l — the decode's
//     sign trick (vpabsb once a step, then vpsignb, vpmaddubsw, vpmaddwd by 1, vpaddd: 32 exact products in 4
//     instructions) with no horizontal sums, and the scales applied to 8 outputs at once. Zen 3, one thread,
//     SmolLM2's layers at m = 512: 58-59 GMAC/s, where the dot-product tile it replaced (4 weight rows × 2 x rows
//     of vpmaddwd on int16, a horizontal sum an output) ran 47-49. oneDNN's pre-VNNI int8 kernels saturate
//     (vpmaddubsw on u8·s8 sums), this does not.
#include <algorithm>
#include <array>
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
constexpr int kNr = 16;                 // prefill tile: weight rows (2 vectors of 8 lanes) × 3 or 4 x rows

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

// A prefill panel: kNr weight rows interleaved 4 columns at a time (make_panel below).
struct PanelIl {
  std::vector<int8_t> q;                        // [n_pad / 4][16 rows][4 columns]
  std::vector<std::array<float, kNr>> scales;   // [scale group][row]
  std::vector<std::array<int32_t, kNr>> zeros;  // [scale group][row]
  int64_t r = 0;
  int nr = 0;
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

// acc += |w| · (x · sign(w)) summed over each lane's 4 bytes, in int32: vpsignb, vpmaddubsw (pairs ≤ 2·128·127: no
// saturation), vpmaddwd by 1, vpaddd — 32 exact products in 4 instructions. One asm block, so GCC keeps the
// temporary in one register (the tile's 8 accumulators, 4 weight vectors, x and the ones take the other 15).
__attribute__((target("avx2,fma"), always_inline)) inline void sign_madd(__m256i& acc, __m256i wabs, __m256i wq,
                                                                        __m256i x, __m256i ones) {
  __m256i t;
  asm("vpsignb %[w], %[x], %[t]\n\t"
      "vpmaddubsw %[t], %[a], %[t]\n\t"
      "vpmaddwd %[o], %[t], %[t]\n\t"
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t)
      : [a] "x"(wabs), [w] "x"(wq), [x] "x"(x), [o] "x"(ones));
}

// Prefill tile: the panel's kNr weight rows (panel below) against rows [i, i + RX) of x8 (n_pad apart). Lane l
// of acc[k][v] sums row r + 8v + l against x row i + k: 4 columns a step (x's 4 bytes broadcast), no horizontal
// sums; each segment's int32 sums are folded into the outputs 8 rows at a time.
template <int RX>
__attribute__((target("avx2,fma"))) void tile_il(const Args& a, const PanelIl& p, const int8_t* x8, int64_t n_pad,
                                                 int64_t i) {
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float out[RX][kNr] = {};
  for (int64_t sg = 0; sg < a.n_seg; ++sg) {
    const int64_t q0 = sg * a.seg / 4, q1 = sg + 1 == a.n_seg ? n_pad / 4 : (sg + 1) * a.seg / 4;
    __m256i acc[RX][2];
    for (int k = 0; k < RX; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_si256();
    const int8_t* pq = p.q.data() + q0 * 64;
    const int8_t* xr = x8 + i * n_pad + 4 * q0;
    for (int64_t q = q0; q < q1; ++q, pq += 64, xr += 4) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + 32));
      const __m256i a0 = _mm256_abs_epi8(w0);
      const __m256i a1 = _mm256_abs_epi8(w1);
      for (int k = 0; k < RX; ++k) {
        const __m256i xb = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(xr + k * n_pad)));
        sign_madd(acc[k][0], a0, w0, xb, ones);
        sign_madd(acc[k][1], a1, w1, xb, ones);
      }
    }
    const int64_t g = sg * a.seg / a.wg;
    for (int k = 0; k < RX; ++k) {
      const int64_t ix = (i + k) * a.n_seg + sg;
      const __m256 xs = _mm256_set1_ps(a.xs[ix]);
      for (int v = 0; v < 2; ++v) {
        __m256i d = acc[k][v];
        if (!a.w.zeros.empty()) {
          const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.zeros[size_t(g)].data() + 8 * v));
          d = _mm256_sub_epi32(d, _mm256_mullo_epi32(z, _mm256_set1_epi32(a.xsum[ix])));
        }
        const __m256 sw = _mm256_loadu_ps(p.scales[size_t(g)].data() + 8 * v);
        // out + sw · xs · float(d), in that order (fold() above, 8 rows at once; no contraction in this file).
        float* o = out[k] + 8 * v;
        _mm256_store_ps(o,
                        _mm256_add_ps(_mm256_load_ps(o), _mm256_mul_ps(_mm256_mul_ps(sw, xs), _mm256_cvtepi32_ps(d))));
      }
    }
  }
  for (int k = 0; k < RX; ++k) std::memcpy(a.y + (i + k) * a.w.n_out + p.r, out[k], size_t(p.nr) * sizeof(float));
}

// v[0..8): 8 rows of 8 dwords (4 columns each) -> v[q] = dword q of rows 0..7 (an 8 × 8 transpose of dwords).
__attribute__((target("avx2,fma"))) inline void transpose8x8_epi32(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);      // dwords 0, 4
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // 1, 5
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // 2, 6
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // 3, 7
  }
  for (int q = 0; q < 4; ++q) {
    v[q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x20);
    v[q + 4] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x31);
  }
}

// Rows [r, r + nr) of W (nr ≤ kNr) interleaved 4 columns at a time: for each group of 4 columns 64 bytes, rows 0..7
// then 8..15, each row's 4 values (Int4 unpacked to q = u − 8); rows past nr and columns past n_in zero. 32 columns
// of 8 rows at a time by a dword transpose in registers (a byte-by-byte copy cost more than the tile at m = 4).
// With the rows' scales (and zero points) of each scale group, 16 rows in a row.
__attribute__((target("avx2,fma"))) void make_panel(const Args& a, int64_t r, int nr, int64_t n_pad, PanelIl& p) {
  const PackedWeight& w = a.w;
  const int64_t n_in = w.n_in, rb = w.row_bytes(), nq = n_pad / 4, c_full = n_in / 32 * 32;
  const bool int4 = w.format == WeightFormat::Int4;
  p.r = r, p.nr = nr;
  p.q.resize(size_t(nq * 64));
  for (int h = 0; h < 2; ++h)
    for (int64_t c = 0; c < c_full; c += 32) {
      __m256i v[8];
      for (int k = 0; k < 8; ++k) {
        const int j = 8 * h + k;
        const uint8_t* src = w.data.data() + (r + j) * rb;
        v[k] = j >= nr ? _mm256_setzero_si256()
               : int4  ? unpack_q4(src + c / 2)
                       : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c));
      }
      transpose8x8_epi32(v);
      for (int q = 0; q < 8; ++q) {
        const int64_t o = (c / 4 + q) * 64 + 32 * h;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.q.data() + o), v[q]);
      }
    }
  if (c_full < n_pad) {  // the last columns, one at a time
    std::memset(p.q.data() + c_full / 4 * 64, 0, size_t((nq - c_full / 4) * 64));
    for (int j = 0; j < nr; ++j) {
      const uint8_t* src = w.data.data() + (r + j) * rb;
      for (int64_t c = c_full; c < n_in; ++c)
        p.q[size_t((c / 4) * 64 + (j / 8) * 32 + (j % 8) * 4 + c % 4)] = int8_t(q_at(src, c, int4));
    }
  }
  const int64_t ng = a.ng;
  p.scales.resize(size_t(ng));
  p.zeros.resize(w.zeros.empty() ? 0 : size_t(ng));
  for (int64_t g = 0; g < ng; ++g) {
    for (int j = 0; j < kNr; ++j) {
      const bool in = j < nr;
      p.scales[size_t(g)][j] = in ? w.scales[size_t((r + j) * ng + g)] : 0.0f;
      if (!w.zeros.empty()) p.zeros[size_t(g)][j] = in ? int32_t(w.zeros[size_t((r + j) * ng + g)]) : 0;
    }
  }
}

static_assert(kW8a8Avx2TileM >= 6, "run_tiles splits m into tiles of 4 and 3 x rows: m = 1, 2, 5 do not split");
void run_tiles(const Args& a, int64_t r0, int64_t r1, int64_t m, const int8_t* x8, int64_t n_pad) {
  thread_local PanelIl p;
  for (int64_t r = r0; r < r1; r += kNr) {
    make_panel(a, r, int(std::min<int64_t>(kNr, r1 - r)), n_pad, p);
    // Tiles of 4 x rows, and n3 ≤ 3 of 3 where m is not a multiple of 4 (6 = 3 + 3, 7 = 4 + 3, 9 = 3 + 3 + 3: a
    // tile of 1 or 2 rows reads the panel for fewer products; m = 6 as 4 + 2 ran 12% slower than 3 + 3). Every
    // m ≥ 6 splits so (kW8a8Avx2TileM below).
    const int64_t n3 = (4 - m % 4) % 4;
    int64_t i = 0;
    for (; i + 3 * n3 < m; i += 4) tile_il<4>(a, p, x8, n_pad, i);
    for (; i < m; i += 3) tile_il<3>(a, p, x8, n_pad, i);
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
  if (n_seg > 1 && seg % 4 != 0) return false;
  // x zero-padded to whole 4-column groups where n_in is not (the panel's padding is zero too).
  const int64_t n_pad = (w.n_in + 3) / 4 * 4;
  const int8_t* x8 = xq;
  thread_local std::vector<int8_t> xpad;
  if (n_pad != w.n_in) {
    xpad.assign(size_t(m * n_pad), 0);
    for (int64_t i = 0; i < m; ++i) std::memcpy(xpad.data() + i * n_pad, xq + i * w.n_in, size_t(w.n_in));
    x8 = xpad.data();
  }
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    run_tiles(args, r0, r1, m, x8, n_pad);
  }
  return true;
}

}  // namespace tp::cpu::detail
