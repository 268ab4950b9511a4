// MXFP4 / NVFP4 decode on AVX2 + FMA (packed_kernels.h: fp4_avx2_decode): E2M1 weights (Rows layout, n_in a multiple
// of 32) against F32 x (rounded to BF16 first with w.act_bf16, as the reference), m < kFp4Avx2MaxM rows of x.
//
// Why: the A16 tiles (packed_a16.inc) spent ~26 vector ops a 32-column block of a row (nibbles to int8 through a
// table, int8 to int32 to F32, × the block scale, 4 FMAs) plus a scalar scale conversion a block: SmolLM2 MXFP4
// decode on a Zen 3 core ran at 0.72x our BF16, NVFP4 at 0.62x (bench/results/decode-quant-zen3-20261205-1001.md).
// Here a block costs 13 vector ops: every E2M1 value is exact in BF16, so two vpshufb tables give each code's BF16 high and
// low byte, and BF16 is the top half of an F32:
//   the 16 bytes broadcast into both 128-bit lanes, the upper lane's 64-bit lanes shifted right by 4, & 0x0f: 32
//   codes, lane 0 the even columns 0, 2, .., 30, lane 1 the odd ones; vpshufb by the high-byte and low-byte tables;
//   vpunpckl/hbw(low, high): 16-bit BF16s, two a 32-bit lane; << 16 the lower one's F32, & 0xffff0000 the upper one's
//   (no shuffle: vector shifts and shuffles share two of Zen 3's four pipes, logic runs on all four). Vectors 0-1 hold
//   columns 0..15 of the block, 2-3 columns 16..31, each 16 in the order kOrder below, so x is permuted alike once a
//   call, and vectors 0-1 are an NVFP4 block's 16 columns, 2-3 the next one's.
// Per block and row: p0 = v0 · x0 + v1 · x1, p1 = v2 · x2 + v3 · x3 (one vmulps, one FMA each), then t += p0 · s0,
// t += p1 · s1 (s0 = s1 = the MXFP4 block scale; NVFP4 the two blocks' scales): 6 F32 ops. y = t's lane sum × the
// NVFP4 global scale (× 2⁸: its E4M3 scales are read as F16s of value / 2⁸, exact).
// Block scales, once a pass of kRw rows: E8M0 as F32 bits e << 23, E4M3 sign-extended << 7 & 0xbfff as F16
// (value / 2⁸, subnormals included), 8 at a time; a pass whose scales hold an edge byte (E8M0 0 = 2⁻¹²⁷ or 255 = NaN, E4M3 NaN) is
// converted by the scalar rule (common/fp_formats.h). Products and sums are F32, within the suite's bound of the
// reference (dequantize, then F32). A row of x with a NaN or an infinity gives NaN (the other kernels' rule); every
// row of x gets the same operations whatever m, the weight rows beside it or the threads: a row of a batch has the
// bits it has alone. m = 1: weight rows kRw a pass, software-prefetched ahead; m > 1: each weight row decoded once
// for kMt rows of x (then from L1 for the next kMt).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "common/fp_formats.h"
#include "common/rows16_layout.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"

namespace tp::cpu::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

constexpr int kRw = 4;                    // weight rows a pass
constexpr int64_t kPrefetchBytes = 2048;  // how far ahead of the pass W is prefetched

// One row of x permuted into decode32's order (kOrder within each 16 columns) into xp (not x); returns whether the row
// is finite.
constexpr int kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
bool permute_x(const float* x, int64_t n_in, float* xp) {
  __m256 bad = _mm256_setzero_ps();
  for (int64_t c = 0; c < n_in; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));  // NaN or ±inf
  }
  for (int64_t c = 0; c < n_in; c += 16)
    for (int k = 0; k < 16; ++k) xp[c + k] = x[c + kOrder[k]];
  return _mm256_movemask_ps(bad) == 0;
}

// n scale bytes -> F32 (MXFP4: the E8M0 value; NVFP4: the E4M3 value / 2⁸).
void block_scales(const uint8_t* sb, int64_t n, bool nv, float* out) {
  int64_t k = 0;
  bool edge = false;
  for (; k + 8 <= n; k += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + k));
    if (nv) {
      const __m128i ws = _mm_cvtepi8_epi16(b);  // << 7: the sign in bits 15 and 14, the magnitude in 13..7
      edge |= _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(ws, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7f))) != 0;
      _mm256_storeu_ps(out + k, _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(ws, 7), _mm_set1_epi16(short(0xbfff)))));
    } else {
      edge |= _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_setzero_si128()),
                                             _mm_cmpeq_epi8(b, _mm_set1_epi8(char(0xff))))) & 0xff;
      _mm256_storeu_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(b), 23)));
    }
  }
  if (edge || k < n)
    for (k = edge ? 0 : k; k < n; ++k) out[k] = nv ? fp8_e4m3_to_f32(sb[k]) * 0x1p-8f : e8m0_to_f32(sb[k]);
}

// E2M1 code (sign, 2 exponent bits, 1 mantissa bit) -> its value's BF16 high / low byte (vpshufb tables, both
// 128-bit lanes): 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negative.
inline __m256i e2m1_bf16_hi() {
  return _mm256_setr_epi8(0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, char(0x80), char(0xbf), char(0xbf), char(0xbf),
                          char(0xc0), char(0xc0), char(0xc0), char(0xc0), 0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40,
                          char(0x80), char(0xbf), char(0xbf), char(0xbf), char(0xc0), char(0xc0), char(0xc0), char(0xc0));
}
inline __m256i e2m1_bf16_lo() {
  return _mm256_setr_epi8(0, 0, char(0x80), char(0xc0), 0, 0x40, char(0x80), char(0xc0), 0, 0, char(0x80), char(0xc0), 0,
                          0x40, char(0x80), char(0xc0), 0, 0, char(0x80), char(0xc0), 0, 0x40, char(0x80), char(0xc0), 0,
                          0, char(0x80), char(0xc0), 0, 0x40, char(0x80), char(0xc0));
}

// The 32 values of columns [c, c + 32) of a row (bytes p = row + c / 2) as 4 vectors of 8 F32 in x's permuted order.
__attribute__((always_inline)) inline void decode32(const uint8_t* p, __m256i t_hi, __m256i t_lo, __m256* v) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
  const __m256i hi = _mm256_shuffle_epi8(t_hi, codes), lo = _mm256_shuffle_epi8(t_lo, codes);
  const __m256i a = _mm256_unpacklo_epi8(lo, hi), bb = _mm256_unpackhi_epi8(lo, hi);  // BF16s
  const __m256i top = _mm256_set1_epi32(int(0xffff0000u));
  v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
  v[1] = _mm256_castsi256_ps(_mm256_and_si256(a, top));
  v[2] = _mm256_castsi256_ps(_mm256_slli_epi32(bb, 16));
  v[3] = _mm256_castsi256_ps(_mm256_and_si256(bb, top));
}

// Rows [r, r + RW) against MT permuted rows of x (n_in apart; RW or MT is 1): y[i · n_out + j] for j < RW, i < MT.
// sc: the rows' block scales, nb a row. Each block is decoded once for the MT rows of x.
template <bool kNv, int RW, int MT>
void rows(const PackedWeight& w, int64_t r, const float* xp, const float* sc, int64_t nb, float factor, float* y,
          bool prefetch) {
  static_assert(RW == 1 || MT == 1);
  const int64_t n_in = w.n_in, n_out = w.n_out, rb = n_in / 2;
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const __m256i t_hi = e2m1_bf16_hi(), t_lo = e2m1_bf16_lo();
  constexpr int NT = RW * MT;
  __m256 t[NT];  // one total a (weight row, x row): two made RW = 4 spill them, a store-forwarding chain a block
  for (int k = 0; k < NT; ++k) t[k] = _mm256_setzero_ps();
  for (int64_t c = 0, b = 0; c < n_in; c += 32, ++b) {
    if (prefetch) {
      for (int64_t k = 0; k < RW * 16; k += 64) prefetch_weights(pf + k);
      pf += RW * 16;
    }
#pragma GCC unroll 4
    for (int j = 0; j < RW; ++j) {
      __m256 v[4];
      decode32(row0 + j * rb + c / 2, t_hi, t_lo, v);
      const float* s = sc + j * nb + (kNv ? 2 * b : b);
      const __m256 s0 = _mm256_broadcast_ss(s), s1 = _mm256_broadcast_ss(s + (kNv ? 1 : 0));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {  // the same operations for each row of x
        const float* xb = xp + i * n_in + c;
        const __m256 p0 = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(v[0], _mm256_loadu_ps(xb)));
        const __m256 p1 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(v[2], _mm256_loadu_ps(xb + 16)));
        t[j + i] = _mm256_fmadd_ps(p1, s1, _mm256_fmadd_ps(p0, s0, t[j + i]));
      }
    }
  }
  for (int j = 0; j < RW; ++j)
    for (int i = 0; i < MT; ++i) {
      const __m256 tt = t[j + i];
      const __m128 s = _mm_add_ps(_mm256_castps256_ps128(tt), _mm256_extractf128_ps(tt, 1));
      const __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));
      y[i * n_out + j] = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1))) * factor;
    }
}

constexpr int kMt = 4;  // rows of x sharing a decoded block (m > 1)

template <bool kNv>
void run(const PackedWeight& w, const float* xp, const std::vector<char>& finite, int64_t m, float* y, int n_threads) {
  const int64_t n_in = w.n_in, n_out = w.n_out, nb = n_in / (kNv ? 16 : 32);
  const float factor = kNv ? w.global_scale * 256.0f : 1.0f;
  const bool parallel = n_threads > 1 && worth_parallel(n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    std::vector<float> sc(size_t(kRw * nb));
    // Rows [r, r + n) (n ≤ kRw): m = 1 a pass of n; else each weight row against kMt rows of x at a time.
    const auto pass = [&](int64_t r, int64_t n) {
      block_scales(w.scale_bytes.data() + r * nb, n * nb, kNv, sc.data());
      if (m == 1) {
        if (n == kRw) rows<kNv, kRw, 1>(w, r, xp, sc.data(), nb, factor, y + r, true);
        else
          for (int64_t j = 0; j < n; ++j) rows<kNv, 1, 1>(w, r + j, xp, sc.data() + j * nb, nb, factor, y + r + j, true);
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const float* s = sc.data() + j * nb;
          int64_t i = 0;
          for (; i + kMt <= m; i += kMt)
            rows<kNv, 1, kMt>(w, r + j, xp + i * n_in, s, nb, factor, y + i * n_out + r + j, i == 0);
          for (; i < m; ++i) rows<kNv, 1, 1>(w, r + j, xp + i * n_in, s, nb, factor, y + i * n_out + r + j, i == 0);
        }
      }
      for (int64_t i = 0; i < m; ++i)  // a row of x with a NaN or an infinity: NaN (the others' rule)
        if (!finite[size_t(i)])
          for (int64_t j = 0; j < n; ++j) y[i * n_out + r + j] = std::numeric_limits<float>::quiet_NaN();
    };
    int64_t r = r0;
    for (; r + kRw <= r1; r += kRw) pass(r, kRw);
    if (r < r1) pass(r, r1 - r);
  }
}

// Rows [r0, r1) of W as F32 value × block scale × global scale into out [.., n_in], in decode32's column order.
void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const bool nv = w.format == WeightFormat::Nvfp4;
  const int64_t n_in = w.n_in, nb = n_in / (nv ? 16 : 32);
  const __m256 factor = _mm256_set1_ps(nv ? w.global_scale * 256.0f : 1.0f);
  const __m256i t_hi = e2m1_bf16_hi(), t_lo = e2m1_bf16_lo();
  std::vector<float> sc(static_cast<size_t>(nb));
  for (int64_t r = r0; r < r1; ++r) {
    block_scales(w.scale_bytes.data() + r * nb, nb, nv, sc.data());
    const uint8_t* row = w.data.data() + r * (n_in / 2);
    float* o = out + r * n_in;
    for (int64_t c = 0, b = 0; c < n_in; c += 32, ++b) {
      __m256 v[4];
      decode32(row + c / 2, t_hi, t_lo, v);
      const __m256 s0 = _mm256_set1_ps(sc[size_t(nv ? 2 * b : b)]), s1 = _mm256_set1_ps(sc[size_t(nv ? 2 * b + 1 : b)]);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(o + c + 8 * k, _mm256_mul_ps(_mm256_mul_ps(v[k], k < 2 ? s0 : s1), factor));
    }
  }
}

// The same from a weight in Rows16 (common/rows16_layout.h), in the 4-bit words' column order (rows16_q4_x_order): each
// row's 4 bytes of a chunk, shifted, give its 8 codes; |v| by vpermps from a table of the 8 magnitudes, the sign bit
// moved into the F32's; the same values as dequant_rows.
void dequant_rows16(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const bool nv = w.format == WeightFormat::Nvfp4;
  const int64_t n_in = w.n_in, bs = nv ? 16 : 32, nb = n_in / bs;
  const __m256 factor = _mm256_set1_ps(nv ? w.global_scale * 256.0f : 1.0f);
  const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i shifts = _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28), sign = _mm256_set1_epi32(8);
  std::vector<float> sc(static_cast<size_t>(nb));
  std::vector<uint8_t> sb(static_cast<size_t>(nb));
  for (int64_t r = r0; r < r1; ++r) {
    rows16_entries(w.scale_bytes.data(), nb, r, sb.data());
    block_scales(sb.data(), nb, nv, sc.data());
    const uint8_t* p = w.data.data() + (r / 16) * (n_in / 8) * 64 + 4 * (r % 16);
    float* o = out + r * n_in;
    for (int64_t c = 0; c < n_in; c += 8) {
      int32_t word;
      std::memcpy(&word, p + c * 8, 4);
      const __m256i code = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);  // vpermps reads the low 3 bits
      const __m256 v = _mm256_xor_ps(_mm256_permutevar8x32_ps(mag, code),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(code, sign), 28)));
      _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(sc[size_t(c / bs)])), factor));
    }
  }
}

void permute_row(const float* x, int64_t n_in, float* xp) { permute_x(x, n_in, xp); }

}  // namespace
#pragma GCC pop_options

bool fp4_avx2_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Mxfp4 && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None ||
      w.n_in % 32 != 0 || m >= kFp4Avx2MaxM || w.rows_layout != RowsLayout::Rows ||
      packed_best_isa() == PackedIsa::Portable)
    return false;
  const int64_t n_in = w.n_in;
  thread_local std::vector<float> xp;
  thread_local std::vector<char> finite;
  thread_local std::vector<float> xr;
  xp.resize(size_t(m * n_in));
  finite.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    float* xi = xp.data() + i * n_in;
    const float* src = x + i * n_in;
    if (w.act_bf16) {  // BF16 activations: x rounded as the reference does
      xr.resize(size_t(n_in));
      round_bf16_f32(src, n_in, xr.data());
      src = xr.data();
    }
    finite[size_t(i)] = permute_x(src, n_in, xi);
    }
  if (w.format == WeightFormat::Nvfp4) run<true>(w, xp.data(), finite, m, y, n_threads);
  else run<false>(w, xp.data(), finite, m, y, n_threads);
  return true;
}

bool fp4_avx2_gemm(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Mxfp4 && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None ||
      w.n_in % 32 != 0 || m < kFp4Avx2MaxM || packed_best_isa() == PackedIsa::Portable ||
      !linear_has_onednn(DType::F32))
    return false;
  const float* xin = x;
  thread_local std::vector<float> xr;
  if (w.act_bf16) {  // BF16 activations: x rounded as the reference does
    xr.resize(size_t(m * w.n_in));
    round_bf16_f32(x, m * w.n_in, xr.data());
    xin = xr.data();
  }
  if (w.rows_layout == RowsLayout::Rows16)
    dense_f32_linear(xin, m, w, y, n_threads, [&](int64_t r0, int64_t r1, float* out) { dequant_rows16(w, r0, r1, out); },
                     rows16_q4_x_order<float>);
  else
    dense_f32_linear(xin, m, w, y, n_threads, [&](int64_t r0, int64_t r1, float* out) { dequant_rows(w, r0, r1, out); },
                     permute_row);
  return true;
}

}  // namespace tp::cpu::detail
