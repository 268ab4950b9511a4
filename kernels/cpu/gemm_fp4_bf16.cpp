// MXFP4 / NVFP4 decode on AVX-512 BF16 (packed_kernels.h: fp4_bf16_decode): the e2m1 values (exact in BF16)
// against x held as two BF16 parts (x ≈ bf16(x) + bf16(x − bf16(x)), 16 significant bits, as gemm_int4_bf16.cpp)
// or, with w.act_bf16, as one; vdpbf16ps with F32 sums, × the block scales in F32, NVFP4's global scale after.
//
// A row is walked in groups of 128 columns (64 bytes): read as 32 16-bit words, word l holds the four nibbles of
// columns c + 4l .. c + 4l + 3. The word vector shifted right by 0, 4, 8 and 12 bits gives in each lane's low 5
// bits nibble n (bit 4 is the next nibble's); vpermw looks it up in a 32-entry table of the e2m1 values (code &
// 15), so a group is 3 shifts, 4 vpermw and 4 vdpbf16ps (P = 1) in one chain against x laid out once a call in the
// same order (layout_x). F32 lane k of the chain sums columns c + 8k .. c + 8k + 7, all in one block of 16 or 32
// columns: the group's sum is × one vector of the lanes' block scales (a vpermps of the pass's F32 scales,
// fp4_scales.h) into the row's total; y = the lane sum × post. A row whose length is 64 mod 128 ends in a group of 64
// columns decoded as two vectors (32 bytes broadcast to both halves, shifted 0 | 4 and 8 | 12). The previous walk
// (64 columns a step: 2 variable shifts, 2 vpermw, 2 vdpbf16ps, a scale permute and an FMA) ran at 26 / 28 / 34 GB/s
// from cache for 576x576 / 1536x576 / 576x1536 NVFP4 with BF16 x on Zen 5 (2026-12-04, GEMM_BENCH_HOT=1
// gemm_gguf_bench 1 43 16 nvfp4+x16); this one at 32 / 33 / 42. The block scales' E4M3 conversion costs ~15% of a pass
// of 576-column rows.
// kRows weight rows a pass share each group's x loads (their sums reduced 4 at a time, reduce_add4.h); with m > 1
// each decoded group of a weight row serves kTileM rows of x (the pass's weight rows from L1 after the first tile),
// with the operations of that row alone: a row of a batch has the bits it has alone.
// The block scales (w.scale_bytes, apart from the rows) are prefetched as many rows ahead as the rows: from DRAM
// (gemm_gguf_bench 1 41 0 nvfp4+x16, Zen 5) 576x576 NVFP4 took 10.3 us without it, 8.0 with (6.0 from cache).
#include <algorithm>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/bf16_parts.h"
#include "kernels/cpu/fp4_scales.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/reduce_add4.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2,f16c")))

constexpr int64_t kPrefetchBytes = 8192;  // as gemm_int4_bf16.cpp
// Weight rows a pass. With the 64-column step 8 ran 576-column rows 4-6% faster than 4 from cache on Zen 5 but
// the model no faster from DRAM; with the 128-column step (2026-12-04, `decode_bench --model ct-nvfp4|ct-mxfp4
// --threads 1 --pp 16 --tg 64 --reps 3`, alternated 6 times) NVFP4 tg64 238-264 (5 of 6 above 251) vs 239-254,
// MXFP4 249-271 vs 233-265 tok/s; from cache 576x576 / 1536x576 / 576x1536 5.9-6.0 / 15.0-15.4 / 11.8-12.2 µs vs
// 6.2-6.5 / 15.8-16.5 / 12.0-12.9 (2 rows: 9.3-9.5 / 24.4-24.6 / 15.0): 8.
constexpr int kRows = 8;
constexpr int kTileM = 4;  // m > 1: rows of x sharing each decoded group (row_xtile)
// BF16 values of x a 128-column group: vector n = 0..3 (x(c + 4l + n), lane l < 32) as its P parts (P = 2: x ≈
// part 0 + part 1; P = 1: x exact in BF16, w.act_bf16, so part 1 would be 0).
template <int P>
constexpr int64_t kGroupX = 4 * P * 32;

// 16 lanes: x(c0 + 4l + n), l < 16, from the 64 values v[0..3] at c0.
TP_BF16 __attribute__((always_inline)) inline __m512 strided(const __m512* v, int n) {
  const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0),
                                        _mm512_set1_epi32(n));
  return _mm512_shuffle_f32x4(_mm512_permutex2var_ps(v[0], idx, v[1]), _mm512_permutex2var_ps(v[2], idx, v[3]), 0x44);
}

// One row of x (n_in a multiple of 64) -> xq[ceil(n_in / 128) · kGroupX<P>], 32-lane vectors as P parts each (part
// p of vector s at (s · P + p) · 32). A group of 128 columns at c: vector n < 4, lane l = x(c + 4l + n). A last
// group of 64 columns: vector 0 = [x(c + 4l), l < 16 | x(c + 4l + 1)], vector 1 = [x(c + 4l + 2) | x(c + 4l + 3)].
template <int P>
TP_BF16 void layout_x(const float* x, int64_t n_in, uint16_t* xq) {
  // Vector s's parts from its two 16-lane halves a (lanes 0-15) and b.
  const auto store = [&](uint16_t* at, int s, __m512 a, __m512 b) TP_BF16 {
    __m256i pa[2], pb[2];
    bf16_parts(a, pa[0], pa[1]);
    bf16_parts(b, pb[0], pb[1]);
    for (int part = 0; part < P; ++part) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (s * P + part) * 32), pa[part]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (s * P + part) * 32 + 16), pb[part]);
    }
  };
  for (int64_t c = 0; c < n_in; c += 128, xq += kGroupX<P>) {
    __m512 v[8];
    for (int q = 0; q < 4; ++q) v[q] = _mm512_loadu_ps(x + c + 16 * q);
    if (n_in - c < 128) {
      store(xq, 0, strided(v, 0), strided(v, 1));
      store(xq, 1, strided(v, 2), strided(v, 3));
      continue;
    }
    for (int q = 4; q < 8; ++q) v[q] = _mm512_loadu_ps(x + c + 16 * q);
    for (int n = 0; n < 4; ++n) store(xq, n, strided(v, n), strided(v + 4, n));
  }
}

// 32 BF16 lanes: the e2m1 value of code j & 15 (0, 0.5, 1, 1.5, 2, 3, 4, 6, then their negatives; code 8 is −0).
TP_BF16 inline __m512i e2m1_table() {
  const __m512 v = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
  return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

// Vectors a group decodes to: 4 (128 columns), 2 (Half: a last group of 64).
template <bool Half>
constexpr int kVectors = Half ? 2 : 4;

// A group's bytes at p: word l holds the nibbles of columns c + 4l .. c + 4l + 3, and vpermw takes an index's low 5
// bits (bit 4 is the next nibble's; the table repeats). 128 columns: w[n] = nibble n of the 32 words. Half (32
// bytes, broadcast to both halves, their 16-bit lanes shifted by 0 | 4 and 8 | 12): w[0] = nibbles 0 | 1, w[1] =
// nibbles 2 | 3 of the 16 words. As layout_x lays x out.
template <bool Half>
TP_BF16 __attribute__((always_inline)) inline void decode_group(const uint8_t* p, __m512i table, __m512bh (&w)[4]) {
  if constexpr (Half) {
    const __m512i sa = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004,
                                         0x40004, 0x40004, 0x40004);
    const __m512i sb = _mm512_add_epi16(sa, _mm512_set1_epi16(8));
    const __m512i wb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    w[0] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srlv_epi16(wb, sa), table);
    w[1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srlv_epi16(wb, sb), table);
  } else {
    const __m512i wb = _mm512_loadu_si512(p);
    w[0] = (__m512bh)_mm512_permutexvar_epi16(wb, table);
    w[1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 4), table);
    w[2] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 8), table);
    w[3] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 12), table);
  }
}

// The group at column c's lane block scales from a row's F32 block scales fs. 128 columns: F32 lane k of the
// products sums columns c + 8k .. c + 8k + 7, in NVFP4's block k / 2 and MXFP4's k / 4. Half: lane k sums columns
// c + 8(k mod 8) + {0, 2, 4, 6} (k < 8) or {1, 3, 5, 7}, in block (k mod 8) / 2 or (k mod 8) / 4.
template <bool Half>
TP_BF16 __attribute__((always_inline)) inline __m512 lane_scales(const float* fs, int64_t c, bool mx) {
  if constexpr (Half) {
    if (mx) {
      const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(fs + c / 32)));
      return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                                   _mm512_castps128_ps512(two));
    }
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3),
                                 _mm512_castps128_ps512(_mm_loadu_ps(fs + c / 16)));
  } else {
    if (mx)
      return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                   _mm512_castps128_ps512(_mm_loadu_ps(fs + c / 32)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                 _mm512_castps256_ps512(_mm256_loadu_ps(fs + c / 16)));
  }
}

// The group's products by lane: its decoded vectors against x's group xg (P parts), one chain.
template <int P, bool Half>
TP_BF16 __attribute__((always_inline)) inline __m512 group_products(const __m512bh (&w)[4], const uint16_t* xg) {
  __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int n = 0; n < kVectors<Half>; ++n)
#pragma GCC unroll 2
    for (int part = 0; part < P; ++part)
      s = _mm512_dpbf16_ps(s, w[n], (__m512bh)_mm512_loadu_si512(xg + (n * P + part) * 32));
  return s;
}

// A row's groups in order, f.template operator()<TT, Half>(c) for each: whole groups into totals 0 and 1 in turn,
// a last group of 64 columns into total 0. rows and row_xtile both walk this way: a row of x has one set of bits.
template <typename F>
TP_BF16 __attribute__((always_inline)) inline void for_groups(int64_t n_in, F&& f) {
  int64_t c = 0;
  for (; c + 256 <= n_in; c += 256) {
    f.template operator()<0, false>(c);
    f.template operator()<1, false>(c + 128);
  }
  if (c + 128 <= n_in) {
    f.template operator()<0, false>(c);
    c += 128;
  }
  if (c < n_in) f.template operator()<0, true>(c);
}

// m > 1: row r (block scales fs) against MT rows of x (xq, per_row apart), each group decoded once for them; row i
// of x gets rows<1, P>'s operations (the same products, scales and t[i][TT] FMA), and y[i · n_out] = the lane sum
// of its total × post (store_row_sums: the same bits one row at a time or four).
template <int MT, int P>
TP_BF16 void row_xtile(const PackedWeight& w, int64_t r, const float* fs, float post, const uint16_t* xq,
                       int64_t per_row, float* y, bool prefetch) {
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const bool mx = w.format == WeightFormat::Mxfp4;
  const __m512i table = e2m1_table();
  __m512 t[MT][2];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) t[i][0] = t[i][1] = _mm512_setzero_ps();
  for_groups(w.n_in, [&]<int TT, bool Half>(int64_t c) TP_BF16 __attribute__((always_inline)) {
    if (prefetch && !Half) prefetch_weights(reinterpret_cast<const char*>(row) + c / 2 + kPrefetchBytes);
    __m512bh wv[4];
    decode_group<Half>(row + c / 2, table, wv);
    const __m512 s = lane_scales<Half>(fs, c, mx);
    const uint16_t* xg = xq + (c / 128) * kGroupX<P>;
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) t[i][TT] = _mm512_fmadd_ps(group_products<P, Half>(wv, xg + i * per_row), s, t[i][TT]);
  });
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) y[i * w.n_out] = _mm512_reduce_add_ps(_mm512_add_ps(t[i][0], t[i][1])) * post;
}

// Rows [r, r + RW) (block scales fs, nb a row) against one row of x (xq, layout_x<P>): y[j] = the lane sum of row
// j's total × post.
template <int RW, int P>
TP_BF16 void rows(const PackedWeight& w, int64_t r, const float* fs, int64_t nb, float post, const uint16_t* xq,
                  float* y) {
  const int64_t rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const bool mx = w.format == WeightFormat::Mxfp4;
  const __m512i table = e2m1_table();
  __m512 t[RW][2];
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) t[j][0] = t[j][1] = _mm512_setzero_ps();
  for_groups(w.n_in, [&]<int TT, bool Half>(int64_t c) TP_BF16 __attribute__((always_inline)) {
    for (int64_t b = 0; b < RW * (Half ? 32 : 64); b += 64) prefetch_weights(pf + b);
    pf += RW * (Half ? 32 : 64);
    const uint16_t* xg = xq + (c / 128) * kGroupX<P>;
#pragma GCC unroll 4
    for (int j = 0; j < RW; ++j) {
      __m512bh wv[4];
      decode_group<Half>(row0 + j * rb + c / 2, table, wv);
      t[j][TT] = _mm512_fmadd_ps(group_products<P, Half>(wv, xg), lane_scales<Half>(fs + j * nb, c, mx), t[j][TT]);
    }
  });
  store_row_sums<RW>(t, post, y);
}

template <int P>
void decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  const int64_t per_row = (w.n_in + 127) / 128 * kGroupX<P>;
  thread_local std::vector<uint16_t> xq;
  xq.resize(size_t(m * per_row));
  for (int64_t i = 0; i < m; ++i) layout_x<P>(x + i * w.n_in, w.n_in, xq.data() + i * per_row);
  const int64_t nb = w.n_in / (mx ? 32 : 16);
  const float post = mx ? 1.0f : 256.0f * w.global_scale;  // NVFP4's scales come × 2⁻⁸ (fp4_scales)
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
  const uint16_t* xs = xq.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRows, omp_get_thread_num(), omp_get_num_threads());
    prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
    // The scale bytes lie apart from the rows: prefetched as far ahead in rows as the rows are.
    const int64_t ahead = kPrefetchBytes / w.row_bytes() + kRows;
    const uint8_t* sb = w.scale_bytes.data();
    prefetch_range_start(sb + r0 * nb, ahead * nb, (r1 - r0) * nb);
    thread_local std::vector<float> fs;  // the pass's rows' block scales in F32
    fs.resize(size_t(kRows * nb));
    for (int64_t r = r0; r < r1; r += kRows) {
      const int n = int(std::min<int64_t>(kRows, r1 - r));
      if (r + ahead < r1) {
        const int64_t p0 = (r + ahead) * nb, p1 = std::min(r1, r + ahead + kRows) * nb;
        for (int64_t b = p0 & ~int64_t(63); b < p1; b += 64) prefetch_weights(sb + b);
      }
      fp4_scales(w.scale_bytes.data() + r * nb, n * nb, mx, fs.data());  // the rows' scales lie together
      if (m == 1) {
        if (n == kRows) {
          rows<kRows, P>(w, r, fs.data(), nb, post, xs, y + r);
        } else {
          for (int j = 0; j < n; ++j) rows<1, P>(w, r + j, fs.data() + j * nb, nb, post, xs, y + r + j);
        }
        continue;
      }
      for (int64_t i0 = 0; i0 < m; i0 += kTileM)  // the pass's rows from L1 after the first tile
        for (int j = 0; j < n; ++j) {
          const uint16_t* xi = xs + i0 * per_row;
          float* yi = y + i0 * w.n_out + r + j;
          const float* fj = fs.data() + j * nb;
          const bool pf = i0 == 0;
          switch (std::min<int64_t>(kTileM, m - i0)) {
            case 1: row_xtile<1, P>(w, r + j, fj, post, xi, per_row, yi, pf); break;
            case 2: row_xtile<2, P>(w, r + j, fj, post, xi, per_row, yi, pf); break;
            case 3: row_xtile<3, P>(w, r + j, fj, post, xi, per_row, yi, pf); break;
            default: row_xtile<4, P>(w, r + j, fj, post, xi, per_row, yi, pf); break;
          }
        }
    }
  }
}

}  // namespace

bool fp4_bf16_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  if ((!mx && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None || w.n_in % 64 != 0 ||
      w.rows_layout != RowsLayout::Rows || !cpu_has_avx512bf16())
    return false;
  if (w.act_bf16)
    decode<1>(x, m, w, y, n_threads);
  else
    decode<2>(x, m, w, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
