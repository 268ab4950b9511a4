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
//   rule, gemm_int4_bf16.cpp), y = Σ × weight scale.
// Each product (a 4-bit-significand weight by an 8-bit one) is exact in F32. Every row of x gets the same
// operations whatever m or tile: a row of a batch has the bits of that row alone. Columns past n_in are masked
// to 0 on load against x's zero padding. W is software-prefetched kPrefetchBytes ahead.
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
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row + c) + kPrefetchBytes, _MM_HINT_T0);
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
  const __m512 sub = _mm512_setr_ps(0, 0x1p-9f, 0x2p-9f, 0x3p-9f, 0x4p-9f, 0x5p-9f, 0x6p-9f, 0x7p-9f, 0, 0, 0, 0, 0,
                                    0, 0, 0);
  const __m512i subtable = (__m512i)_mm512_cvtne2ps_pbh(sub, sub);
  {  // the first kPrefetchBytes of the range, which the running prefetch (that far ahead) does not cover
    const char* p = reinterpret_cast<const char*>(w.data.data() + r0 * w.row_bytes());
    const int64_t n = std::min(kPrefetchBytes, (r1 - r0) * w.row_bytes());
    for (int64_t b = 0; b < n; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
  }
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

// 16 F32 -> BF16 (round to nearest even).
TP_BF16 inline __m256i bf16_of(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
TP_BF16 inline __m512 f32_of(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }

// F32 x -> two BF16 parts a row (part p at out + (i · 2 + p) · ps), zero-padded.
TP_BF16 void split2(const float* x, int64_t m, int64_t n_in, int64_t ps, uint16_t* out) {
  std::memset(out, 0, size_t(m * 2 * ps) * 2);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n_in; c += 16) {
      const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n_in - c))));
      const __m512 v = _mm512_maskz_loadu_ps(k, x + i * n_in + c);
      const __m256i p0 = bf16_of(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (i * 2) * ps + c), p0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (i * 2 + 1) * ps + c), bf16_of(_mm512_sub_ps(v, f32_of(p0))));
    }
}

TP_BF16 float amax16(const float* x, int64_t n) {
  __m512 a = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16)
    a = _mm512_max_ps(a, _mm512_abs_ps(_mm512_maskz_loadu_ps(__mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n - c)))), x + c)));
  return _mm512_reduce_max_ps(a);
}

// A row's q = E4M3(x / s) as BF16, 16 at a time, as f32_to_fp8_e4m3 (common/fp_formats.h) rounds: |v| ≥ 448
// saturates to 448; else v on the grid of its binade (step 2^(max(⌊log2 |v|⌋, −6) − 3): the subnormal range
// shares exponent −6's) to nearest even. q has at most 4 significant bits: its BF16 is its F32's top half.
TP_BF16 void fp8_act_row(const float* x, int64_t n, float s, uint16_t* out) {
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

// A weight row's n_in E4M3 codes -> n_in BF16 (exact) at out.
TP_BF16 void decode_row(const uint8_t* row, int64_t n_in, __m512i subtable, uint16_t* out) {
  for (int64_t c = 0; c < n_in; c += 32) {
    const int64_t n = std::min<int64_t>(32, n_in - c);
    _mm512_mask_storeu_epi16(out + c, __mmask32(_bzhi_u32(~0u, unsigned(n))), (__m512i)decode(row + c, n, subtable));
  }
}

// Prefill (m ≥ kFp8OnednnMinM): x's BF16 rows xk [m, np · ps] (np = 1: q = E4M3(x / s); 2: F32 x's two parts
// side by side; each part zero-padded from n_in to ps) against W decoded to BF16 kFp8SlabRows rows at a time
// (each row [w, 0…] once a part) by oneDNN's BF16 matmul, F32 accumulation; then y × weight scale (× x's scale),
// as the tiles.
constexpr int64_t kFp8SlabRows = 256;
TP_BF16 void fp8_prefill(const uint16_t* xk, int64_t m, int64_t ps, int np, const PackedWeight& w, const float* xs,
                         float* y, int n_threads) {
  const __m512 sub = _mm512_setr_ps(0, 0x1p-9f, 0x2p-9f, 0x3p-9f, 0x4p-9f, 0x5p-9f, 0x6p-9f, 0x7p-9f, 0, 0, 0, 0, 0,
                                    0, 0, 0);
  const __m512i subtable = (__m512i)_mm512_cvtne2ps_pbh(sub, sub);
  const int64_t n_in = w.n_in, n_out = w.n_out, k = np * ps, slab_rows = std::min(kFp8SlabRows, n_out);
  thread_local std::vector<uint16_t> wb;
  if (int64_t(wb.size()) < slab_rows * k) wb.resize(size_t(slab_rows * k));
  uint16_t* const slab = wb.data();  // (thread_local: the pool's threads must use the caller's buffer)
  for (int64_t s0 = 0; s0 < n_out; s0 += slab_rows) {
    const int64_t rows = std::min(n_out, s0 + slab_rows) - s0;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* out = slab + r * k;
      decode_row(w.data.data() + (s0 + r) * w.row_bytes(), n_in, subtable, out);
      std::fill(out + n_in, out + ps, uint16_t(0));
      for (int p = 1; p < np; ++p) std::memcpy(out + p * ps, out, size_t(ps) * 2);
    }
    onednn_matmul_bf16(xk, m, k, slab, rows, y + s0, n_out, n_threads);
  }
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      const float s = y[i * n_out + r] * (w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)]);
      y[i * n_out + r] = xs ? s * xs[i] : s;
    }
}

}  // namespace

bool fp8_bf16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Fp8E4M3 || w.block_out > 0 || !cpu_has_avx512bf16()) return false;
  const bool fp8_act = w.act == ActQuant::Fp8Dynamic || w.act == ActQuant::Fp8Static;
  if (w.act != ActQuant::None && !(fp8_act && (w.act == ActQuant::Fp8Static || w.act_group == 0))) return false;
  const int np = fp8_act ? 1 : 2;
  // Each part of a row of x zero-padded to ps columns: the tiles read past n_in; the prefill matmul takes the
  // row's parts side by side as one row of np · ps.
  const bool prefill = m >= kFp8OnednnMinM && onednn_supports(DType::BF16);
  const int64_t n_in = w.n_in, ps = prefill ? (n_in + 31) / 32 * 32 : n_in + 32;
  thread_local std::vector<uint16_t> xb;
  thread_local std::vector<float> xs;
  xb.resize(size_t(m * np * ps));
  if (fp8_act) {  // q = E4M3(x / s) (the reference's rule: fake_quantize_activations), kept as BF16 (exact)
    xs.resize(size_t(m));
    std::fill(xb.begin(), xb.end(), uint16_t(0));
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * n_in;
      float s = w.act_scale;
      if (w.act == ActQuant::Fp8Dynamic) s = amax16(xr, n_in) / kFp8E4M3Max;
      xs[size_t(i)] = s;
      if (s != 0.0f) fp8_act_row(xr, n_in, s, xb.data() + i * ps);
    }
  } else {
    split2(x, m, n_in, ps, xb.data());
  }
  const uint16_t* xd = xb.data();
  const float* xsd = fp8_act ? xs.data() : nullptr;
  if (prefill) {
    fp8_prefill(xd, m, ps, np, w, xsd, y, n_threads);
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
