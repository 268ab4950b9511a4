// MXFP4 / NVFP4 decode on AVX-512 BF16 (packed_kernels.h: fp4_bf16_decode): the e2m1 values (exact in BF16)
// against x held as two BF16 parts (x ≈ bf16(x) + bf16(x − bf16(x)), 16 significant bits, as gemm_int4_bf16.cpp),
// vdpbf16ps with F32 sums, × the block scales in F32, NVFP4's global scale after.
//
// A 64-column chunk of a row is 32 bytes; read as 16-bit lanes, lane j holds the four nibbles of columns c + 4j ..
// c + 4j + 3. The 32 bytes are broadcast into both halves of a register and shifted right per half by 0 / 4 (vector
// A) and 8 / 12 (vector B) bits: A's lanes hold columns c + 4j then c + 4j + 1 in their low nibble, B's c + 4j + 2
// then c + 4j + 3; vpermw looks each lane's low 5 bits up in a 32-entry table of the e2m1 values (code & 15). x is
// laid out once a call in the same order (XA, XB, two parts each), so a chunk is 2 vpermw and 4 vdpbf16ps — no
// widening shuffle (gemm_int4_bf16.cpp's vpmovzxbw). An F32 lane k of the products sums columns c + 8(k mod 8) +
// {0, 2, 4, 6} (k < 8) or + {1, 3, 5, 7}: all in one block of 16 or 32 columns, so the chunk's sum is × a vector of
// the lanes' block scales (permuted from the pass's F32 scales, fp4_scales.h) into the row's total; y = the lane
// sum × post. On Zen 5 (2026-12-04, GEMM_BENCH_HOT=1 gemm_gguf_bench 1 43 0 nvfp4): 23-28 GB/s from cache against
// the VNNI levels kernel's 17-23; the vpmovzxbw + vpsrlw decode of W4A16, and vpmultishiftqb in place of the
// shifts, ran within ±3% of this one; the F32 block scales cost ~17% of a pass of 576-column rows, their permute ~7%.
// kRows weight rows a pass share each chunk's x loads (their sums reduced 4 at a time, reduce_add4.h); with m > 1
// each decoded chunk of a weight row serves kTileM rows of x (the pass's weight rows from L1 after the first tile),
// with the operations of that row alone: a row of a batch has the bits it has alone.
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
// Weight rows a pass. 8 ran 576-column rows 4-6% faster than 4 from cache on Zen 5, but the model's decode from
// DRAM was not faster (NVFP4 tg64 232-241 vs 240-247 tok/s, MXFP4 243-253 vs 245-248, alternated 3 times): 4.
constexpr int kRows = 4;
constexpr int kTileM = 4;  // m > 1: rows of x sharing each decoded chunk (row_xtile)
// BF16 values of x a chunk: XA part 0, XA part 1, XB part 0, XB part 1 (P = 2); XA, XB (P = 1: x exact in BF16,
// w.act_bf16, so part 1 would be 0).
template <int P>
constexpr int64_t kChunkX = 2 * P * 32;

// One row of x (n_in a multiple of 64) -> xq[n_in / 64 · kChunkX<P>]: per chunk, XA = [x(c + 4j), j < 16 |
// x(c + 4j + 1), j < 16] and XB = [x(c + 4j + 2) | x(c + 4j + 3)], each as its P parts.
template <int P>
TP_BF16 void layout_x(const float* x, int64_t n_in, uint16_t* xq) {
  for (int64_t c = 0; c < n_in; c += 64, xq += kChunkX<P>) {
    const __m512 v0 = _mm512_loadu_ps(x + c), v1 = _mm512_loadu_ps(x + c + 16);
    const __m512 v2 = _mm512_loadu_ps(x + c + 32), v3 = _mm512_loadu_ps(x + c + 48);
    __m512 col[4];  // col[r] = x(c + 4j + r), j < 16
    for (int r = 0; r < 4; ++r) {
      const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0),
                                            _mm512_set1_epi32(r));
      const __m512 lo = _mm512_permutex2var_ps(v0, idx, v1), hi = _mm512_permutex2var_ps(v2, idx, v3);
      col[r] = _mm512_shuffle_f32x4(lo, hi, 0x44);
    }
    __m256i p[4][2];
    for (int r = 0; r < 4; ++r) bf16_parts(col[r], p[r][0], p[r][1]);
    for (int part = 0; part < P; ++part) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + part * 32), p[0][part]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + part * 32 + 16), p[1][part]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + P * 32 + part * 32), p[2][part]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + P * 32 + part * 32 + 16), p[3][part]);
    }
  }
}

// 32 BF16 lanes: the e2m1 value of code j & 15 (0, 0.5, 1, 1.5, 2, 3, 4, 6, then their negatives; code 8 is −0).
TP_BF16 inline __m512i e2m1_table() {
  const __m512 v = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
  return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

// A chunk's two decoded vectors (A: columns c + 4j, c + 4j + 1; B: c + 4j + 2, c + 4j + 3) from its 32 bytes at p.
TP_BF16 __attribute__((always_inline)) inline void decode_chunk(const uint8_t* p, __m512i table, __m512bh& wa,
                                                                __m512bh& wv) {
  // 16-bit lanes' right shifts: A 0 (lanes 0-15) / 4 (16-31), B 8 / 12.
  const __m512i sa = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004,
                                       0x40004, 0x40004);
  const __m512i sb = _mm512_add_epi16(sa, _mm512_set1_epi16(8));
  const __m512i wb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  wa = (__m512bh)_mm512_permutexvar_epi16(_mm512_srlv_epi16(wb, sa), table);
  wv = (__m512bh)_mm512_permutexvar_epi16(_mm512_srlv_epi16(wb, sb), table);
}

// The chunk at column c's lane block scales from a row's F32 block scales fs.
TP_BF16 __attribute__((always_inline)) inline __m512 lane_scales(const float* fs, int64_t c, bool mx) {
  if (mx) {  // 2 blocks of 32 columns: lanes k mod 8 in 0-3, 4-7
    const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(fs + c / 32)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1), _mm512_castps128_ps512(two));
  }
  // 4 blocks of 16 columns: lanes k mod 8 in 0-1, 2-3, 4-5, 6-7
  const __m128 four = _mm_loadu_ps(fs + c / 16);
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3), _mm512_castps128_ps512(four));
}

// The chunk's products by lane: the decoded vectors against x's chunk xc (P parts).
template <int P>
TP_BF16 __attribute__((always_inline)) inline __m512 chunk_products(__m512bh wa, __m512bh wv, const uint16_t* xc) {
  const __m512bh a0 = (__m512bh)_mm512_loadu_si512(xc), b0 = (__m512bh)_mm512_loadu_si512(xc + P * 32);
  if constexpr (P == 2) {
    const __m512bh a1 = (__m512bh)_mm512_loadu_si512(xc + 32), b1 = (__m512bh)_mm512_loadu_si512(xc + 96);
    return _mm512_add_ps(_mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), wa, a0), wa, a1),
                         _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), wv, b0), wv, b1));
  } else {
    return _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), wa, a0), wv, b0);
  }
}

// Chunk c of RW rows (rb bytes apart) against x's chunk xc (P parts): t[j][TT] += (the chunk's products by lane) ×
// the lanes' block scales (fs: the rows' F32 block scales, nb a row).
template <int RW, int TT, int P>
TP_BF16 __attribute__((always_inline)) inline void chunk_rows(const uint8_t* row0, int64_t rb, int64_t c,
                                                              __m512i table, const float* fs, int64_t nb, bool mx,
                                                              const uint16_t* xc, const char*& pf,
                                                              __m512 (&t)[RW][2]) {
  for (int64_t b = 0; b < RW * 32; b += 64) prefetch_weights(pf + b);
  pf += RW * 32;
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) {
    __m512bh wa, wv;
    decode_chunk(row0 + j * rb + c / 2, table, wa, wv);
    t[j][TT] = _mm512_fmadd_ps(chunk_products<P>(wa, wv, xc), lane_scales(fs + j * nb, c, mx), t[j][TT]);
  }
}

// m > 1: chunk c of one row against MT rows of x (row i's chunk at xc + i · per_row), decoded once for them; each
// row of x gets chunk_rows' operations (the same products, scales and t[i][TT] FMA).
template <int MT, int TT, int P>
TP_BF16 __attribute__((always_inline)) inline void chunk_xtile(const uint8_t* row, int64_t c, __m512i table,
                                                               const float* fs, bool mx, const uint16_t* xc,
                                                               int64_t per_row, __m512 (&t)[MT][2]) {
  __m512bh wa, wv;
  decode_chunk(row + c / 2, table, wa, wv);
  const __m512 s = lane_scales(fs, c, mx);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) t[i][TT] = _mm512_fmadd_ps(chunk_products<P>(wa, wv, xc + i * per_row), s, t[i][TT]);
}

// Row r (block scales fs) against MT rows of x (xq, per_row apart): y[i · n_out] = the lane sum of row i's total ×
// post — rows<1, P>'s chunks, totals and sum (store_row_sums: the same bits one row at a time or four), so a row of
// x in a batch has the bits it has alone.
template <int MT, int P>
TP_BF16 void row_xtile(const PackedWeight& w, int64_t r, const float* fs, float post, const uint16_t* xq,
                       int64_t per_row, float* y, bool prefetch) {
  const int64_t n_in = w.n_in;
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const bool mx = w.format == WeightFormat::Mxfp4;
  const __m512i table = e2m1_table();
  __m512 t[MT][2];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) t[i][0] = t[i][1] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 128 <= n_in; c += 128) {
    if (prefetch) prefetch_weights(reinterpret_cast<const char*>(row) + c / 2 + kPrefetchBytes);
    chunk_xtile<MT, 0, P>(row, c, table, fs, mx, xq + (c / 64) * kChunkX<P>, per_row, t);
    chunk_xtile<MT, 1, P>(row, c + 64, table, fs, mx, xq + (c / 64 + 1) * kChunkX<P>, per_row, t);
  }
  if (c < n_in) chunk_xtile<MT, 0, P>(row, c, table, fs, mx, xq + (c / 64) * kChunkX<P>, per_row, t);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) y[i * w.n_out] = _mm512_reduce_add_ps(_mm512_add_ps(t[i][0], t[i][1])) * post;
}

// Rows [r, r + RW) against one row of x (xq, layout_x<P>): y[j] = the lane sum of row j's total × post. Chunks
// into t[j][0] and t[j][1] in turn.
template <int RW, int P>
TP_BF16 void rows(const PackedWeight& w, int64_t r, const float* fs, int64_t nb, float post, const uint16_t* xq,
                  float* y) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const bool mx = w.format == WeightFormat::Mxfp4;
  const __m512i table = e2m1_table();
  __m512 t[RW][2];
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) t[j][0] = t[j][1] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 128 <= n_in; c += 128) {
    chunk_rows<RW, 0, P>(row0, rb, c, table, fs, nb, mx, xq + (c / 64) * kChunkX<P>, pf, t);
    chunk_rows<RW, 1, P>(row0, rb, c + 64, table, fs, nb, mx, xq + (c / 64 + 1) * kChunkX<P>, pf, t);
  }
  if (c < n_in) chunk_rows<RW, 0, P>(row0, rb, c, table, fs, nb, mx, xq + (c / 64) * kChunkX<P>, pf, t);
  store_row_sums<RW>(t, post, y);
}

template <int P>
void decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  const int64_t per_row = w.n_in / 64 * kChunkX<P>;
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
    thread_local std::vector<float> fs;  // the pass's rows' block scales in F32
    fs.resize(size_t(kRows * nb));
    for (int64_t r = r0; r < r1; r += kRows) {
      const int n = int(std::min<int64_t>(kRows, r1 - r));
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
      !cpu_has_avx512bf16())
    return false;
  if (w.act_bf16)
    decode<1>(x, m, w, y, n_threads);
  else
    decode<2>(x, m, w, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
