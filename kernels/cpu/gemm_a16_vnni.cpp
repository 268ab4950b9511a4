// A16 decode on AVX-512 VNNI (packed_kernels.h: a16_vnni_linear): Int8 and Int4 weights (groups a multiple of 64
// columns or per channel, symmetric or with zero points, no g_idx) and MXFP4 / NVFP4 ones, n_in a multiple of 64,
// against x held as three int8 levels.
//
// Why: vdpbf16ps, which gemm_int4_bf16.cpp's W4A16 kernel is built on, issues one every 2 cycles on the AMX Xeon
// (family 6 model 167) while vpdpbusd issues 2 a cycle (a dependent-free loop of each, 2026-12-03): that kernel
// spent ~12 cycles a 64-column chunk and ran W4A16 decode at 8.4 GB/s from cache, below one core's DRAM read; the
// F32 W8A16 decode (gemm_a16_avx512.cpp) needs 6 vector ops a 32 bytes.
//
// x, one row at a time: s = 2^k, the power of two with max|x| / s in (63.5, 127] (so x / s is exact), then
// q1 = round(x / s), q2 = round((x / s − q1) · 2⁷), q3 = round(((x / s − q1) · 2⁷ − q2) · 2⁷) — every step exact,
// |q1| ≤ 127, |q2|, |q3| ≤ 64 — and x = s · 2⁻¹⁴ · (q1 · 2¹⁴ + q2 · 2⁷ + q3) + e with |e| ≤ s · 2⁻¹⁵ ≤ max|x| · 2⁻²¹
// (F32-like against the row's largest value; two BF16 parts: 2⁻¹⁷ of each value). A row with max|x| below 2⁻¹⁰⁰
// counts as zero (y = 0); a row with a NaN or infinity gets y = NaN.
// A 64-column chunk of a weight row becomes 64 u8 codes u, the value being u − o − z (o the format's offset):
// Int8 (64 bytes, column order) by flipping the sign bit, o = 128; Int4 (32 bytes, column 2j in byte j's low
// nibble, 2j + 1 in its high one) by a broadcast load of the 32 bytes into both halves, the upper half's 64-bit
// lanes shifted right by 4, & 0x0f: the even columns (byte j: column 2j) then the odd ones (byte 32 + j: column
// 2j + 1), o = 8 — x's levels are made in that order for 4-bit weights (deinterleaved once a call), 2 vector ops
// a chunk instead of 3 (vpmovzxbw, a shift and a mask, the first on the shuffle port). vpdpbusd against q1, the int32
// lanes × 2⁷, + the codes · q2, × 2⁷, + the codes · q3 gives each lane Σ over its 4 columns of u · X
// (X = q1 · 2¹⁴ + q2 · 2⁷ + q3; |lane| ≤ 4 · 255 · (127 · 2¹⁴ + 64 · 2⁷ + 64) < 2³¹); − (o + z) · ΣX (ΣX: a lane's 4
// columns of X, made once a row of x) leaves Σ (u − o − z) · X exactly (int32, wrapping in between where it must);
// that to F32 × the chunk's group scale into the row's total (two running totals, chunks in turn), y = the total's
// lane sum × s · 2⁻¹⁴. Int8 / Int4 per channel (one scale a row): a row at a time in memory order, each level's
// sum kept apart over the whole row and combined at its end (row_channel) — 3 vpdpbusd a chunk and nothing else.
// MXFP4 / NVFP4: u = 2 · e2m1 + 12 (vpshufb from the nibble, 0 .. 24), o = 12, and each lane's 4 columns (4 even or
// 4 odd ones of 8 in a row) lie in one block, so the chunk's ints to F32 × a vector of the lanes' block scales (the row's scale bytes converted to F32 once
// a pass of rows: E8M0 exactly, E4M3 × 2⁻⁸ exactly by F16), y's factor × ½ (× 2⁸ × the NVFP4 global scale).
// Every row of x gets the same operations whatever m: a row of a batch has the bits of that row alone. Weight rows
// kRw a pass share each chunk's x loads; with m > 1 the pass runs once a row of x (the weight rows then from L1) —
// per channel, a weight row's chunk serves kTileM rows of x at once (row_channel).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/fp4_scales.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/reduce_add4.h"

namespace tp::cpu::detail {

namespace {

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2,f16c")))

// What a weight byte holds: Int8 codes, two Int4 codes, two E2M1 (MXFP4 / NVFP4) values.
enum class Codes { Int8, Int4, Fp4 };
// The offset o of the u8 codes (value = u − o − z; FP4: 2 · e2m1 = u − 12) and the weight bytes of a 64-column chunk.
template <Codes C>
constexpr int kOffset = C == Codes::Int8 ? 128 : C == Codes::Int4 ? 8 : 12;
template <Codes C>
constexpr int kChunkBytes = C == Codes::Int8 ? 64 : 32;

constexpr int kRw = 4;  // weight rows a pass
constexpr int kTileM = 4;  // per channel: rows of x a pass over a weight row (row_channel)
constexpr int64_t kBlockRows = 16;  // per channel, m > kTileM: weight rows that meet every tile of x in turn
// How far ahead of the pass W is software-prefetched: 4096 on AMD; on Intel (prefetched into L2 there,
// gemv.h prefetch_weights) 6144 for Int8 codes and 2048 for the 4-bit ones. Xeon with AMX, 2026-12-03, SmolLM2
// decode tg128, 1 thread, alternated 3 times, L1 at 2048 / L2 at 2048 / L2 at 6144: CT-W8A16 80.1 / 80.1 / 87.7
// tok/s, CT-W4A16 g64 104.7 / 107.1 / 104.9, NVFP4 99.0 / 97.9 / 96.1.
template <Codes C>
int64_t prefetch_bytes() {
  static const int64_t bytes = !cpu_is_intel() ? 4096 : C == Codes::Int8 ? 6144 : 2048;
  return bytes;
}

// One row of x as levels: q[3][n_in] int8 (q1, q2, q3; for 4-bit weights each 64-column chunk's even columns then
// its odd ones), sx[n_in / 4] int32 (ΣX over each 4 of those) and y's factor
// s · 2⁻¹⁴ (0: a zero row; NaN: a row with a NaN or infinity).
struct XLevels {
  const int8_t* q[3];
  const int32_t* sx;
  float scale;
  int32_t sl[3][16];  // per lane, Σ over the row's chunks of the lane's 4 columns of q1, q2, q3 (the channel path)
};

// x row (n_in a multiple of 64; `deint`: each 64-column chunk deinterleaved, even columns then odd ones, into
// xd [n_in] first) -> its levels into q (3 · n_in), sx (n_in / 4) and sl; returns s · 2⁻¹⁴ (0 for a zero row, NaN
// for a row with a NaN or infinity; the levels are then all 0).
TP_VNNI float x_levels(const float* x, int64_t n_in, bool deint, float* xd, int8_t* q, int32_t* sx,
                       int32_t (&sl)[3][16]) {
  if (deint) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t c = 0; c < n_in; c += 64) {
      const __m512 a = _mm512_loadu_ps(x + c), b = _mm512_loadu_ps(x + c + 16);
      const __m512 d = _mm512_loadu_ps(x + c + 32), e = _mm512_loadu_ps(x + c + 48);
      _mm512_storeu_ps(xd + c, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(xd + c + 16, _mm512_permutex2var_ps(d, even, e));
      _mm512_storeu_ps(xd + c + 32, _mm512_permutex2var_ps(a, odd, b));
      _mm512_storeu_ps(xd + c + 48, _mm512_permutex2var_ps(d, odd, e));
    }
    x = xd;
  }
  __m512 mx = _mm512_setzero_ps();
  __mmask16 ordered = 0xffff;  // max_ps drops NaN lanes (it keeps the second operand), so NaNs are looked for apart
  for (int64_t c = 0; c < n_in; c += 16) {
    const __m512 v = _mm512_loadu_ps(x + c);
    mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
    ordered &= _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
  }
  const float amax = _mm512_reduce_max_ps(mx);
  const bool finite = ordered == 0xffff && std::isfinite(amax);
  if (!finite || amax < 0x1p-100f) {
    std::memset(q, 0, size_t(3 * n_in));
    std::memset(sx, 0, size_t(n_in / 4) * 4);
    std::memset(sl, 0, sizeof(sl));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  int k = std::ilogb(amax) - 6;  // amax / 2^k in [64, 128)
  if (std::ldexp(amax, -k) > 127.0f) ++k;
  const __m512 inv = _mm512_set1_ps(std::ldexp(1.0f, -k)), f7 = _mm512_set1_ps(128.0f);
  int8_t* q1 = q;
  int8_t* q2 = q + n_in;
  int8_t* q3 = q + 2 * n_in;
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s1 = _mm512_setzero_si512(), s2 = s1, s3 = s1;
  for (int64_t c = 0; c < n_in; c += 64) {
    for (int64_t h = c; h < c + 64; h += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + h), inv);
      const __m512 r1 = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 v2 = _mm512_mul_ps(_mm512_sub_ps(v, r1), f7);
      const __m512 r2 = _mm512_roundscale_ps(v2, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 r3 = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(v2, r2), f7),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q1 + h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r1)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q2 + h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r2)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q3 + h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r3)));
    }
    // ΣX of each 4 columns: the chunk loop's combination with codes all 1; and the levels' lane sums.
    const __m512i l1 = _mm512_loadu_si512(q1 + c), l2 = _mm512_loadu_si512(q2 + c), l3 = _mm512_loadu_si512(q3 + c);
    __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, l1);
    a = _mm512_dpbusd_epi32(_mm512_slli_epi32(a, 7), ones, l2);
    a = _mm512_dpbusd_epi32(_mm512_slli_epi32(a, 7), ones, l3);
    _mm512_storeu_si512(sx + c / 4, a);
    s1 = _mm512_dpbusd_epi32(s1, ones, l1);
    s2 = _mm512_dpbusd_epi32(s2, ones, l2);
    s3 = _mm512_dpbusd_epi32(s3, ones, l3);
  }
  _mm512_storeu_si512(sl[0], s1);
  _mm512_storeu_si512(sl[1], s2);
  _mm512_storeu_si512(sl[2], s3);
  return std::ldexp(1.0f, k - 14);
}

// The 64 u8 codes of columns [c, c + 64) of a row: Int8 in column order, 4-bit ones even columns then odd ones.
template <Codes C>
TP_VNNI __attribute__((always_inline)) inline __m512i codes(const uint8_t* row, int64_t c) {
  if constexpr (C == Codes::Int8) {
    return _mm512_xor_si512(_mm512_loadu_si512(row + c), _mm512_set1_epi8(char(0x80)));  // q + 128
  } else {
    const __m512i wb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c / 2)));
    const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(wb, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)),
                                       _mm512_set1_epi8(0x0f));
    if constexpr (C == Codes::Int4) return u;
    // E2M1 code -> 2 · value + 12 (0 .. 24): 0, ±1, ±2, ±3, ±4, ±6, ±8, ±12 (code 8 is −0).
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm512_shuffle_epi8(table, u);
  }
}

// Chunk c (64 columns) of rows [row0, row0 + RW · rb) against one row of x's levels: Σ u · X by lanes, − (o + z) · ΣX,
// to F32 × the scale into t[j][TT]: Int8 / Int4 the group's (sc[j · ng + g]), FP4 each lane's block's (sc: the rows'
// F32 block scales, ng a row).
template <Codes C, int RW, bool kZeros, int TT>
TP_VNNI __attribute__((always_inline)) inline void chunk(const uint8_t* row0, int64_t rb, int64_t c, int64_t g, int64_t ng,
                                                         const float* sc, const int8_t* zp, const XLevels& xl,
                                                         const char*& pf, bool prefetch, bool mx, __m512 (&t)[RW][2]) {
  if (prefetch) {
    for (int64_t b = 0; b < RW * kChunkBytes<C>; b += 64) prefetch_weights(pf + b);
    pf += RW * kChunkBytes<C>;
  }
  const __m512i x1 = _mm512_loadu_si512(xl.q[0] + c), x2 = _mm512_loadu_si512(xl.q[1] + c);
  const __m512i x3 = _mm512_loadu_si512(xl.q[2] + c), sx = _mm512_loadu_si512(xl.sx + c / 4);
  const __m512i corr = _mm512_mullo_epi32(sx, _mm512_set1_epi32(kOffset<C>));  // o · ΣX
#pragma GCC unroll 4
  for (int j = 0; j < RW; ++j) {
    const __m512i u = codes<C>(row0 + j * rb, c);
    __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x1);
    a = _mm512_dpbusd_epi32(_mm512_slli_epi32(a, 7), u, x2);
    a = _mm512_dpbusd_epi32(_mm512_slli_epi32(a, 7), u, x3);
    if constexpr (kZeros) a = _mm512_sub_epi32(a, _mm512_mullo_epi32(sx, _mm512_set1_epi32(kOffset<C> + zp[j * ng + g])));
    else a = _mm512_sub_epi32(a, corr);
    __m512 s;
    if constexpr (C != Codes::Fp4) {
      s = _mm512_set1_ps(sc[j * ng + g]);
    } else if (mx) {  // MXFP4: 2 blocks of 32 columns, 4 even-column lanes and 4 odd-column ones each
      const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sc + j * ng + c / 32)));
      s = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1), _mm512_castps128_ps512(two));
    } else {  // NVFP4: 4 blocks of 16 columns, 2 even-column lanes and 2 odd-column ones each
      const __m128 four = _mm_loadu_ps(sc + j * ng + c / 16);
      s = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3), _mm512_castps128_ps512(four));
    }
    t[j][TT] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), s, t[j][TT]);
  }
}

// Rows [r, r + RW) against one row of x's levels: y[j] for j < RW (chunks into t[j][0] and t[j][1] in turn). sc: the
// rows' scales, ng a row (Int8 / Int4: the groups' from w; FP4: the blocks' in F32, from fp4_scales); post: y's
// factor after the lane sum besides x's.
template <Codes C, int RW, bool kZeros>
TP_VNNI void rows(const PackedWeight& w, int64_t ng, int64_t gs, const float* sc, float post, int64_t r,
                  const XLevels& xl, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + prefetch_bytes<C>();
  const int8_t* zp = kZeros ? w.zeros.data() + r * ng : nullptr;
  post *= xl.scale;
  const bool mx = w.format == WeightFormat::Mxfp4;
  __m512 t[RW][2];
  for (int j = 0; j < RW; ++j) t[j][0] = t[j][1] = _mm512_setzero_ps();
  // Chunk k's group is k / (gs / 64), counted along (no division a chunk).
  const int64_t per_group = gs / 64;
  int64_t c = 0, g = 0, left = per_group;
  const auto next = [&] {
    if (--left == 0) ++g, left = per_group;
  };
  for (; c + 128 <= n_in; c += 128) {
    chunk<C, RW, kZeros, 0>(row0, rb, c, g, ng, sc, zp, xl, pf, prefetch, mx, t);
    next();
    chunk<C, RW, kZeros, 1>(row0, rb, c + 64, g, ng, sc, zp, xl, pf, prefetch, mx, t);
    next();
  }
  if (c < n_in) chunk<C, RW, kZeros, 0>(row0, rb, c, g, ng, sc, zp, xl, pf, prefetch, mx, t);
  store_row_sums<RW>(t, post, y);
}

// Per channel (one scale a row): row r against MT rows of x's levels (xl[i], y[i · n_out]), each chunk's codes
// loaded once for them; the three levels' sums kept apart over the whole row (|lane| ≤ 4 · 255 · 127 a chunk: no
// int32 overflow below ~10⁶ columns) — 3 vpdpbusd a chunk and a row of x, and no shift, conversion or scale a
// chunk. With MT = 2 even and odd chunks sum into two sets of accumulators (12 chains; at m = 1 two sets ran
// ~5% slower from cache on Zen 5, so one); the sums are exact integers, so neither the sets nor the tile change a
// bit. At the row's end, per lane Bk = Ak − (o + z) · (lane sum of qk)
// (exact), F = (B1 · 2⁷ + B2) · 2⁷ + B3 in F32 (in that order), y = Σ lanes × scale × s · 2⁻¹⁴.
// Row r's three level sums (lanes) against one row of x's levels -> *y (the finish described above).
template <Codes C, bool kZeros>
TP_VNNI __attribute__((always_inline)) inline void channel_sum(const PackedWeight& w, int64_t r, __m512i a1, __m512i a2,
                                                               __m512i a3, const XLevels& xl, float* y) {
  const __m512i o = _mm512_set1_epi32(kOffset<C> + (kZeros ? int32_t(w.zeros[size_t(r)]) : 0));
  const __m512 b1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a1, _mm512_mullo_epi32(o, _mm512_loadu_si512(xl.sl[0]))));
  const __m512 b2 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a2, _mm512_mullo_epi32(o, _mm512_loadu_si512(xl.sl[1]))));
  const __m512 b3 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a3, _mm512_mullo_epi32(o, _mm512_loadu_si512(xl.sl[2]))));
  const __m512 f7 = _mm512_set1_ps(128.0f);
  const __m512 f = _mm512_fmadd_ps(_mm512_fmadd_ps(b1, f7, b2), f7, b3);
  *y = _mm512_reduce_add_ps(f) * w.scales[size_t(r)] * xl.scale;
}

template <Codes C, int MT, int S>
TP_VNNI __attribute__((always_inline)) inline void chunk_channel(const uint8_t* row, int64_t c, const XLevels* xl,
                                                                 int set, __m512i (&a)[MT][S][3]) {
  const __m512i u = codes<C>(row, c);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 3
    for (int k = 0; k < 3; ++k) a[i][set][k] = _mm512_dpbusd_epi32(a[i][set][k], u, _mm512_loadu_si512(xl[i].q[k] + c));
}

template <Codes C, bool kZeros, int MT>
TP_VNNI void row_channel(const PackedWeight& w, int64_t r, const XLevels* xl, float* y, bool prefetch) {
  constexpr int S = MT == 2 ? 2 : 1;  // accumulator sets
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row) + prefetch_bytes<C>();
  if constexpr (MT == 1) {  // decode: three named chains (the array form below ran 5-8% slower at m = 1 on Zen 5)
    __m512i a1 = _mm512_setzero_si512(), a2 = a1, a3 = a1;
    for (int64_t c = 0; c < n_in; c += 64, pf += kChunkBytes<C>) {
      if (prefetch && (C == Codes::Int8 || c % 128 == 0)) prefetch_weights(pf);
      const __m512i u = codes<C>(row, c);
      a1 = _mm512_dpbusd_epi32(a1, u, _mm512_loadu_si512(xl->q[0] + c));
      a2 = _mm512_dpbusd_epi32(a2, u, _mm512_loadu_si512(xl->q[1] + c));
      a3 = _mm512_dpbusd_epi32(a3, u, _mm512_loadu_si512(xl->q[2] + c));
    }
    channel_sum<C, kZeros>(w, r, a1, a2, a3, *xl, y);
    return;
  }
  __m512i a[MT][S][3];
  for (int i = 0; i < MT; ++i)
    for (int s = 0; s < S; ++s)
      for (int k = 0; k < 3; ++k) a[i][s][k] = _mm512_setzero_si512();
  int64_t c = 0;
  if constexpr (S == 2) {
    for (; c + 128 <= n_in; c += 128, pf += 2 * kChunkBytes<C>) {
      if (prefetch) {
        prefetch_weights(pf);
        if constexpr (C == Codes::Int8) prefetch_weights(pf + 64);
      }
      chunk_channel<C, MT, S>(row, c, xl, 0, a);
      chunk_channel<C, MT, S>(row, c + 64, xl, 1, a);
    }
  }
  for (; c < n_in; c += 64, pf += kChunkBytes<C>) {
    if (prefetch && (C == Codes::Int8 || c % 128 == 0)) prefetch_weights(pf);
    chunk_channel<C, MT, S>(row, c, xl, 0, a);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    __m512i ak[3];
    for (int k = 0; k < 3; ++k) ak[k] = S == 2 ? _mm512_add_epi32(a[i][0][k], a[i][S - 1][k]) : a[i][0][k];
    channel_sum<C, kZeros>(w, r, ak[0], ak[1], ak[2], xl[i], y + i * w.n_out);
  }
}

template <Codes C, bool kZeros>
void run(const PackedWeight& w, const std::vector<XLevels>& xs, float* y, int n_threads) {
  const int64_t m = int64_t(xs.size());
  const bool mx = w.format == WeightFormat::Mxfp4;
  // FP4: ng = blocks a row (their F32 scales made once a pass of rows, for every row of x); y × ½ (u − 12 is
  // 2 · e2m1), NVFP4's × 2⁸ (its scales came × 2⁻⁸) × the global scale.
  const int64_t ng = C == Codes::Fp4 ? w.n_in / (mx ? 32 : 16) : w.n_groups(), gs = ng > 1 ? w.group_size : w.n_in;
  const float post = C != Codes::Fp4 ? 1.0f : mx ? 0.5f : 0.5f * 256.0f * w.global_scale;
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    prefetch_range_start(w.data.data() + r0 * w.row_bytes(), prefetch_bytes<C>(), (r1 - r0) * w.row_bytes());
    int64_t r = r0;
    if (C != Codes::Fp4 && ng == 1) {  // per channel: rows in memory order, kTileM rows of x a pass over a row; a
      // block of kBlockRows weight rows meets every tile of x before the next block (x's levels, 3 · n_in bytes a
      // row, outgrow L1 at m = 16 and 1536 columns)
      for (int64_t b = r; b < r1; b += kBlockRows)
        for (int64_t i0 = 0; i0 < m; i0 += kTileM)
          for (int64_t rr = b; rr < std::min(r1, b + kBlockRows); ++rr) {
            const XLevels* xl = xs.data() + i0;
            float* yi = y + i0 * w.n_out + rr;
            switch (std::min<int64_t>(kTileM, m - i0)) {
              case 1: row_channel<C, kZeros, 1>(w, rr, xl, yi, i0 == 0); break;
              case 2: row_channel<C, kZeros, 2>(w, rr, xl, yi, i0 == 0); break;
              case 3: row_channel<C, kZeros, 3>(w, rr, xl, yi, i0 == 0); break;
              default: row_channel<C, kZeros, 4>(w, rr, xl, yi, i0 == 0); break;
            }
          }
      r = r1;
    }
    thread_local std::vector<float> fs;  // FP4: the pass's rows' block scales in F32
    if (C == Codes::Fp4) fs.resize(size_t(kRw * ng));
    // The pass's scales: rows [r, r + rows) of w's, or of the FP4 blocks' converted.
    const auto scales = [&](int64_t r, int rows) -> const float* {
      if (C != Codes::Fp4) return w.scales.data() + r * ng;
      fp4_scales(w.scale_bytes.data() + r * ng, rows * ng, mx, fs.data());  // the rows' scales lie together
      return fs.data();
    };
    for (; r + kRw <= r1; r += kRw) {
      const float* sc = scales(r, kRw);
      for (int64_t i = 0; i < m; ++i)
        rows<C, kRw, kZeros>(w, ng, gs, sc, post, r, xs[size_t(i)], y + i * w.n_out + r, i == 0);
    }
    for (; r < r1; ++r) {
      const float* sc = scales(r, 1);
      for (int64_t i = 0; i < m; ++i) rows<C, 1, kZeros>(w, ng, gs, sc, post, r, xs[size_t(i)], y + i * w.n_out + r, false);
    }
  }
}

}  // namespace

bool a16_vnni_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const bool fp4 = w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4;
  if ((w.format != WeightFormat::Int4 && w.format != WeightFormat::Int8 && !fp4) || w.act != ActQuant::None ||
      !w.g_idx.empty() || w.n_in % 64 != 0 || (!fp4 && w.n_groups() > 1 && w.group_size % 64 != 0) ||
      w.rows_layout != RowsLayout::Rows || !cpu_has_avx512vnni())
    return false;
  const int64_t n_in = w.n_in;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> sx;
  q.resize(size_t(m * 3 * n_in));
  sx.resize(size_t(m * n_in / 4));
  thread_local std::vector<XLevels> xs;
  thread_local std::vector<float> xd;  // a row of x deinterleaved (4-bit weights)
  const bool deint = w.format != WeightFormat::Int8;
  if (deint) xd.resize(size_t(n_in));
  xs.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    int8_t* qi = q.data() + i * 3 * n_in;
    int32_t* si = sx.data() + i * n_in / 4;
    XLevels& l = xs[size_t(i)];
    l.scale = x_levels(x + i * n_in, n_in, deint, xd.data(), qi, si, l.sl);
    l.q[0] = qi, l.q[1] = qi + n_in, l.q[2] = qi + 2 * n_in, l.sx = si;
  }
  const bool zeros = !w.zeros.empty();
  if (fp4) run<Codes::Fp4, false>(w, xs, y, n_threads);
  else if (w.format == WeightFormat::Int8) zeros ? run<Codes::Int8, true>(w, xs, y, n_threads) : run<Codes::Int8, false>(w, xs, y, n_threads);
  else zeros ? run<Codes::Int4, true>(w, xs, y, n_threads) : run<Codes::Int4, false>(w, xs, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
