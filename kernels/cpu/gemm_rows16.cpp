// MXFP4 / NVFP4 decode in GEMM form on AVX512-BF16 (fp4_rows16.h; the layout: common/fp4_layout.h Rows16). Per block of 16 weight rows and 8 columns at
// k0: one 64-byte load, shifted right by 0 / 4 / 8 / 12 bits and looked up by vpermw in the e2m1 table (an index's
// low 5 bits; bit 4 is the next nibble's and the table repeats, as gemm_fp4_bf16.cpp), gives 4 vectors; vector n's
// BF16 lanes (2r, 2r + 1) hold row r's columns (k0 + 2n, k0 + 2n + 1), so vdpbf16ps against x's BF16 pair for
// those columns, broadcast, adds both products into F32 lane r. x is one BF16 part (act_bf16) or two (x ≈ p0 +
// p1, 16 significant bits), pairs laid out once a call. Per block of 16 (NVFP4) or 32 (MXFP4) columns each row of x
// sums its chain into a block total, × the 16 rows' scales (E4M3 × 2⁻⁸ through an F16, or E8M0 shifted into an
// F32's exponent, as fp4_scales.h) into the running total; y = total × post (NVFP4: 2⁸ · global scale). kTileM
// rows of x share each decoded vector; a row's operations do not depend on the tile, so batch rows equal rows
// alone. W (and its scales) software-prefetched kPrefetchBytes ahead, as the row-major kernels.
#include <algorithm>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/error.h"
#include "kernels/cpu/bf16_parts.h"
#include "kernels/cpu/fp4_rows16.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2,f16c")))

constexpr int kTileM = 8;  // rows of x a pass (16: their block totals and totals no longer fit the registers)
// From DRAM (gemm_gguf_bench 1 41 0 nvfp4+r16x16, Zen 5, 2026-12-04), 576x576 / 1536x576 / 576x1536 µs: 2048 ahead
// 7.5-7.6 / 18.7-19.0 / 18.5-19.0, 4096 6.7-6.8 / 16.4-16.9 / 16.3-16.5, 8192 6.1-6.4 / 14.2-16.6 / 14.2-15.1,
// 16384 6.4 / 14.5-15.4 / 13.9-15.3.
constexpr int64_t kPrefetchBytes = 8192;

// x [m, n_in] -> per row, P parts of n_in / 2 BF16 pairs (pair j = columns 2j, 2j + 1): row i part p at
// (i · P + p) · n_in / 2.
template <int P>
TP_BF16 void x_pairs(const float* x, int64_t m, int64_t n_in, uint32_t* xp) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < n_in; k += 16) {
      __m256i p0, p1;
      bf16_parts(_mm512_loadu_ps(x + i * n_in + k), p0, p1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xp + (i * P) * (n_in / 2) + k / 2), p0);
      if constexpr (P == 2) _mm256_storeu_si256(reinterpret_cast<__m256i*>(xp + (i * P + 1) * (n_in / 2) + k / 2), p1);
    }
}

TP_BF16 inline __m512i e2m1_table() {
  const __m512 v = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
  return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

// The 16 rows' scales of one block from their 16 bytes (Rows16 holds no edge bytes: fp4_rows16_scales_ok).
TP_BF16 __attribute__((always_inline)) inline __m512 block_scales(const uint8_t* sb, bool mx) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb));
  if (mx) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(short(0xbfff)));
  return _mm512_cvtph_ps(h);
}

// Row block rb against MT rows of x (xp: their pairs, P parts, n_in / 2 a part): y[i · n_out + 16 rb + r].
template <int MT, int P>
TP_BF16 void row_block(const PackedWeight& w, int64_t rb, const uint32_t* xp, float post, float* y, bool prefetch) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  const int64_t n_in = w.n_in, half = n_in / 2, chunks = n_in / 8, bc = mx ? 4 : 2;  // chunks of 8 columns a block
  const uint8_t* wd = w.data.data() + rb * chunks * 64;
  const uint8_t* sb = w.scale_bytes.data() + rb * (chunks / bc) * 16;
  const __m512i table = e2m1_table();
  __m512 tot[MT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < chunks / bc; ++b) {
    __m512 a[MT];
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) a[i] = _mm512_setzero_ps();
    for (int64_t h = 0; h < bc; ++h) {
      const int64_t ch = b * bc + h;
      if (prefetch) prefetch_weights(wd + ch * 64 + kPrefetchBytes);
      const __m512i wb = _mm512_loadu_si512(wd + ch * 64);
      __m512bh v[4];
      v[0] = (__m512bh)_mm512_permutexvar_epi16(wb, table);
      v[1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 4), table);
      v[2] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 8), table);
      v[3] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(wb, 12), table);
#pragma GCC unroll 4
      for (int n = 0; n < 4; ++n)
#pragma GCC unroll 8
        for (int i = 0; i < MT; ++i)
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p)
            a[i] = _mm512_dpbf16_ps(a[i], v[n], (__m512bh)_mm512_set1_epi32(int(xp[(i * P + p) * half + ch * 4 + n])));
    }
    if (prefetch && b % 4 == 0) prefetch_weights(sb + b * 16 + kPrefetchBytes / 8);
    const __m512 s = block_scales(sb + b * 16, mx);
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) tot[i] = _mm512_fmadd_ps(a[i], s, tot[i]);
  }
  const int64_t r0 = rb * 16;
  const __mmask16 rows = __mmask16(_bzhi_u32(0xffff, unsigned(std::min<int64_t>(16, w.n_out - r0))));
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) _mm512_mask_storeu_ps(y + i * w.n_out + r0, rows, _mm512_mul_ps(tot[i], _mm512_set1_ps(post)));
}

template <int P>
void run(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  thread_local std::vector<uint32_t> xp;
  xp.resize(size_t(m * P * (w.n_in / 2)));
  x_pairs<P>(x, m, w.n_in, xp.data());
  const float post = w.format == WeightFormat::Mxfp4 ? 1.0f : 256.0f * w.global_scale;
  const int64_t per_row = P * (w.n_in / 2);
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
  const uint32_t* xs = xp.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in / 8 * 64;  // a row block's
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb)
      for (int64_t i0 = 0; i0 < m; i0 += kTileM) {
        const uint32_t* xi = xs + i0 * per_row;
        float* yi = y + i0 * w.n_out;
        const bool pf = i0 == 0;
        switch (std::min<int64_t>(kTileM, m - i0)) {
          case 1: row_block<1, P>(w, rb, xi, post, yi, pf); break;
          case 2: row_block<2, P>(w, rb, xi, post, yi, pf); break;
          case 3: row_block<3, P>(w, rb, xi, post, yi, pf); break;
          case 4: row_block<4, P>(w, rb, xi, post, yi, pf); break;
          case 5: row_block<5, P>(w, rb, xi, post, yi, pf); break;
          case 6: row_block<6, P>(w, rb, xi, post, yi, pf); break;
          case 7: row_block<7, P>(w, rb, xi, post, yi, pf); break;
          default: row_block<8, P>(w, rb, xi, post, yi, pf); break;
        }
      }
  }
}

}  // namespace

TP_BF16 void fp4_rows16_row_fast(const PackedWeight& w, int64_t r, uint8_t* codes, uint8_t* scales) {
  const int64_t n_in = w.n_in, chunks = n_in / 8, nb = n_in / (w.format == WeightFormat::Mxfp4 ? 32 : 16);
  const int64_t rb = r / 16, i = r % 16;
  const uint8_t* base = w.data.data() + rb * chunks * 64 + 4 * i;  // the row's dword in chunk 0
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(64));
  const __m512i m8 = _mm512_set1_epi32(0x00ff00ff), m4 = _mm512_set1_epi32(0x0f0f0f0f);
  for (int64_t ch = 0; ch < chunks; ch += 16) {
    const __mmask16 k = __mmask16(_bzhi_u32(0xffff, unsigned(std::min<int64_t>(16, chunks - ch))));
    // dword = word 0 (columns 0, 2, 4, 6 in nibbles 0..3) | word 1 (columns 1, 3, 5, 7) << 16
    const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, offsets, base + ch * 64, 1);
    __m512i lo = _mm512_and_si512(d, _mm512_set1_epi32(0xffff)), hi = _mm512_srli_epi32(d, 16);
    // spread a word's 4 nibbles to the low nibbles of 4 bytes: bits 4n .. 4n + 3 -> 8n .. 8n + 3
    lo = _mm512_and_si512(_mm512_or_si512(lo, _mm512_slli_epi32(lo, 8)), m8);
    lo = _mm512_and_si512(_mm512_or_si512(lo, _mm512_slli_epi32(lo, 4)), m4);
    hi = _mm512_and_si512(_mm512_or_si512(hi, _mm512_slli_epi32(hi, 8)), m8);
    hi = _mm512_and_si512(_mm512_or_si512(hi, _mm512_slli_epi32(hi, 4)), m4);
    _mm512_mask_storeu_epi32(codes + ch * 4, k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)));
  }
  const uint8_t* sb = w.scale_bytes.data() + rb * nb * 16 + i;
  for (int64_t b = 0; b < nb; ++b) scales[b] = sb[b * 16];
}

bool fp4_rows16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.fp4_layout != Fp4Layout::Rows16 || !cpu_has_avx512bf16()) return false;
  if (w.act_bf16)
    run<1>(x, m, w, y, n_threads);
  else
    run<2>(x, m, w, y, n_threads);
  return true;
}

bool fp4_rows16_wanted(const PackedWeight& w) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  return (mx || w.format == WeightFormat::Nvfp4) && w.fp4_layout == Fp4Layout::Rows && w.act == ActQuant::None &&
         w.n_in % 32 == 0 && cpu_has_avx512bf16() && prefer_bf16_a16() &&
         fp4_rows16_scales_ok(w.scale_bytes.data(), int64_t(w.scale_bytes.size()), mx);
}

void prepare_fp4_weight(PackedWeight* w) {
  if (fp4_rows16_wanted(*w)) set_fp4_layout(w, Fp4Layout::Rows16);
}

}  // namespace tp::cpu::detail
