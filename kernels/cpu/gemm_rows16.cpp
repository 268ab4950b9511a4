// 4-bit decode in GEMM form on AVX512-BF16 (rows16.h; the layout: common/rows16_layout.h Rows16): MXFP4, NVFP4,
// Int4 (W4A16) and GGUF Q4_0 / Q4_1 / Q4_K. Per block of 16 weight rows and 8 columns at k0: one 64-byte load, shifted right by 0 / 4 / 8 /
// 12 bits and looked up by vpermw in the format's table (an index's low 5 bits; bit 4 is the next nibble's and the
// table repeats, as gemm_fp4_bf16.cpp): e2m1 values, or Int4's (GGUF Q4_0 / Q4_1's) u − 8 — 4 vectors; vector n's BF16 lanes (2r,
// 2r + 1) hold row r's columns (k0 + 2n, k0 + 2n + 1), so vdpbf16ps against x's BF16 pair for those columns,
// broadcast, adds both products into F32 lane r. x is one BF16 part (act_bf16) or two (x ≈ p0 + p1, 16
// significant bits), pairs laid out once a call. Per block (NVFP4 16 columns, MXFP4 and GGUF 32) or group (Int4: group_size,
// or the row) each row of x sums its chain into a block total, × the 16 rows' scales into the running total: FP4's
// E4M3 × 2⁻⁸ through an F16 or E8M0 shifted into an F32's exponent (as fp4_scales.h), Int4's F32 scales, GGUF's
// F16 d widened; after that Int4's zero points are taken off as zero · Σ x over the group (Σ (q − z) x = Σ q x −
// z Σ x; the row's Σ x per group computed once a call, in one order), and Q4_1's d q + m = d (q − 8) + (m + 8 d)
// adds (m + 8 d) · Σ x over the block likewise, Q4_K's d sc q − dmin m (per 32-column sub-block) = d sc (q − 8) +
// (8 d sc − dmin m) its second term. y = total × post (NVFP4: 2⁸ · global scale). kTileM rows of x share
// each decoded vector; a row's operations do not depend on the tile, so batch rows equal rows alone. W (and its
// scales) software-prefetched kPrefetchBytes ahead, as the row-major kernels.
#include <algorithm>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/bf16_parts.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/rows16.h"
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
// Chunks (8 columns) a pair of vdpbf16ps dependency chains runs over before it is added, × the block's scales, into
// the running total: at m = 1 one chain a block (a whole Int4 group: 8 chunks at 64 columns, 32 vdpbf16ps) ran at the
// instruction's latency. Every block is a whole number of them: NVFP4 2 chunks, MXFP4 4, Int4 groups (and
// per-channel rows) a multiple of 32 columns.
constexpr int64_t kSubChunks = 2;

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

// The weight's format, a template parameter: the block's length is then known where the loops are built (FP4, Int4
// in groups of 64 or 128 columns; other Int4 groups at run time) — from cache at m = 1 W4A16 g64 ran ~10% faster
// known than at run time, NVFP4 53 against 30 GB/s.
constexpr int kInt4 = 0, kNvfp4 = 1, kMxfp4 = 2, kInt4G64 = 3, kInt4G128 = 4, kQ4_0 = 5, kQ4_1 = 6, kQ4_K = 7;

// The 32-entry BF16 table vpermw looks the codes up in (16 values, twice): e2m1, or Int4's (GGUF Q4_0 / Q4_1's) u − 8.
TP_BF16 inline __m512i code_table(bool int4) {
  const __m512 v = int4 ? _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)
                        : _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
  return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

// The 16 rows' FP4 scales of one block from their 16 bytes (Rows16 holds no edge bytes: fp4_rows16_scales_ok).
TP_BF16 __attribute__((always_inline)) inline __m512 block_scales(const uint8_t* sb, bool mx) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb));
  if (mx) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(short(0xbfff)));
  return _mm512_cvtph_ps(h);
}

// How a weight's columns fall into scale blocks: chunks (8 columns) a block, blocks a row.
struct Blocks {
  int64_t chunks_per, count;
};

Blocks blocks_of(const PackedWeight& w) {
  const int64_t chunks = w.n_in / 8;
  if (w.format == WeightFormat::Int4) {
    const int64_t gs = w.n_groups() > 1 ? w.group_size : w.n_in;
    return {gs / 8, w.n_groups()};
  }
  const int64_t per = w.format == WeightFormat::Nvfp4 ? 2 : 4;  // MXFP4, GGUF Q4_0 / Q4_1 / Q4_K's sub-blocks: 32
  return {per, chunks / per};
}

// Row block rb against MT rows of x (xp: their pairs, P parts, n_in / 2 a part; sx: Int4 with zero points and
// Q4_1, each row's Σ x per group / block, bl.count a row): y[i · n_out + 16 rb + r].
template <int K, int MT, int P>
TP_BF16 void row_block(const PackedWeight& w, Blocks bl, int64_t rb, const uint32_t* xp, const float* sx, float post,
                       float* y, bool prefetch) {
  constexpr bool I4 = K == kInt4 || K == kInt4G64 || K == kInt4G128, mx = K == kMxfp4;
  constexpr bool gguf = K == kQ4_0 || K == kQ4_1 || K == kQ4_K;
  // GGUF: 16-bit entries a 32-column block (Q4_0: d; Q4_1: d, m; Q4_K: 10 a 256-column block, 8 of them)
  constexpr int64_t ge = K == kQ4_1 ? 16 : K == kQ4_K ? 10 : 8;  // × 1/8
  const bool zeros = (I4 && !w.zeros.empty()) || K == kQ4_1 || K == kQ4_K;  // a term × Σ x of the block
  constexpr int64_t known = K == kNvfp4 ? 2 : K == kMxfp4 || gguf ? 4 : K == kInt4G64 ? 8 : K == kInt4G128 ? 16 : 0;
  const int64_t per = known > 0 ? known : bl.chunks_per;  // chunks a block
  const int64_t n_in = w.n_in, half = n_in / 2, chunks = n_in / 8;
  const uint8_t* wd = w.data.data() + rb * chunks * 64;
  const int64_t s0 = rb * bl.count * 16;  // the block's first entry in the per-row arrays
  const __m512i table = code_table(I4 || gguf);
  const uint16_t* gs = reinterpret_cast<const uint16_t*>(w.scale_bytes.data()) + s0 * ge / 8;  // GGUF: the row block's
  __m512 tot[MT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < bl.count; ++b) {
    // the 16 rows' scales of the block; Int4 with zero points: zero · scale; Q4_1: −(m + 8 d); Q4_K: dmin m − 8 d sc
    __m512 s, zs;
    if constexpr (K == kQ4_K) {  // d, dmin of the 256-column block, then sc | m << 8 of sub-block b % 8
      const uint16_t* e = gs + (b / 8) * 10 * 16;
      if (prefetch && b % 2 == 0) prefetch_weights(gs + b * 20 + kPrefetchBytes / 8);
      const __m512i scm = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + (2 + b % 8) * 16)));
      s = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e))),
                        _mm512_cvtepi32_ps(_mm512_and_si512(scm, _mm512_set1_epi32(0xff))));
      const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + 16)));
      zs = _mm512_fmsub_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(scm, 8)), _mm512_mul_ps(_mm512_set1_ps(8.0f), s));
    } else if constexpr (gguf) {
      const uint16_t* e = gs + b * ge * 2;
      if (prefetch && (ge == 16 || b % 2 == 0)) prefetch_weights(e + kPrefetchBytes / 8);
      s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e)));
      if constexpr (K == kQ4_1) {
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + 16)));
        zs = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_fmadd_ps(_mm512_set1_ps(8.0f), s, mv));
      }
    } else if constexpr (I4) {
      if (prefetch && b % 4 == 0) prefetch_weights(w.scales.data() + s0 + b * 16 + kPrefetchBytes / 2);
      s = _mm512_loadu_ps(w.scales.data() + s0 + b * 16);
      if (zeros)
        zs = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.zeros.data() + s0 + b * 16)))),
                           s);
    } else {
      if (prefetch && b % 4 == 0) prefetch_weights(w.scale_bytes.data() + s0 + b * 16 + kPrefetchBytes / 8);
      s = block_scales(w.scale_bytes.data() + s0 + b * 16, mx);
    }
    const int64_t ch1 = std::min(chunks, (b + 1) * per);
    for (int64_t c0 = b * per; c0 < ch1; c0 += kSubChunks) {  // every block a multiple of kSubChunks
      __m512 c[2][MT];  // two chains: columns k0 + 0..3 and k0 + 4..7 of each chunk
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) c[0][i] = c[1][i] = _mm512_setzero_ps();
#pragma GCC unroll 2
      for (int64_t ch = c0; ch < c0 + kSubChunks; ++ch) {
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
              c[n / 2][i] = _mm512_dpbf16_ps(c[n / 2][i], v[n],
                                             (__m512bh)_mm512_set1_epi32(int(xp[(i * P + p) * half + ch * 4 + n])));
      }
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) tot[i] = _mm512_fmadd_ps(_mm512_add_ps(c[0][i], c[1][i]), s, tot[i]);
    }
    if (zeros) {
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) tot[i] = _mm512_fnmadd_ps(zs, _mm512_set1_ps(sx[i * bl.count + b]), tot[i]);
    }
  }
  const int64_t r0 = rb * 16;
  const __mmask16 rows = __mmask16(_bzhi_u32(0xffff, unsigned(std::min<int64_t>(16, w.n_out - r0))));
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) _mm512_mask_storeu_ps(y + i * w.n_out + r0, rows, _mm512_mul_ps(tot[i], _mm512_set1_ps(post)));
}

// Each row of x's Σ x over each group (x as the kernel holds it: the sum of its P parts), 16 columns a step then
// the lanes in one order: sx[i · count + g].
template <int P>
TP_BF16 void group_sums(const uint32_t* xp, int64_t m, int64_t n_in, Blocks bl, float* sx) {
  const int64_t half = n_in / 2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < bl.count; ++g) {
      const int64_t k0 = g * bl.chunks_per * 8, k1 = std::min(n_in, (g + 1) * bl.chunks_per * 8);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t k = k0; k < k1; k += 16)
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {  // 8 pairs = 16 BF16 values, widened to F32 by shifting into the high half
          const __m256i pr = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + (i * P + p) * half + k / 2));
          const __m512i wide = _mm512_cvtepu16_epi32(pr);  // value j in lane j: columns in pair order
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
        }
      sx[i * bl.count + g] = _mm512_reduce_add_ps(acc);
    }
}

template <int K, int P>
void run(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  thread_local std::vector<uint32_t> xp;
  thread_local std::vector<float> sx;
  xp.resize(size_t(m * P * (w.n_in / 2)));
  x_pairs<P>(x, m, w.n_in, xp.data());
  const Blocks bl = blocks_of(w);
  if ((w.format == WeightFormat::Int4 && !w.zeros.empty()) || w.format == WeightFormat::GgufQ4_1 ||
      w.format == WeightFormat::GgufQ4_K) {
    sx.resize(size_t(m * bl.count));
    group_sums<P>(xp.data(), m, w.n_in, bl, sx.data());
  }
  const float post = w.format == WeightFormat::Nvfp4 ? 256.0f * w.global_scale : 1.0f;
  const int64_t per_row = P * (w.n_in / 2);
  const bool parallel = n_threads > 1 && worth_parallel(int64_t(w.data.size()) * m);
  const uint32_t* xs = xp.data();
  const float* sxs = sx.data();
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [b0, b1] = thread_rows((w.n_out + 15) / 16, 1, omp_get_thread_num(), omp_get_num_threads());
    const int64_t block_bytes = w.n_in / 8 * 64;  // a row block's
    if (b1 > b0) prefetch_range_start(w.data.data() + b0 * block_bytes, kPrefetchBytes, (b1 - b0) * block_bytes);
    for (int64_t rb = b0; rb < b1; ++rb)
      for (int64_t i0 = 0; i0 < m; i0 += kTileM) {
        const uint32_t* xi = xs + i0 * per_row;
        const float* si = sxs + i0 * bl.count;
        float* yi = y + i0 * w.n_out;
        const bool pf = i0 == 0;
        static_assert(kTileM == 8, "with_tile_rows takes tiles of up to 8 rows");
        with_tile_rows(m - i0, [&]<int MT>() { row_block<K, MT, P>(w, bl, rb, xi, si, post, yi, pf); });
      }
  }
}

template <int P>
void run_as(int k, const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  switch (k) {
    case kNvfp4: run<kNvfp4, P>(x, m, w, y, n_threads); break;
    case kMxfp4: run<kMxfp4, P>(x, m, w, y, n_threads); break;
    case kInt4G64: run<kInt4G64, P>(x, m, w, y, n_threads); break;
    case kInt4G128: run<kInt4G128, P>(x, m, w, y, n_threads); break;
    case kQ4_0: run<kQ4_0, P>(x, m, w, y, n_threads); break;
    case kQ4_1: run<kQ4_1, P>(x, m, w, y, n_threads); break;
    case kQ4_K: run<kQ4_K, P>(x, m, w, y, n_threads); break;
    default: run<kInt4, P>(x, m, w, y, n_threads); break;
  }
}

}  // namespace

bool rows16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (gguf_rows16_only(w.format))  // IQ4_NL on VNNI's int8 form (Q4_0's with a table), else the AVX2 kernels
    return gguf_rows16_k_only(w.format) ? rows16_avx2_k_linear(x, m, w, y, n_threads)
                                        : (!w.act_bf16 && rows16_int8_linear(x, m, w, y, n_threads)) ||
                                              rows16_avx2_linear(x, m, w, y, n_threads);
  if (w.format == WeightFormat::GgufQ8_0 || w.format == WeightFormat::GgufQ5_0 || w.format == WeightFormat::GgufQ6_K ||
      ((w.format == WeightFormat::GgufQ4_0 || w.format == WeightFormat::GgufQ4_1 || w.format == WeightFormat::GgufQ4_K) &&
       !w.act_bf16))
    return rows16_int8_linear(x, m, w, y, n_threads) || rows16_avx2_linear(x, m, w, y, n_threads) ||
           rows16_avx2_k_linear(x, m, w, y, n_threads);
  if (w.rows_layout != RowsLayout::Rows16 || !cpu_has_avx512bf16()) return false;
  const bool grouped = w.format == WeightFormat::Int4 && w.n_groups() > 1;
  const int k = w.format == WeightFormat::Nvfp4                ? kNvfp4
                : w.format == WeightFormat::Mxfp4              ? kMxfp4
                : w.format == WeightFormat::GgufQ4_0           ? kQ4_0
                : w.format == WeightFormat::GgufQ4_1           ? kQ4_1
                : w.format == WeightFormat::GgufQ4_K           ? kQ4_K
                : grouped && w.group_size == 64                ? kInt4G64
                : grouped && w.group_size == 128               ? kInt4G128
                                                               : kInt4;
  if (w.act_bf16)
    run_as<1>(k, x, m, w, y, n_threads);
  else
    run_as<2>(k, x, m, w, y, n_threads);
  return true;
}

bool rows16_takes_int4() { return cpu_has_avx512bf16() && prefer_bf16_a16(); }

bool rows16_wanted(const PackedWeight& w) {
  if (rows16_avx2_wanted(w)) return w.rows_layout == RowsLayout::Rows && rows16_refusal(w).empty();
  return (w.format == WeightFormat::Int4 || w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4 ||
          w.format == WeightFormat::GgufQ4_0 || w.format == WeightFormat::GgufQ4_1 || w.format == WeightFormat::GgufQ4_K ||
          ((w.format == WeightFormat::GgufQ8_0 || w.format == WeightFormat::GgufQ5_0 || w.format == WeightFormat::GgufQ6_K) &&
           cpu_has_avx512vnni())) &&
         w.rows_layout == RowsLayout::Rows && rows16_takes_int4() && rows16_refusal(w).empty();
}

void prepare_rows16_weight(PackedWeight* w) {
  if (!rows16_wanted(*w)) return;
  set_rows_layout(w, RowsLayout::Rows16);
  // GGUF Q4_0 / Q4_1 / Q4_K run on the int8 GEMM form (gemm_rows16_int8.cpp: x quantized as llama.cpp pairs them,
  // Q8_0 / Q8_1 / Q8_K) from the same words; with act_bf16 (set by hand) on this file's BF16 form.
}

}  // namespace tp::cpu::detail
