// A16 decode on AVX2 + FMA (packed_kernels.h: a16_avx2_decode): Fp8E4M3 weights (per tensor / per channel scales, or
// block_out × group_size blocks, group_size a multiple of 32 — DeepSeek's / Qwen3's 128 × 128 — folded into x a block
// of rows at a time) against F32 x (Int4 / Int8 decode: gemm_a16_avx2_levels.cpp; the Int4 / Int8 decoding below
// serves the prefill), for m < kA16Avx2MaxM rows of x. At m = 1 weight rows 4 at a time (contiguous,
// software-prefetched ahead); in a batch each weight row decoded once for 4 rows of x (the last 1-3 rows of x: 2 or 1
// weight rows a pass). Per 32 columns a row: 4 vectors of 8 values decoded in registers, 4 FMAs with each row of x
// into two sums; y = their lane sum × the row's scale. Zen 3, one thread, from cache: m = 2-31 11-21 GMAC/s (the
// generic A16 tiles) -> 21-25.
//   Int4: each 32-column block of x is permuted once a call into the order the weight bytes unpack in without
//     shuffles across lanes: the block's 16 bytes are broadcast to both 128-bit lanes and vpshufb zero-extends
//     bytes 0..7 (then 8..15) into 8 int32 lanes; the low nibbles (& 15) are the even columns, the high ones
//     (>> 4) the odd. x's block is stored [x(2k), x(2k + 1), x(16 + 2k), x(17 + 2k)] for k = 0..7. Then
//     q − zero = nibble − (8 + zero) in int32 and vcvtdq2ps.
//   Int8: vpmovsxbd 8 bytes, − zero in int32, vcvtdq2ps.
//   Fp8: 32 bytes a load, as 8 dwords; each byte's F32 bits made in place by shifts of 16-bit lanes and one mask
//     (decode32): the sign to bit 31, the 7 magnitude bits to 26..20 — value · 2⁻¹²⁰, E4M3's subnormals as F32
//     subnormals (read at full speed here: Zen 3 FMAs take subnormal inputs without a penalty); 9 integer ops a 32
//     values, where widening each to F16 and vcvtph2ps took 10 and ran at half the pace (vcvtph2ps issues ~1 a cycle
//     on Zen 3). Vector k holds byte k of each dword, so x is permuted alike once a call (permute_x4) and scaled by
//     2^k that puts max|x| at 2¹⁰⁰ (scaled_x): every product of a code with an x within 2⁻⁷⁰ of max|x| is then a
//     normal F32 (no subnormal results: those are slow, and lose bits); y = the sum × the row's scale × 2^(120 − k).
//     Block scales: per block of rows, x × the block's column scales is scaled and permuted the same way (a row's
//     work n_in / block_out of its weights'), the sum's scale 1 (fp8_block_rows); consecutive blocks with equal
//     scales are one run (a fused weight's blocks, held a row each: one x a 128 rows, not one a row).
//     Zen 3, SmolLM2's layers from cache, one thread: 8-12 GB/s before, 15-20 after
//     (bench/results/zen3-fp8-avx2-20261206.md).
// Products are the A16 kernels' (F32 value · x, exact), summed in F32 in another order: within their bound.
// Prefill (m ≥ kA16Avx2GemmMinM, a16_avx2_gemm): the same decode writes W once a call as F32 (value × scale,
// the reference's dequantized weight; Int4 / Fp8 columns in x's permuted order, x permuted alike), then the dense F32
// linear() (oneDNN's AVX2 sgemm): n_out · n_in conversions against m times the MACs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/fp8_pow2.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/rows16.h"

namespace tp::cpu::detail {

namespace {

constexpr int kRw = 4;                    // weight rows a block
constexpr int64_t kPrefetchBytes = 2048;  // how far ahead of the block being read W is prefetched

enum class Kind { Int4, Int8, Fp8 };

// x row [n_in] -> the permuted blocks [n_in] (n_in a multiple of 32): Int4's order.
void permute_x(const float* x, int64_t n_in, float* xp) {
  for (int64_t b = 0; b < n_in; b += 32)
    for (int k = 0; k < 8; ++k) {
      xp[b + k] = x[b + 2 * k];
      xp[b + 8 + k] = x[b + 2 * k + 1];
      xp[b + 16 + k] = x[b + 16 + 2 * k];
      xp[b + 24 + k] = x[b + 17 + 2 * k];
    }
}

// x row [n_in] -> the permuted blocks [n_in] (n_in a multiple of 32): Fp8's order (column c + 4j + k at c + 8k + j).
void permute_x4(const float* x, int64_t n_in, float* xp) {
  for (int64_t b = 0; b < n_in; b += 32)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 8; ++j) xp[b + 8 * k + j] = x[b + 4 * j + k];
}

// 32 values of row p from column c, as 4 vectors of 8 (Int4: permute_x's order; Fp8: permute_x4's, value · 2⁻¹²⁰).
template <Kind K>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void decode32(const uint8_t* p, int64_t c, __m256i zoff,
                                                                            __m256* v) {
  if constexpr (K == Kind::Int4) {
    const __m256i sh0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 4, -1, -1, -1, 5,
                                         -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
    const __m256i sh1 = _mm256_setr_epi8(8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1, 12, -1, -1, -1,
                                         13, -1, -1, -1, 14, -1, -1, -1, 15, -1, -1, -1);
    const __m256i m15 = _mm256_set1_epi32(15);
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c / 2)));
    const __m256i d0 = _mm256_shuffle_epi8(b, sh0), d1 = _mm256_shuffle_epi8(b, sh1);
    v[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d0, m15), zoff));
    v[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d0, 4), zoff));
    v[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d1, m15), zoff));
    v[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d1, 4), zoff));
  } else if constexpr (K == Kind::Int8) {
    for (int k = 0; k < 4; ++k)
      v[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c + 8 * k))), zoff));
  } else {
    // The 32 bytes as 8 dwords; v[k] lane j = byte k of dword j (column c + 4j + k: x in permute_x4's order), its F32
    // bits those of value · 2⁻¹²⁰: the sign in bit 31, the 7 magnitude bits in 26..20 (E4M3's subnormals as F32
    // subnormals; the loaders refuse NaN codes). An arithmetic shift of 16-bit lanes by 4 puts the high byte of each
    // in that place (its sign copied into 30..27, the low byte's top nibble in 19..16: & 0x87f00000 clears both); the
    // low bytes get there shifted 8 first, then 16.
    const __m256i mask = _mm256_set1_epi32(int32_t(0x87f00000u));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c));
    const __m256i odd = _mm256_srai_epi16(d, 4), even = _mm256_srai_epi16(_mm256_slli_epi16(d, 8), 4);
    v[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(even, 16), mask));
    v[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(odd, 16), mask));
    v[2] = _mm256_castsi256_ps(_mm256_and_si256(even, mask));
    v[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, mask));
  }
}

// FP8 decode: weight rows [r, r + RW) against rows [0, MX) of x (xs: x · 2^k a row, scaled_x below; rows n_in
// apart), y[i · n_out + r + j] = the row's Σ (value · 2⁻¹²⁰) · xs_i, × the row's scale (1 with block scales: xs holds
// them), × 2^(120 − k_i) (back[i]; exact but for the one rounding of the scale's product). Two accumulators a (weight
// row, x row): the 4 FMAs a 32 columns in two chains, the same operations in the same order for every RW and MX (a
// row of a batch has the bits it has alone). RW · MX ≤ 4: the 8 accumulators, a row's 4 decoded vectors and the mask
// in registers.
template <int RW, int MX>
__attribute__((target("avx2,fma,f16c"))) void rows_fp8(const PackedWeight& w, int64_t r, const float* xs,
                                                       const Pow2* back, float* y, bool prefetch) {
  constexpr int64_t kStep = 32;  // bytes a row a 32-column block
  const int64_t n_in = w.n_in, n_out = w.n_out, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  __m256 acc[RW][MX][2];
  for (int j = 0; j < RW; ++j)
    for (int i = 0; i < MX; ++i) acc[j][i][0] = acc[j][i][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < n_in; c += 32) {
    if (prefetch) {
      for (int64_t k = 0; k < RW * kStep; k += 64) _mm_prefetch(pf + k, _MM_HINT_T0);
      pf += RW * kStep;
    }
    for (int j = 0; j < RW; ++j) {
      __m256 v[4];
      decode32<Kind::Fp8>(row0 + j * rb, c, _mm256_setzero_si256(), v);
      for (int i = 0; i < MX; ++i)
        for (int k = 0; k < 4; ++k)
          acc[j][i][k & 1] = _mm256_fmadd_ps(v[k], _mm256_loadu_ps(xs + i * n_in + c + 8 * k), acc[j][i][k & 1]);
    }
  }
  for (int j = 0; j < RW; ++j)
    for (int i = 0; i < MX; ++i) {
      const __m256 t8 = _mm256_add_ps(acc[j][i][0], acc[j][i][1]);
      const __m128 s = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
      const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
      // Block scales (block_out > 0) are folded into x (run_fp8): × 1.
      const float sc = w.block_out > 0 ? 1.0f : w.scales[w.scales.size() == 1 ? 0 : size_t(r + j)];
      y[i * n_out + r + j] = back[i](_mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1))) * sc);
    }
}

// Weight rows [r0, r1) against x rows [i, i + MX): RW = 4 / MX rows a pass, then one at a time.
template <int MX>
void rows_fp8_range(const PackedWeight& w, int64_t r0, int64_t r1, const float* xs, const Pow2* back, float* y,
                    bool prefetch) {
  constexpr int RW = 4 / MX;
  int64_t r = r0;
  for (; r + RW <= r1; r += RW) rows_fp8<RW, MX>(w, r, xs, back, y, prefetch);
  for (; r < r1; ++r) rows_fp8<1, MX>(w, r, xs, back, y, false);
}

// A row of x × 2^k into xs (permute_x4's order), k = fp8_x_exponent(max|x|) (fp8_pow2.h). Returns k.
int scaled_x(const float* x, int64_t n_in, float* xs) {
  float amax = 0;
  for (int64_t c = 0; c < n_in; ++c) amax = std::max(amax, std::fabs(x[c]));
  const int k = fp8_x_exponent(amax);
  permute_x4(x, n_in, xs);
  const Pow2 f(k);
  for (int64_t c = 0; c < n_in; ++c) xs[c] = f(xs[c]);
  return k;
}

// Weight rows [r0, r1) against the m rows of x (xp / bk: scaled_x's rows and their factors; rows n_in apart).
void fp8_rows_all_x(const PackedWeight& w, int64_t r0, int64_t r1, const float* xp, const Pow2* bk, int64_t m, float* y) {
  const int64_t n_in = w.n_in;
  // m = 1: 4 weight rows a pass (W streamed from memory, prefetched); a batch: its rows of x 4 at a time (each
  // weight row decoded once for them: compute-bound from cache), the last 1-3 together.
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) rows_fp8_range<4>(w, r0, r1, xp + i * n_in, bk + i, y + i * w.n_out, i == 0);
  const auto rest = [&](auto mx) {
    rows_fp8_range<decltype(mx)::value>(w, r0, r1, xp + i * n_in, bk + i, y + i * w.n_out, i == 0);
  };
  if (m - i == 3) rest(std::integral_constant<int, 3>{});
  if (m - i == 2) rest(std::integral_constant<int, 2>{});
  if (m - i == 1) rest(std::integral_constant<int, 1>{});
}

// 128 × 128 block scales (block_out rows × group_size columns a scale, group_size a multiple of 32): this thread's
// rows a block of rows at a time, each against x × that block's column scales (x_c · s[c / group_size], rounded to
// F32 once) scaled as scaled_x scales any row — the decode then the per-channel one with scale 1. xp: the m rows of x
// in permute_x4's order; amax: each 32 columns' max|x| (the scaled row's max is max over them of amax · |s|: rounding
// is monotonic). Rows [r0, r1).
__attribute__((target("avx2,fma,f16c"))) void fp8_block_rows(const PackedWeight& w, int64_t r0, int64_t r1,
                                                              const float* xp, const float* amax, int64_t m, float* y) {
  const int64_t n_in = w.n_in, nch = n_in / 32, bo = w.block_out, per = w.group_size / 32, nbc = w.n_groups();
  thread_local std::vector<float> xs;  // this thread's x rows × the block's scales × 2^k
  thread_local std::vector<Pow2> back;
  if (int64_t(xs.size()) < m * n_in) xs.resize(size_t(m * n_in));
  for (int64_t b0 = r0; b0 < r1;) {
    const int64_t blk = b0 / bo;
    int64_t b1 = std::min(r1, (blk + 1) * bo);
    const float* s = w.scales.data() + blk * nbc;
    // Following blocks with the same scales join the run: a fused weight's parts (q|k|v, gate|up) hold their
    // blocks a row each (block_out 1, compressed_tensors.cpp), which would otherwise scale x for every row.
    while (b1 < r1 && std::memcmp(s, w.scales.data() + (b1 / bo) * nbc, size_t(nbc) * sizeof(float)) == 0)
      b1 = std::min(r1, (b1 / bo + 1) * bo);
    back.clear();
    for (int64_t i = 0; i < m; ++i) {
      float am = 0;
      for (int64_t ch = 0; ch < nch; ++ch) am = std::max(am, amax[i * nch + ch] * std::fabs(s[ch / per]));
      int k = 0;
      if (am > 0 && std::isfinite(am)) {
        int e;
        std::frexp(am, &e);
        k = 101 - e;  // as scaled_x
      }
      const Pow2 f(k);
      const __m256 fa = _mm256_set1_ps(f.a), fb = _mm256_set1_ps(f.b);
      for (int64_t ch = 0; ch < nch; ++ch) {
        const __m256 sc = _mm256_set1_ps(s[ch / per]);
        const float* xi = xp + i * n_in + ch * 32;
        float* o = xs.data() + i * n_in + ch * 32;
        for (int t = 0; t < 32; t += 8)  // ((x · s) · a) · b: scaled_x's f(x · s)
          _mm256_storeu_ps(o + t, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xi + t), sc), fa), fb));
      }
      back.emplace_back(120 - k);
    }
    fp8_rows_all_x(w, b0, b1, xs.data(), back.data(), m, y);
    b0 = b1;
  }
}

void run_fp8(const PackedWeight& w, const float* x, int64_t m, float* y, int n_threads) {
  const int64_t n_in = w.n_in;
  if (w.block_out > 0) {  // x permuted and each 32 columns' max|x| once a call; scaled a block of rows at a time
    const int64_t nch = n_in / 32;
    thread_local std::vector<float> xp, amax;
    if (int64_t(xp.size()) < m * n_in) xp.resize(size_t(m * n_in));
    if (int64_t(amax.size()) < m * nch) amax.resize(size_t(m * nch));
    for (int64_t i = 0; i < m; ++i) {
      permute_x4(x + i * n_in, n_in, xp.data() + i * n_in);
      for (int64_t ch = 0; ch < nch; ++ch) {
        float a = 0;
        for (int64_t c = 0; c < 32; ++c) a = std::max(a, std::fabs(x[i * n_in + ch * 32 + c]));
        amax[size_t(i * nch + ch)] = a;
      }
    }
    const float *xpp = xp.data(), *ap = amax.data();  // (inside the region the names are each thread's own)
    const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
    {
      const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
      fp8_block_rows(w, r0, r1, xpp, ap, m, y);
    }
    return;
  }
  thread_local std::vector<float> xs;
  if (int64_t(xs.size()) < m * n_in) xs.resize(size_t(m * n_in));
  thread_local std::vector<Pow2> back;  // kept from call to call, as xs: no allocation a decode step
  back.clear();
  for (int64_t i = 0; i < m; ++i) back.emplace_back(120 - scaled_x(x + i * n_in, n_in, xs.data() + i * n_in));
  const float* xp = xs.data();
  const Pow2* bk = back.data();  // inside the parallel region `back` would name each thread's own (empty) copy
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, kRw, omp_get_thread_num(), omp_get_num_threads());
    fp8_rows_all_x(w, r0, r1, xp, bk, m, y);
  }
}

// Rows [r0, r1) of W as F32 value × scale into out [.., n_in] (Int4: columns in permute_x's order, Fp8 permute_x4's).
template <Kind K>
__attribute__((target("avx2,fma,f16c"))) void dequant_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const bool fp8_blocks = K == Kind::Fp8 && w.block_out > 0;  // a scale a block_out rows × group_size columns
  const int64_t n_in = w.n_in, rb = w.row_bytes(), ng = K == Kind::Fp8 && !fp8_blocks ? 1 : w.n_groups();
  const int64_t gs = K == Kind::Fp8 && !fp8_blocks ? n_in : w.group_size;
  const bool zeros = K != Kind::Fp8 && !w.zeros.empty();
  const int base = K == Kind::Int4 ? 8 : 0;
  const __m256 two120 = _mm256_set1_ps(0x1p120f);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* p = w.data.data() + r * rb;
    float* o = out + r * n_in;
    for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs) {
      const int64_t c1 = std::min(n_in, c0 + gs);
      const __m256i zoff = _mm256_set1_epi32(base + (zeros ? int(w.zeros[size_t(r * ng + g)]) : 0));
      const __m256 sc = _mm256_set1_ps(fp8_blocks        ? w.scales[size_t((r / w.block_out) * ng + g)]
                                       : K == Kind::Fp8 ? w.scales[w.scales.size() == 1 ? 0 : size_t(r)]
                                                        : w.scales[size_t(r * ng + g)]);
      for (int64_t c = c0; c < c1; c += 32) {
        __m256 v[4];
        decode32<K>(p, c, zoff, v);
        for (int k = 0; k < 4; ++k)  // Fp8: value · 2⁻¹²⁰ · 2¹²⁰ (exact), × scale
          _mm256_storeu_ps(o + c + 8 * k, _mm256_mul_ps(K == Kind::Fp8 ? _mm256_mul_ps(v[k], two120) : v[k], sc));
      }
    }
  }
}

// Rows [r0, r1) of an Int4 weight in Rows16 (common/rows16_layout.h) as F32 value × scale into out [.., n_in], each 8
// columns in the words' order 0, 4, 1, 5, 2, 6, 3, 7 (x permuted alike: rows16.h rows16_q4_x_order): a row's 4 bytes of a line,
// shifted by 0, 8, 16, 24 (low nibbles) and 4, 12, 20, 28 (high ones), & 15.
__attribute__((target("avx2,fma,f16c"))) void dequant_rows16_int4(const PackedWeight& w, int64_t r0, int64_t r1,
                                                                  float* out) {
  const int64_t n_in = w.n_in, ng = w.n_groups(), gs = ng > 1 ? w.group_size : n_in;
  const bool zeros = !w.zeros.empty();
  const __m256i shifts = _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28), m15 = _mm256_set1_epi32(15);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* p = w.data.data() + (r / 16) * (n_in / 8) * 64 + 4 * (r % 16);
    const int64_t e = (r / 16) * ng * 16 + r % 16;  // entry of group g: e + 16 g
    float* o = out + r * n_in;
    for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs) {
      const __m256i zoff = _mm256_set1_epi32(8 + (zeros ? int(w.zeros[size_t(e + 16 * g)]) : 0));
      const __m256 sc = _mm256_set1_ps(w.scales[size_t(e + 16 * g)]);
      for (int64_t c = c0; c < std::min(n_in, c0 + gs); c += 8) {
        int32_t word;
        std::memcpy(&word, p + c * 8, 4);
        const __m256i u = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts), m15);
        _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u, zoff)), sc));
      }
    }
  }
}

}  // namespace

bool a16_avx2_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (m >= kA16Avx2MaxM || w.n_in % 32 != 0) return false;
  // Int4 / Int8 decode: gemm_a16_avx2_levels.cpp (integer sums, 1.2-1.5x these F32 ones from cache on Zen 3);
  // their decode32 below serves the prefill's dequantization.
  if (w.format != WeightFormat::Fp8E4M3 || (w.block_out > 0 && w.group_size % 32 != 0)) return false;
  run_fp8(w, x, m, y, n_threads);
  return true;
}

bool a16_avx2_gemm(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (m < kA16Avx2GemmMinM || w.n_in % 32 != 0 || !linear_has_onednn(DType::F32)) return false;
  Kind kind;
  switch (w.format) {
    case WeightFormat::Int4: kind = Kind::Int4; break;
    case WeightFormat::Int8: kind = Kind::Int8; break;
    case WeightFormat::Fp8E4M3: kind = Kind::Fp8; break;
    default: return false;
  }
  if (kind != Kind::Fp8 && (!w.g_idx.empty() || w.group_size % 32 != 0)) return false;
  if (kind == Kind::Fp8 && w.block_out > 0 && w.group_size % 32 != 0) return false;  // dequant_rows' 32-column steps
  if (w.rows_layout == RowsLayout::Rows16) {  // Int4 held for rows16_a16_avx2's decode: its rows decoded from the blocks
    if (kind != Kind::Int4) return false;
    dense_f32_linear(
        x, m, w, y, n_threads, [&](int64_t r0, int64_t r1, float* out) { dequant_rows16_int4(w, r0, r1, out); },
        rows16_q4_x_order<float>);
    return true;
  }
  const auto dequant = [&](int64_t r0, int64_t r1, float* out) {
    switch (kind) {
      case Kind::Int4: dequant_rows<Kind::Int4>(w, r0, r1, out); break;
      case Kind::Int8: dequant_rows<Kind::Int8>(w, r0, r1, out); break;
      case Kind::Fp8: dequant_rows<Kind::Fp8>(w, r0, r1, out); break;
    }
  };
  dense_f32_linear(x, m, w, y, n_threads, dequant, kind == Kind::Int4 ? permute_x : kind == Kind::Fp8 ? permute_x4 : nullptr);
  return true;
}

void dense_f32_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads,
                      const std::function<void(int64_t, int64_t, float*)>& dequant, PermuteRow permute) {
  const int64_t n_in = w.n_in, n_out = w.n_out;
  // The decoded W in a per-thread scratch kept from call to call, read by oneDNN as it is: a fresh zero-filled
  // buffer and a Weight for it each call cost page faults, a clear and oneDNN's reordered copy of W (W8A16 prefill on
  // Zen 3: clear_page alone 7% in perf; pp512 +20-28% without them). A weight past kKeepBytes (a large model's MLP)
  // takes an uncleared buffer for the call instead, not held while decode runs.
  constexpr int64_t kKeepBytes = int64_t(64) << 20;
  thread_local std::vector<float> kept;
  std::unique_ptr<float[]> once;
  float* dd;
  if (n_out * n_in * int64_t(sizeof(float)) <= kKeepBytes) {
    if (int64_t(kept.size()) < n_out * n_in) kept.resize(size_t(n_out * n_in));
    dd = kept.data();
  } else {
    once.reset(new float[size_t(n_out * n_in)]);
    dd = once.get();
  }
  const bool parallel = n_threads > 1 && worth_parallel(n_out * w.row_bytes());
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(n_out, 1, omp_get_thread_num(), omp_get_num_threads());
    dequant(r0, r1, dd);
  }
  const float* xin = x;
  thread_local std::vector<float> xp;
  if (permute) {
    xp.resize(size_t(m * n_in));
    for (int64_t i = 0; i < m; ++i) permute(x + i * n_in, n_in, xp.data() + i * n_in);
    xin = xp.data();
  }
  // linear()'s thread count, as when this ran through linear(): oneDNN's sums may differ with the thread count, and
  // a call with n_threads 1 gives the bits of one through a loaded Weight (FourBitWeightTakesTheDecodeLayout).
  onednn_matmul_f32(xin, m, n_in, dd, n_out, y, n_out, num_threads());
}

}  // namespace tp::cpu::detail
