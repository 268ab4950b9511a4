// FP8 (E4M3) weights on AVX-512 BF16 (packed_kernels.h: fp8_bf16_linear): per-tensor or per-channel weight
// scales (not block scales), with F32 activations (FP8 weight-only) or FP8 activations per token / static
// (W8A8-FP8, emulated: x/s rounded to E4M3).
//
// A 32-column chunk of a weight row: its 32 bytes widened to 16-bit lanes and turned into the BF16 of the same
// value (exact: E4M3 is a subset of BF16): a normal code's 7 magnitude bits << 4 plus the exponent rebias
// (120 << 7), a subnormal one (exponent 0) looked up in an 8-entry table (vpermw), the sign bit moved to bit 15.
// The lanes are in column order, as x's BF16 in vdpbf16ps (F32 accumulation). x:
//   FP8 activations: q = E4M3(x / s) as BF16 (exact, one part), y = Σ w·q × weight scale × s;
//   F32 activations: two BF16 parts (x ≈ bf16(x) + bf16(x − bf16(x)), 16 significant bits: the W4A16 kernel's
//   rule, gemm_int4_bf16.cpp), y = Σ × weight scale; BF16 activations (w.act_bf16): bf16(x), one part.
// Each product (a 4-bit-significand weight by an 8-bit one) is exact in F32. Every row of x gets the same
// operations whatever m or tile: a row of a batch has the bits of that row alone. Columns past n_in are masked
// to 0 on load against x's zero padding. W is software-prefetched kPrefetchBytes ahead.
// On Intel, decode sizes (m < kFp8OnednnMinM) run gemm_fp8_avx512.cpp instead (vdpbf16ps issues once every 2 cycles
// there); this file's tiles serve AMD and the oneDNN prefill everywhere.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/fp_formats.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2")))

constexpr int64_t kPrefetchBytes = 8192;
constexpr int kTileM = 4;             // rows of x sharing one decoded chunk
constexpr int64_t kBlockRows = 16;    // weight rows a block (every tile of x meets them before the next block)

// decode()'s table: the BF16 of the 8 subnormal E4M3 magnitudes (code 0-7: code · 2^-9).
TP_BF16 inline __m512i fp8_subtable() {
  const __m512 sub = _mm512_setr_ps(0, 0x1p-9f, 0x2p-9f, 0x3p-9f, 0x4p-9f, 0x5p-9f, 0x6p-9f, 0x7p-9f, 0, 0, 0, 0, 0,
                                    0, 0, 0);
  return (__m512i)_mm512_cvtne2ps_pbh(sub, sub);
}

// The weight's 32 E4M3 bytes at p (n of them; the rest read as 0) -> 32 BF16 lanes.
TP_BF16 __attribute__((always_inline)) inline __m512bh decode(const uint8_t* p, int64_t n, __m512i subtable) {
  const __m256i raw = n >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                              : _mm256_maskz_loadu_epi8(__mmask32(_bzhi_u32(~0u, unsigned(n))), p);
  const __m512i b = _mm512_cvtepu8_epi16(raw);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
  __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
  v = _mm512_mask_permutexvar_epi16(v, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), mag, subtable);
  // v | (b << 8 & 0x8000): the sign
  return (__m512bh)_mm512_ternarylogic_epi32(v, _mm512_slli_epi16(b, 8), _mm512_set1_epi16(short(0x8000)), 0xF8);
}

template <int NP>
TP_BF16 __attribute__((always_inline)) inline __m512 dot_x(__m512 a, __m512bh w, const uint16_t* x, int64_t ps) {
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) a = _mm512_dpbf16_ps(a, w, (__m512bh)_mm512_loadu_si512(x + p * ps));
  return a;
}

// One weight row against MT rows of x (row i's parts at x + (i · NP + p) · ps): y[i · n_out] = Σ × scale[i].
template <int NP, int MT>
TP_BF16 inline void row_fp8(const uint8_t* row, int64_t n_in, const uint16_t* x, int64_t ps, float ws,
                            const float* xs, float* y, int64_t n_out, bool prefetch, __m512i subtable) {
  __m512 a0[MT], a1[MT];
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= n_in; c += 64) {
    if (prefetch) prefetch_weights(reinterpret_cast<const char*>(row + c) + kPrefetchBytes);
    const __m512bh w0 = decode(row + c, 32, subtable), w1 = decode(row + c + 32, 32, subtable);
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      a0[i] = dot_x<NP>(a0[i], w0, x + i * NP * ps + c, ps);
      a1[i] = dot_x<NP>(a1[i], w1, x + i * NP * ps + c + 32, ps);
    }
  }
  for (; c < n_in; c += 32) {
    const __m512bh w0 = decode(row + c, n_in - c, subtable);
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) a0[i] = dot_x<NP>(a0[i], w0, x + i * NP * ps + c, ps);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    const float s = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i])) * ws;
    y[i * n_out] = xs ? s * xs[i] : s;
  }
}

template <int NP>
TP_BF16 void rows_fp8(const PackedWeight& w, int64_t r0, int64_t r1, int64_t m, const uint16_t* x, int64_t ps,
                      const float* xs, float* y) {
  const __m512i subtable = fp8_subtable();
  prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
  const int64_t n_in = w.n_in;
  for (int64_t rb = r0; rb < r1; rb += kBlockRows)
    for (int64_t i0 = 0; i0 < m; i0 += kTileM)
      for (int64_t r = rb; r < std::min(r1, rb + kBlockRows); ++r) {
        const uint8_t* row = w.data.data() + r * w.row_bytes();
        const float ws = w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)];
        const uint16_t* xi = x + i0 * NP * ps;
        const float* si = xs ? xs + i0 : nullptr;
        float* yi = y + i0 * w.n_out + r;
        const bool pf = i0 == 0;
        switch (std::min<int64_t>(kTileM, m - i0)) {
          case 1: row_fp8<NP, 1>(row, n_in, xi, ps, ws, si, yi, w.n_out, pf, subtable); break;
          case 2: row_fp8<NP, 2>(row, n_in, xi, ps, ws, si, yi, w.n_out, pf, subtable); break;
          case 3: row_fp8<NP, 3>(row, n_in, xi, ps, ws, si, yi, w.n_out, pf, subtable); break;
          default: row_fp8<NP, 4>(row, n_in, xi, ps, ws, si, yi, w.n_out, pf, subtable); break;
        }
      }
}

// Weight row r's n_in E4M3 codes -> n_in BF16 (exact) at out (bf16_slab_gemm's decoder).
TP_BF16 void decode_row(const PackedWeight& w, int64_t r, uint16_t* out, int64_t) {
  const __m512i subtable = fp8_subtable();
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  for (int64_t c = 0; c < w.n_in; c += 32) {
    const int64_t n = std::min<int64_t>(32, w.n_in - c);
    _mm512_mask_storeu_epi16(out + c, __mmask32(_bzhi_u32(~0u, unsigned(n))), (__m512i)decode(row + c, n, subtable));
  }
}

}  // namespace

TP_BF16 float fp8_amax(const float* x, int64_t n) {
  __m512 a = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16)
    a = _mm512_max_ps(a, _mm512_abs_ps(_mm512_maskz_loadu_ps(__mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n - c)))), x + c)));
  return _mm512_reduce_max_ps(a);
}

// A row's q = E4M3(x / s) as BF16, 16 at a time, as f32_to_fp8_e4m3 (common/fp_formats.h) rounds: |v| ≥ 448
// saturates to 448; else v on the grid of its binade (step 2^(max(⌊log2 |v|⌋, −6) − 3): the subnormal range
// shares exponent −6's) to nearest even. q has at most 4 significant bits: its BF16 is its F32's top half.
TP_BF16 void fp8_act_row_bf16(const float* x, int64_t n, float s, uint16_t* out) {
  const __m512 sv = _mm512_set1_ps(s), vmax = _mm512_set1_ps(kFp8E4M3Max), lo = _mm512_set1_ps(-6.0f),
               three = _mm512_set1_ps(3.0f);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n - c))));
    const __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + c), sv);
    const __m512 a = _mm512_abs_ps(v);
    const __m512 e = _mm512_sub_ps(_mm512_max_ps(_mm512_getexp_ps(a), lo), three);  // log2 of the step
    __m512 q = _mm512_scalef_ps(_mm512_roundscale_ps(_mm512_scalef_ps(a, _mm512_sub_ps(_mm512_setzero_ps(), e)),
                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                e);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, vmax, _CMP_GE_OQ), vmax);
    const __m512i bits = _mm512_or_si512(_mm512_castps_si512(q),
                                         _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int(0x80000000u))));
    _mm256_mask_storeu_epi16(out + c, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
}

bool fp8_bf16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Fp8E4M3 || w.block_out > 0 || !cpu_has_avx512bf16()) return false;
  const bool fp8_act = w.act == ActQuant::Fp8Dynamic || w.act == ActQuant::Fp8Static;
  if (w.act != ActQuant::None && !(fp8_act && (w.act == ActQuant::Fp8Static || w.act_group == 0))) return false;
  const int np = fp8_act || w.act_bf16 ? 1 : 2;  // x exact in BF16 (E4M3 values, or BF16 activations): one part
  // Each part of a row of x zero-padded to ps columns: the tiles read past n_in; the prefill matmul takes the
  // row's parts side by side as one row of np · ps.
  const bool prefill = m >= kFp8OnednnMinM && onednn_supports(DType::BF16);
  const int64_t n_in = w.n_in, ps = prefill ? (n_in + 31) / 32 * 32 : n_in + 32;
  thread_local std::vector<uint16_t> xb;
  thread_local std::vector<float> xs;
  xb.resize(size_t(m * np * ps));
  // x's rows are prepared in parallel at prefill sizes (per row the same operations: the bits do not depend on it).
  // thread_local: the pool's threads write the caller's buffers, through these pointers.
  const int prep_threads = prefill ? n_threads : 1;
  uint16_t* const xbd = xb.data();
  if (fp8_act) {  // q = E4M3(x / s) (the reference's rule: fake_quantize_activations), kept as BF16 (exact)
    xs.resize(size_t(m));
    float* const xsw = xs.data();
#pragma omp parallel for schedule(static) num_threads(prep_threads) if (prep_threads > 1)
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * n_in;
      float s = w.act_scale;
      if (w.act == ActQuant::Fp8Dynamic) s = fp8_amax(xr, n_in) / kFp8E4M3Max;
      xsw[i] = s;
      std::fill(xbd + i * ps, xbd + (i + 1) * ps, uint16_t(0));
      if (s != 0.0f) fp8_act_row_bf16(xr, n_in, s, xbd + i * ps);
    }
  } else {
    split_bf16_parts(x, m, n_in, ps, xbd, prep_threads, 1, np);
  }
  const uint16_t* xd = xbd;
  const float* xsd = fp8_act ? xs.data() : nullptr;
  if (prefill) {
    bf16_slab_gemm(xd, m, ps, np, w, decode_row, xsd, y, n_threads);
    return true;
  }
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, 1, omp_get_thread_num(), omp_get_num_threads());
    if (np == 1)
      rows_fp8<1>(w, r0, r1, m, xd, ps, xsd, y);
    else
      rows_fp8<2>(w, r0, r1, m, xd, ps, xsd, y);
  }
  return true;
}

}  // namespace tp::cpu::detail
