// W8A8 / W4A8: Int8 or Int4 weights with int8 activations, as int8 × int8 dot products (packed_kernels.h).
// x is quantized once a call: q = clamp(round(x / s), -127, 127) with s = max|x| / 127 per row (or per
// act_group columns), or the static act_scale — the reference's rule (packed_linear.h). A weight row is read as
// int8 (Int4: 32 nibbles at a time unpacked in registers to q = u - 8 in column order); over each
// segment (the finer of the weight's scale groups and the activations' groups)
//   y += w_scale · x_scale · (Σ qw·qx − zero · Σ qx)        (Σ in int32: exact)
// Dot products: AVX2 vpmaddubsw on |qw| (unsigned) and qx · sign(qw) (qw may be -128, qx never is), summed
// by vpmaddwd; AVX-512 VNNI vpdpbusd on the same pair (Int4); Int8 on AVX-512 VNNI: the decode tile
// row_s8_vnni below (qw ^ 0x80 against qx, prefetched); portable: a scalar loop. Prefill (m ≥ kW8a8OnednnMinM,
// one segment a row): oneDNN's int8 matmul, then the scales. Int8 held in Rows64 (AMX CPUs: oneDNN's own weight
// order, common/rows16_layout.h): oneDNN reads it as it is, each thread its chunks of rows of x; below the prefill's
// m gemm_int_w8a8_rows64.cpp's kernel; other ISAs decline it (the reference reads it). Without VNNI (AVX2; AVX-512
// without VNNI), every m: gemm_int_w8a8_avx2.cpp (4-row decode blocks, interleaved 16-row prefill panels), the
// loops below only where it declines (segments not a multiple of 4 columns).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

int32_t dot_portable(const int8_t* a, const int8_t* b, int64_t n) {
  int32_t s = 0;
  for (int64_t k = 0; k < n; ++k) s += int32_t(a[k]) * int32_t(b[k]);
  return s;
}

__attribute__((target("avx2,fma"))) int32_t dot_avx2(const int8_t* w, const int8_t* x, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, ones));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s) + dot_portable(w + k, x + k, n - k);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) int32_t dot_vnni(const int8_t* w, const int8_t* x,
                                                                                  int64_t n) {
  __m512i acc = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m512i wv = _mm512_loadu_si512(w + k);
    const __m512i xv = _mm512_loadu_si512(x + k);
    const __mmask64 neg = _mm512_movepi8_mask(wv);  // qw < 0
    const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
    acc = _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(wv), xs);
  }
  return _mm512_reduce_add_epi32(acc) + dot_portable(w + k, x + k, n - k);
}

using DotFn = int32_t (*)(const int8_t*, const int8_t*, int64_t);

// Int4: the dot of n columns whose nibbles start at byte w (column 2j low, 2j+1 high; q = u - 8).
int32_t dot4_portable(const uint8_t* w, const int8_t* x, int64_t n) {
  int32_t s = 0;
  for (int64_t k = 0; k < n; ++k) s += (int32_t((w[k / 2] >> (4 * (k % 2))) & 15) - 8) * int32_t(x[k]);
  return s;
}

// 32 nibbles (16 bytes) -> 32 int8 q = u - 8 in column order.
__attribute__((target("avx2,fma"))) inline __m256i unpack_q4_avx2(const uint8_t* w) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i m = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), eight);                     // even columns
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);  // odd columns
  return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

__attribute__((target("avx2,fma"))) void unpack_q4_store(const uint8_t* w, int8_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), unpack_q4_avx2(w));
}

__attribute__((target("avx2,fma"))) int32_t dot4_avx2(const uint8_t* w, const int8_t* x, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i wv = unpack_q4_avx2(w + k / 2);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, ones));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s) + dot4_portable(w + k / 2, x + k, n - k);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) int32_t dot4_vnni(const uint8_t* w, const int8_t* x,
                                                                                        int64_t n) {
  __m512i acc = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(unpack_q4_avx2(w + k / 2)), unpack_q4_avx2(w + k / 2 + 16), 1);
    const __m512i xv = _mm512_loadu_si512(x + k);
    const __mmask64 neg = _mm512_movepi8_mask(wv);
    const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
    acc = _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(wv), xs);
  }
  return _mm512_reduce_add_epi32(acc) + dot4_avx2(w + k / 2, x + k, n - k);
}

using Dot4Fn = int32_t (*)(const uint8_t*, const int8_t*, int64_t);

// Int8 weights on AVX-512 VNNI (decode, small m): one weight row against MT rows of quantized x at a time.
// vpdpbusd multiplies unsigned by signed bytes, so each 64-byte weight vector is flipped once in a register
// (w ^ 0x80 = w + 128, unsigned) and feeds MT dot products with the signed qx; the segment's int32 sum is then
// Σ w·qx + 128·Σ qx, and 128·Σ qx (with the zero point's z·Σ qx) is taken off in wrapping int32 — the same exact
// integer as the other paths, so y has the same bits for every m and every tile. The row is read in memory order
// with a software prefetch kPrefetchBytes ahead (one 64-byte line a line read): as for the BF16 GEMV
// (kernels/cpu/gemv.cpp), the hardware prefetcher alone leaves DRAM bandwidth unused on Zen 4.
// Intel (the AMX Xeon of bench/results/xeon-amx-kernels-20261203.md §11): 2048 — CT-W8A8 tg64 +6-10% over 16384;
// with the prefetch into L2 there (gemv.h prefetch_weights) 6144: tg128 82.0 (L1, 2048) / 81.7 (L2, 2048) / 87.7.
const int64_t kPrefetchBytes = cpu_is_intel() ? 6144 : 16384;

template <int MT>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2"), always_inline)) inline void row_s8_vnni(
    const int8_t* row, int64_t n_in, int64_t seg, int64_t n_seg, int64_t wg, const float* sw, const int8_t* zw,
    const int8_t* xq, const float* xs, const int32_t* xsum, float* y, int64_t n_out, bool prefetch) {
  constexpr int NA = MT == 1 ? 2 : 1;  // accumulators a row of x: independent vpdpbusd chains
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  float out[MT];
  for (int i = 0; i < MT; ++i) out[i] = 0.0f;
  for (int64_t sg = 0; sg < n_seg; ++sg) {
    const int64_t c0 = sg * seg, c1 = std::min(n_in, c0 + seg), g = c0 / wg;
    __m512i acc[MT][NA];
    for (int i = 0; i < MT; ++i)
      for (int a = 0; a < NA; ++a) acc[i][a] = _mm512_setzero_si512();
    int64_t c = c0;
    for (; c + 64 * NA <= c1; c += 64 * NA)
      for (int a = 0; a < NA; ++a) {  // NA chunks, one a chain
        if (prefetch) prefetch_weights(reinterpret_cast<const char*>(row + c + 64 * a) + kPrefetchBytes);
        const __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(row + c + 64 * a), flip);
        for (int i = 0; i < MT; ++i)
          acc[i][a] = _mm512_dpbusd_epi32(acc[i][a], wv, _mm512_loadu_si512(xq + i * n_in + c + 64 * a));
      }
    for (; c + 64 <= c1; c += 64) {
      if (prefetch) prefetch_weights(reinterpret_cast<const char*>(row + c) + kPrefetchBytes);
      const __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(row + c), flip);
      for (int i = 0; i < MT; ++i) acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], wv, _mm512_loadu_si512(xq + i * n_in + c));
    }
    if (c < c1) {  // masked: the missing columns read as w = 0 (flipped: 128) against qx = 0
      const __mmask64 mask = _bzhi_u64(~uint64_t(0), unsigned(c1 - c));
      const __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, row + c), flip);
      for (int i = 0; i < MT; ++i)
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], wv, _mm512_maskz_loadu_epi8(mask, xq + i * n_in + c));
    }
    const uint32_t off = uint32_t(128 + (zw ? int32_t(zw[g]) : 0));
    for (int i = 0; i < MT; ++i) {
      __m512i a = acc[i][0];
      for (int j = 1; j < NA; ++j) a = _mm512_add_epi32(a, acc[i][j]);
      const int32_t d = int32_t(uint32_t(_mm512_reduce_add_epi32(a)) - off * uint32_t(xsum[i * n_seg + sg]));
      out[i] += sw[g] * xs[i * n_seg + sg] * float(d);
    }
  }
  for (int i = 0; i < MT; ++i) y[i * n_out] = out[i];
}

// Rows [r0, r1) of an Int8 weight against all m rows of x: each row once from memory (prefetched), then from
// L1 for the next groups of 4 rows of x.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2"))) void rows_s8_vnni(
    const PackedWeight& w, int64_t r0, int64_t r1, int64_t m, int64_t seg, int64_t n_seg, int64_t wg,
    const int8_t* xq, const float* xs, const int32_t* xsum, float* y) {
  const int64_t n_in = w.n_in, n_out = w.n_out, ng = w.n_groups();
  prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* row = reinterpret_cast<const int8_t*>(w.data.data() + r * w.row_bytes());
    const float* sw = w.scales.data() + r * ng;
    const int8_t* zw = w.zeros.empty() ? nullptr : w.zeros.data() + r * ng;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int8_t* xi = xq + i0 * n_in;
      const float* si = xs + i0 * n_seg;
      const int32_t* ui = xsum + i0 * n_seg;
      float* yi = y + i0 * n_out + r;
      const bool pf = i0 == 0;
      switch (std::min<int64_t>(4, m - i0)) {
        case 1: row_s8_vnni<1>(row, n_in, seg, n_seg, wg, sw, zw, xi, si, ui, yi, n_out, pf); break;
        case 2: row_s8_vnni<2>(row, n_in, seg, n_seg, wg, sw, zw, xi, si, ui, yi, n_out, pf); break;
        case 3: row_s8_vnni<3>(row, n_in, seg, n_seg, wg, sw, zw, xi, si, ui, yi, n_out, pf); break;
        default: row_s8_vnni<4>(row, n_in, seg, n_seg, wg, sw, zw, xi, si, ui, yi, n_out, pf); break;
      }
    }
  }
}

// Activation quantization (the reference's rule, bit for bit): amax of n values; q = clamp(round-half-even(x / s),
// ±127) (0 where s = 0). The AVX-512 versions divide and round exactly as the scalar ones do.
float amax_portable(const float* x, int64_t n) {
  float a = 0;
  for (int64_t c = 0; c < n; ++c) a = std::max(a, std::fabs(x[c]));
  return a;
}

void quantize_portable(const float* x, int64_t n, float s, int8_t* q) {
  for (int64_t c = 0; c < n; ++c) q[c] = s == 0.0f ? 0 : int8_t(std::clamp(std::nearbyint(x[c] / s), -127.0f, 127.0f));
}

// Four chains of vmaxps (one ran at the instruction's latency: 3 % of a W8A8 prefill on the AMX Xeon).
__attribute__((target("avx512f,avx512bw,avx512vl"))) float amax_avx512(const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    a0 = _mm512_max_ps(a0, _mm512_abs_ps(_mm512_loadu_ps(x + c)));
    a1 = _mm512_max_ps(a1, _mm512_abs_ps(_mm512_loadu_ps(x + c + 16)));
    a2 = _mm512_max_ps(a2, _mm512_abs_ps(_mm512_loadu_ps(x + c + 32)));
    a3 = _mm512_max_ps(a3, _mm512_abs_ps(_mm512_loadu_ps(x + c + 48)));
  }
  for (; c + 16 <= n; c += 16) a0 = _mm512_max_ps(a0, _mm512_abs_ps(_mm512_loadu_ps(x + c)));
  const __m512 a = _mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3));
  return std::max(_mm512_reduce_max_ps(a), amax_portable(x + c, n - c));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_avx512(const float* x, int64_t n, float s, int8_t* q) {
  if (s == 0.0f) {
    std::memset(q, 0, size_t(n));
    return;
  }
  const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const bool fast = std::fabs(s) >= kQuotientMinScale && std::fabs(s) <= kQuotientMaxScale;
  const __m512 rv = _mm512_set1_ps(1.0f / s), inf = _mm512_set1_ps(INFINITY);
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    __m512 d;
    if (fast) {  // x / s exactly (Markstein): q = x·(1/s), r = x − q·s (exact), q + r·(1/s); an infinite q kept
      const __m512 q = _mm512_mul_ps(xv, rv);
      const __m512 q1 = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, sv, xv), rv, q);
      d = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(_mm512_abs_ps(q), inf, _CMP_LT_OQ), q1);
    } else {
      d = _mm512_div_ps(xv, sv);
    }
    __m512 v = _mm512_roundscale_ps(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + c), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  quantize_portable(x + c, n - c, s, q + c);
}

// quantize_avx512 where s = amax(x[0, n)) / 127 of these very values and s is in [kQuotientMinScale,
// kQuotientMaxScale] (dynamic activation scales): |x / s| <= 127 · (1 + 2^-24), whose correct rounding rounds to at
// most 127 — no clamp; and no quotient overflows — no check. The same bits at 5 vector ops instead of 11 (x's
// quantization and amax were 5.6 % of a 2-thread W8A8 prefill on the AMX Xeon).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_amax_avx512(const float* x, int64_t n, float s,
                                                                               int8_t* q) {
  const __m512 sv = _mm512_set1_ps(s), rv = _mm512_set1_ps(1.0f / s);
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 xv = _mm512_loadu_ps(x + c);
    const __m512 q0 = _mm512_mul_ps(xv, rv);
    const __m512 d = _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, sv, xv), rv, q0);  // x / s exactly (Markstein)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + c),
                     _mm512_cvtsepi32_epi8(_mm512_cvt_roundps_epi32(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
  quantize_portable(x + c, n - c, s, q + c);
}

int32_t sum_s8(const int8_t* q, int64_t n) {
  int32_t s = 0;
  for (int64_t c = 0; c < n; ++c) s += q[c];
  return s;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2"))) int32_t sum_s8_vnni(const int8_t* q, int64_t n) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(q + c));
  if (c < n) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t(0), unsigned(n - c)), q + c));
  return _mm512_reduce_add_epi32(acc);
}

// The prefill epilogue, 16 outputs at a time: y[r] = (w_scale[r] · x_scale) · float(acc[r]) — the scalar
// loop's operations in its order (the same bits). acc may be y itself. Returns the outputs done (whole vectors).
__attribute__((target("avx512f,avx512bw,avx512vl"))) int64_t scale_row_avx512(const int32_t* acc, const float* ws,
                                                                              float xs, int64_t n, float* y) {
  const __m512 xv = _mm512_set1_ps(xs);
  int64_t r = 0;
  for (; r + 16 <= n; r += 16)
    _mm512_storeu_ps(y + r, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(ws + r), xv),
                                          _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + r))));
  return r;
}

// Rows of x a oneDNN GEMM with Rows64 weights (at most): 64 × 3072 int32 sums (768 KiB) stay in L2 for the
// epilogue. SmolLM2 CT-W8A8 pp512 at 1 thread on the AMX Xeon (2026-12-07, alternated 3 times): chunks of 32 / 64 / 96
// / 128 / 256 rows 2960 / 3020 / 2860 / 2940 / 2930 tok/s, the row-major weights with oneDNN's copy 2825.
constexpr int64_t kRows64ChunkM = 64;

}  // namespace

void quantize_s8(const float* x, int64_t n, float s, int8_t* q, PackedIsa isa) {
  if (isa == PackedIsa::Avx512)
    quantize_avx512(x, n, s, q);
  else if (isa == PackedIsa::Avx2)
    quantize_avx2(x, n, s, q);
  else
    quantize_portable(x, n, s, q);
}

bool cpu_has_avx512vnni() {
  static const bool has = cpu_has_avx512f() && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool int_w8a8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  if ((w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4) || !w.g_idx.empty()) return false;
  if (w.act != ActQuant::Int8Dynamic && w.act != ActQuant::Int8Static) return false;
  // Rows64 (oneDNN's AMX int8 order, gemm_int_w8a8_rows64.cpp): on AVX-512 VNNI only; elsewhere the reference,
  // which reads any layout
  const bool rows64 = w.rows_layout == RowsLayout::Rows64;
  if (rows64 && !(isa == PackedIsa::Avx512 && cpu_has_avx512vnni())) return false;
  const int64_t n_in = w.n_in, n_groups = w.n_groups();
  const int64_t wg = n_groups > 1 ? w.group_size : n_in;
  const int64_t ag = w.act == ActQuant::Int8Dynamic && w.act_group > 0 ? w.act_group : n_in;
  const int64_t seg = std::min(wg, ag);
  if (wg % seg != 0 || ag % seg != 0) return false;
  const int64_t n_seg = (n_in + seg - 1) / seg;
  DotFn dot = dot_portable;
  Dot4Fn dot4 = dot4_portable;
  if (isa == PackedIsa::Avx512 && cpu_has_avx512vnni()) {
    dot = dot_vnni;
    dot4 = dot4_vnni;
  } else if (isa != PackedIsa::Portable) {
    dot = dot_avx2;
    dot4 = dot4_avx2;
  }
  if (w.format == WeightFormat::Int4 && n_seg > 1 && seg % 2 != 0) return false;  // segments start on whole bytes

  // x -> int8 [m, n_in], scales [m, n_seg] (per segment, repeated within an activation group), Σ qx [m, n_seg]
  // (only read with zero points).
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  thread_local std::vector<int32_t> xsum;
  xq.resize(size_t(m * n_in));
  xs.resize(size_t(m * n_seg));
  xsum.assign(size_t(m * n_seg), 0);
  const bool vec = isa == PackedIsa::Avx512;
  // AVX2 without VNNI (Zen 3 and older): the kernels of gemm_int_w8a8_avx2.cpp, for every m (oneDNN's pre-VNNI
  // int8 GEMM saturates: packed_kernels.h).
  const bool avx2 = isa == PackedIsa::Avx2 || (vec && !cpu_has_avx512vnni());
  const bool vnni8 = vec && cpu_has_avx512vnni() && w.format == WeightFormat::Int8;
  // Prefill: one int8 GEMM through oneDNN into exact int32 sums, then the scales (per-channel weight scales,
  // per-token or static activation scales: one segment a row). It reads Σ qx only with zero points.
  const bool onednn = n_seg == 1 && m >= kW8a8OnednnMinM && isa != PackedIsa::Portable && !avx2 &&
                      (!rows64 || onednn_s8_rows64_supported());
  const bool zeros = !w.zeros.empty(), sums = zeros || (vnni8 && !onednn);
  int8_t* xqw = xq.data();
  float* xsw = xs.data();
  int32_t* xsumw = xsum.data();
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1 && m * n_in >= (int64_t(1) << 15))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t a0 = 0; a0 < n_in; a0 += ag) {
      const int64_t a1 = std::min(n_in, a0 + ag);
      const float* xr = x + i * n_in;
      float s = w.act_scale;
      if (w.act == ActQuant::Int8Dynamic)
        s = (vec ? amax_avx512(xr + a0, a1 - a0) : avx2 ? amax_avx2(xr + a0, a1 - a0) : amax_portable(xr + a0, a1 - a0)) / 127.0f;
      if (vec && w.act == ActQuant::Int8Dynamic && s >= kQuotientMinScale && s <= kQuotientMaxScale)
        quantize_amax_avx512(xr + a0, a1 - a0, s, xqw + i * n_in + a0);
      else if (vec)
        quantize_avx512(xr + a0, a1 - a0, s, xqw + i * n_in + a0);
      else if (avx2)
        quantize_avx2(xr + a0, a1 - a0, s, xqw + i * n_in + a0);
      else
        quantize_portable(xr + a0, a1 - a0, s, xqw + i * n_in + a0);
      if (sums)
        for (int64_t c = a0; c < a1;) {  // Σ qx of each segment within [a0, a1)
          const int64_t e = std::min(a1, (c / seg + 1) * seg);
          xsumw[i * n_seg + c / seg] += vnni8 ? sum_s8_vnni(xqw + i * n_in + c, e - c) : sum_s8(xqw + i * n_in + c, e - c);
          c = e;
        }
      for (int64_t sg = a0 / seg; sg * seg < a1; ++sg) xsw[i * n_seg + sg] = s;
    }

  if (onednn) {
    thread_local std::vector<int8_t> w8;
    const int8_t* wq = reinterpret_cast<const int8_t*>(w.data.data());
    if (w.format == WeightFormat::Int4) {  // nibbles -> int8 once a call (n_out · n_in bytes, against m× the MACs)
      w8.resize(size_t(w.n_out * n_in + 32));
      int8_t* w8d = w8.data();
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
      for (int64_t r = 0; r < w.n_out; ++r) {
        const uint8_t* row = w.data.data() + r * w.row_bytes();
        int8_t* out = w8d + r * n_in;
        int64_t c = 0;
        for (; c + 32 <= n_in; c += 32) unpack_q4_store(row + c / 2, out + c);
        for (; c < n_in; ++c) out[c] = int8_t(int((row[c / 2] >> (4 * (c % 2))) & 15) - 8);
      }
      wq = w8d;
    }
    // The int32 sums go into y itself (same size) and are scaled in place: one pass over y instead of an
    // [m, n_out] buffer written, read back and y written (the epilogue was 0.2 ms of a 512 × 1536-output call).
    int32_t* const ad = reinterpret_cast<int32_t*>(y);
    const int64_t n_out = w.n_out;
    const auto scale_row = [&](int64_t i) {
      int64_t r = vec && !zeros ? scale_row_avx512(ad + i * n_out, w.scales.data(), xsw[i], n_out, y + i * n_out) : 0;
      for (; r < n_out; ++r) {
        int32_t d;
        std::memcpy(&d, y + i * n_out + r, sizeof d);
        if (zeros) d -= int32_t(w.zeros[size_t(r)]) * xsumw[i];
        y[i * n_out + r] = w.scales[size_t(r)] * xsw[i] * float(d);
      }
    };
    bool done = true;
    if (rows64) {
      // W in oneDNN's own order (no per-call copy of it to repeat): each thread its chunks of kRows64ChunkM rows of
      // x, one single-threaded GEMM each, and their epilogue while the sums are in L2 — no barrier between them (x
      // quantized a chunk at a time there instead of all above: 1-3 % slower)
      const int64_t chunk = std::min(kRows64ChunkM, (m + n_threads - 1) / n_threads);
#pragma omp parallel num_threads(n_threads) if (n_threads > 1) reduction(&& : done)
      for (int64_t i0 = omp_get_thread_num() * chunk; i0 < m && done; i0 += omp_get_num_threads() * chunk) {
        const int64_t i1 = std::min(m, i0 + chunk);
        try {
          done = onednn_s8_gemm(xqw + i0 * n_in, i1 - i0, wq, n_out, n_in, ad + i0 * n_out, 1, true);
        } catch (const std::exception&) {  // not out of the parallel region: the decode kernel below instead
          done = false;
        }
        if (done)
          for (int64_t i = i0; i < i1; ++i) scale_row(i);
      }
    } else if ((done = onednn_s8_gemm(xq.data(), m, wq, n_out, n_in, ad, n_threads))) {
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
      for (int64_t i = 0; i < m; ++i) scale_row(i);
    }
    if (done) return true;
    if (vnni8 && !zeros)  // no oneDNN int8 matmul after all: the tiles below read Σ qx
      for (int64_t i = 0; i < m; ++i) xsumw[i] = sum_s8_vnni(xqw + i * n_in, n_in);
  }

  if (rows64) return rows64_s8_gemv(w, m, xq.data(), xs.data(), xsum.data(), y, n_threads);
  if (avx2 && w8a8_avx2_rows(w, m, xq.data(), xs.data(), xsum.data(), seg, n_seg, wg, y, n_threads)) return true;

  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
  const int8_t* xqd = xq.data();
  const float* xsd = xs.data();
  const int32_t* xsumd = xsum.data();
  if (vnni8) {
#pragma omp parallel num_threads(n_threads) if (parallel)
    {
      const auto [r0, r1] = thread_rows(w.n_out, 1, omp_get_thread_num(), omp_get_num_threads());
      rows_s8_vnni(w, r0, r1, m, seg, n_seg, wg, xqd, xsd, xsumd, y);
    }
    return true;
  }
  // Int4 against several rows of x: the row's nibbles unpacked once (in registers, 32 at a time) into an L1
  // buffer that every row of x reuses; against one or two rows, unpacked inside the dot product.
  const bool int4 = w.format == WeightFormat::Int4, unpack_row = int4 && m > 2;
  const bool wide = isa != PackedIsa::Portable;
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    std::vector<int8_t> buf(unpack_row ? size_t(n_in + 32) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.n_out; ++r) {
      const uint8_t* row = w.data.data() + r * w.row_bytes();
      const int8_t* wq = reinterpret_cast<const int8_t*>(row);
      if (unpack_row) {
        int64_t c = 0;
        if (wide)
          for (; c + 32 <= n_in; c += 32) unpack_q4_store(row + c / 2, buf.data() + c);
        for (; c < n_in; ++c) buf[size_t(c)] = int8_t(int((row[c / 2] >> (4 * (c % 2))) & 15) - 8);
        wq = buf.data();
      }
      const float* sw = w.scales.data() + r * n_groups;
      const int8_t* zw = w.zeros.empty() ? nullptr : w.zeros.data() + r * n_groups;
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t sg = 0; sg < n_seg; ++sg) {
          const int64_t c0 = sg * seg, len = std::min(seg, n_in - c0), g = n_groups > 1 ? c0 / wg : 0;
          int32_t d = int4 && !unpack_row ? dot4(row + c0 / 2, xqd + i * n_in + c0, len)
                                          : dot(wq + c0, xqd + i * n_in + c0, len);
          if (zw) d -= int32_t(zw[g]) * xsumd[i * n_seg + sg];
          acc += sw[g] * xsd[i * n_seg + sg] * float(d);
        }
        y[i * w.n_out + r] = acc;
      }
    }
  }
  return true;
}

}  // namespace tp::cpu::detail
