// FP8 (E4M3) decode on Intel AVX-512 (packed_kernels.h: fp8_avx512_decode): per-tensor or per-channel weight scales,
// F32 activations (FP8 weight-only) or FP8 ones per token / static (W8A8-FP8, emulated: x / s rounded to E4M3),
// every m below kFp8OnednnMinM (the prefill sizes keep gemm_fp8_bf16.cpp's oneDNN path).
//
// Why: gemm_fp8_bf16.cpp multiplies by vdpbf16ps, which issues once every 2 cycles on the AMX Xeon (family 6
// model 167; bench/isa_throughput): its decode ran at 10.7 GB/s (FP8 weight-only, x as two BF16 parts) and 14.2
// GB/s (FP8 activations) from cache, below one core's DRAM read. Here each weight byte's F32 bits are made in place
// (widen: two 16-bit shifts a word, a 32-bit shift, one AND a 16 values — value · 2⁻¹²⁰, E4M3's subnormals F32
// subnormals, as the AVX2 kernel's, fp8_pow2.h), against x permuted alike once a call and scaled by 2^k a row; F32
// FMAs, exact products rounded once a sum as every A16 kernel. x: F32, or its E4M3 values q = E4M3(x / s) (exact in
// F32; the scale s after). The kernel's first form moved each byte into an F16 and widened it by vcvtph2ps (two
// uops, one on the shuffle port): 14-18 GB/s from cache, now 17-20 (GEMM_BENCH_HOT=1 build/bench/gemm_gguf_bench 1
// 17.4 0 fp8_dynamic), SmolLM2 CT-FP8-dynamic with its lm_head in FP8 decoded 1.34x faster on the AMX Xeon.
// A row is read 64 columns a step, in memory order one row after another (the W8A8 decode's order), software-
// prefetched kPrefetchBytes ahead; four accumulator chains a row (one per widened vector), summed in one order; with
// m > 1 each widened step serves up to 4 rows of x.
// y = 2^(120 − k) (Σ × the weight scale) (× s). Every row of x gets the same operations whatever m: a row of a batch
// has the bits of that row alone.
#include <algorithm>
#include <cmath>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/dtype.h"
#include "common/fp_formats.h"
#include "kernels/cpu/fp8_pow2.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_FP8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,bmi2")))

// Prefetched into L2 (gemv.h prefetch_weights): 6144 ahead ran as L1 at 2048 did (SmolLM2 CT-FP8-dynamic tg128, 1
// thread, 72.2 vs 72.1 tok/s), L2 at 2048 lost 4% (69.0).
constexpr int64_t kPrefetchBytes = 6144;
constexpr int64_t kBlockRows = 16;  // weight rows a block (m > 4: every tile of x rows meets the block in L1)

constexpr int64_t kStep = 64;  // weight bytes (columns) a step

// Where x's column c lies once permuted as widen's lanes: column c0 + 4j + k of a step at c0 + 16k + j.
constexpr int64_t permuted(int64_t c) { return c / kStep * kStep + c % 4 * 16 + c % kStep / 4; }

// Up to 64 weight bytes (the first n; the rest read as 0) -> four F32 vectors of value · 2⁻¹²⁰ (fp8_pow2.h): v[k]
// lane j holds column 4j + k (x is permuted alike). Word by word: vpsraw 4 puts a word's high byte at the top of the
// word (sign copies in bits 15-11, the 7 magnitude bits in 10-4), after vpsllw 8 its low byte; a 16-bit shift of the
// dword moves the low word's up; & 0x87f00000 keeps the sign and the magnitude bits as F32's sign, exponent 0-15 and
// top mantissa bits. E4M3's subnormals (and zeros) are F32 subnormals (and zeros). They are not free on the AMX Xeon
// (family 6 model 207): the gemm_gguf_bench FP8 weights with their 0.03 % of subnormal codes (0.5 % of the 64-byte
// steps) ran 10 % faster at m = 1 and 15 % at m = 16 with those codes made normal (measuring only) — but cheaper than
// the alternatives tried: a branch that fixed the steps holding one (exponent 112 + e, normal values) lost 17 % on
// SmolLM2's FP8 lm_head, where 48 % of the steps hold one; for tiles of 4 rows of x only (m >= 4, where a widened step
// serves 4 rows), that normal-value form against x · 2^(k − 112) (the same products) ran no faster than this one:
// 27-31 GMAC/s at m = 16 either way, against 33-36 for this one on weights without subnormal codes. 0x7f / 0xff, E4M3's
// NaN, read as ±480: the weights have none.
TP_FP8_AVX512 __attribute__((always_inline)) inline void widen(const uint8_t* p, int64_t n, __m512 (&v)[4]) {
  const __m512i b = n >= kStep ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, unsigned(n)), p);
  const __m512i mask = _mm512_set1_epi32(int32_t(0x87f00000u));
  const __m512i hi = _mm512_srai_epi16(b, 4), lo = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 4);
  v[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(lo, 16), mask));
  v[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(hi, 16), mask));
  v[2] = _mm512_castsi512_ps(_mm512_and_si512(lo, mask));
  v[3] = _mm512_castsi512_ps(_mm512_and_si512(hi, mask));
}

// One weight row (n_in bytes) against G rows of x (F32 x · 2^k, permuted as widen's lanes a 64-column step and
// zero-padded to whole steps, ps apart): out[g] = Σ (value · 2⁻¹²⁰) · x · 2^k. Each step is widened once for the G
// rows; every row of x gets the operations it gets at G = 1, in the same order.
template <int G>
TP_FP8_AVX512 void row_fp8(const uint8_t* row, int64_t n_in, const float* x, int64_t ps, bool prefetch,
                           float (&out)[G]) {
  __m512 a[4][G], v[4];
  for (int k = 0; k < 4; ++k)
    for (int g = 0; g < G; ++g) a[k][g] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(row) + kPrefetchBytes;
  for (int64_t c = 0; c < n_in; c += kStep, pf += kStep) {
    if (prefetch) prefetch_weights(pf);
    widen(row + c, n_in - c, v);
    for (int g = 0; g < G; ++g)
      for (int k = 0; k < 4; ++k) a[k][g] = _mm512_fmadd_ps(v[k], _mm512_loadu_ps(x + g * ps + c + 16 * k), a[k][g]);
  }
  for (int g = 0; g < G; ++g)
    out[g] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0][g], a[1][g]), _mm512_add_ps(a[2][g], a[3][g])));
}

// Row r of W against rows [i0, i0 + G) of x: y[i · n_out + r] = back_i(Σ · scale) · xs_i (back_i: 2^(120 − k_i); the
// scale 1 with block scales, folded into x).
template <int G>
TP_FP8_AVX512 void rows_of_x(const PackedWeight& w, int64_t r, const float* xd, int64_t ps, const float* xs,
                             const Pow2* back, int64_t i0, float* y) {
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const float ws = w.block_out > 0 ? 1.0f : w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)];
  float out[G];
  row_fp8<G>(row, w.n_in, xd + i0 * ps, ps, i0 == 0, out);
  for (int g = 0; g < G; ++g) y[(i0 + g) * w.n_out + r] = back[i0 + g](out[g] * ws) * xs[i0 + g];
}

// Weight rows [r0, r1) against the m rows of x (xd: rows ps apart, as row_fp8 reads them).
TP_FP8_AVX512 void rows_range(const PackedWeight& w, int64_t r0, int64_t r1, const float* xd, int64_t ps,
                              const float* xs, const Pow2* back, int64_t m, float* y) {
  prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
  // Blocks of kBlockRows weight rows: each tile of 4 rows of x meets the whole block while it is in L1.
  for (int64_t rb = r0; rb < r1; rb += kBlockRows) {
    const int64_t re = std::min(r1, rb + kBlockRows);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      for (int64_t r = rb; r < re; ++r) rows_of_x<4>(w, r, xd, ps, xs, back, i, y);
    for (int64_t r = rb; r < re; ++r) switch (m - i) {
        case 1: rows_of_x<1>(w, r, xd, ps, xs, back, i, y); break;
        case 2: rows_of_x<2>(w, r, xd, ps, xs, back, i, y); break;
        case 3: rows_of_x<3>(w, r, xd, ps, xs, back, i, y); break;
        default: break;
      }
  }
}

// max |x| over n values (a NaN ignored, as std::max(amax, NaN) does: the row's result is NaN anyway).
TP_FP8_AVX512 float amax_of(const float* x, int64_t n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t c = 0;
  for (; c + 64 <= n; c += 64)
    for (int k = 0; k < 4; ++k) a[k] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + c + 16 * k)), a[k]);
  float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a[0], a[1]), _mm512_max_ps(a[2], a[3])));
  for (; c < n; ++c) amax = std::max(amax, std::fabs(x[c]));
  return amax;
}

// A row of x (n_in values) into out (ps), each 64-column step permuted as widen's lanes (permuted()) and × 2^k as f
// does it ((v · a) · b); padding left as it is (0).
TP_FP8_AVX512 void permute_row(const float* x, int64_t n_in, const Pow2& f, float* out) {
  alignas(64) static const int32_t kIdx[4][16] = {{0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28},
                                                  {1, 5, 9, 13, 17, 21, 25, 29, 1, 5, 9, 13, 17, 21, 25, 29},
                                                  {2, 6, 10, 14, 18, 22, 26, 30, 2, 6, 10, 14, 18, 22, 26, 30},
                                                  {3, 7, 11, 15, 19, 23, 27, 31, 3, 7, 11, 15, 19, 23, 27, 31}};
  const __m512 fa = _mm512_set1_ps(f.a), fb = _mm512_set1_ps(f.b);
  int64_t c = 0;
  for (; c + kStep <= n_in; c += kStep) {
    const __m512 n0 = _mm512_loadu_ps(x + c), n1 = _mm512_loadu_ps(x + c + 16);
    const __m512 n2 = _mm512_loadu_ps(x + c + 32), n3 = _mm512_loadu_ps(x + c + 48);
    for (int k = 0; k < 4; ++k) {
      const __m512i idx = _mm512_load_si512(kIdx[k]);
      // lanes 0-7: columns 4j + k of the first 32, 8-15: of the last 32
      const __m512 v =
          _mm512_shuffle_f32x4(_mm512_permutex2var_ps(n0, idx, n1), _mm512_permutex2var_ps(n2, idx, n3), 0x44);
      _mm512_storeu_ps(out + c + 16 * k, _mm512_mul_ps(_mm512_mul_ps(v, fa), fb));
    }
  }
  for (; c < n_in; ++c) out[permuted(c)] = f(x[c]);
}

// The last scale row of the run from scale row q0 (nbc scales a row, rows contiguous in s): rows q0 … q holding the
// same bits, q ≤ q_last. Compares s[j] with s[j + nbc] 16 at a time: the first difference ends the run.
TP_FP8_AVX512 int64_t run_end(const float* s, int64_t nbc, int64_t q0, int64_t q_last) {
  const int32_t* v = reinterpret_cast<const int32_t*>(s);
  const int64_t j1 = q_last * nbc;
  for (int64_t j = q0 * nbc; j < j1; j += 16) {
    const __mmask16 in = _bzhi_u32(0xffff, unsigned(std::min<int64_t>(16, j1 - j)));
    const __mmask16 ne = _mm512_mask_cmpneq_epi32_mask(in, _mm512_maskz_loadu_epi32(in, v + j),
                                                       _mm512_maskz_loadu_epi32(in, v + j + nbc));
    if (ne) return (j + __builtin_ctz(ne)) / nbc;
  }
  return q_last;
}

// Block scales (block_out rows × group_size columns a scale): rows [r0, r1) a block of rows at a time, each against
// x × that block's column scales (x_c · s[c / group_size], rounded to F32 once) · 2^k, k from the scaled row's max
// (as gemm_a16_avx2.cpp's fp8_block_rows): the per-channel decode then with scale 1. xp: the m rows of x permuted,
// unscaled; group: the scale column of each permuted position (−1: padding).
TP_FP8_AVX512 void block_rows(const PackedWeight& w, int64_t r0, int64_t r1, const float* xp, int64_t ps,
                              const int32_t* group, const float* xs, int64_t m, float* y) {
  const int64_t bo = w.block_out, nbc = w.n_groups();
  thread_local std::vector<float> xb, sv;  // this thread's x rows × the block's scales × 2^k; the scales
  thread_local std::vector<Pow2> back;
  xb.resize(size_t(m * ps));
  sv.resize(size_t(ps));
  back.assign(size_t(m), Pow2(0));
  for (int64_t b0 = r0; b0 < r1;) {
    const float* s = w.scales.data() + (b0 / bo) * nbc;
    // Following blocks with the same scales join the run: a fused weight's parts (q|k|v, gate|up) hold their
    // blocks a row each (block_out 1, compressed_tensors.cpp), which would otherwise scale x for every row.
    const int64_t b1 = std::min(r1, (run_end(w.scales.data(), nbc, b0 / bo, (r1 - 1) / bo) + 1) * bo);
    for (int64_t c = 0; c < ps; c += 16) {  // each permuted position's scale (0: padding)
      const __m512i g = _mm512_loadu_si512(group + c);
      _mm512_storeu_ps(
          sv.data() + c,
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), _mm512_cmpge_epi32_mask(g, _mm512_setzero_si512()), g, s, 4));
    }
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = xp + i * ps;
      float* o = xb.data() + i * ps;
      for (int64_t c = 0; c < ps; c += 16)
        _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_loadu_ps(xi + c), _mm512_loadu_ps(sv.data() + c)));
      const int k = fp8_x_exponent(amax_of(o, ps));
      back[size_t(i)] = Pow2(120 - k);
      const Pow2 f(k);
      const __m512 fa = _mm512_set1_ps(f.a), fb = _mm512_set1_ps(f.b);
      for (int64_t c = 0; c < ps; c += 16)
        _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o + c), fa), fb));
    }
    rows_range(w, b0, b1, xb.data(), ps, xs, back.data(), m, y);
    b0 = b1;
  }
}

}  // namespace

TP_FP8_AVX512 bool fp8_avx512_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads,
                                     bool x_quantized) {
  if (w.format != WeightFormat::Fp8E4M3 || m >= kFp8OnednnMinM || !cpu_is_intel() || !cpu_has_avx512f()) return false;
  const ActQuant act = x_quantized ? ActQuant::None : w.act;
  const bool fp8_act = act == ActQuant::Fp8Dynamic || act == ActQuant::Fp8Static;
  if (act != ActQuant::None && !(fp8_act && (act == ActQuant::Fp8Static || w.act_group == 0))) return false;
  if (fp8_act && !cpu_has_avx512bf16()) return false;  // fp8_act_row_bf16
  const bool blocks = w.block_out > 0;
  const int64_t n_in = w.n_in, ps = (n_in + kStep - 1) / kStep * kStep;
  thread_local std::vector<float> xf, xs, xq;
  thread_local std::vector<uint16_t> xb;
  thread_local std::vector<Pow2> back;
  thread_local std::vector<int32_t> group;
  xs.assign(size_t(m), 1.0f);
  back.assign(size_t(m), Pow2(0));
  // Rows of x (F32, or its E4M3 values), zero-padded to ps, each 64-column step permuted as widen's lanes: column
  // c + 4j + k at c + 16k + j; · 2^k (fp8_pow2.h) here, or with block scales a block of rows at a time (block_rows).
  xf.assign(size_t(m * ps), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * n_in;
    if (fp8_act) {
      const float s = act == ActQuant::Fp8Dynamic ? fp8_amax(xr, n_in) / kFp8E4M3Max : w.act_scale;
      xs[size_t(i)] = s;
      if (s == 0.0f) continue;  // q = 0
      xb.resize(size_t(n_in));
      xq.resize(size_t(n_in));
      fp8_act_row_bf16(xr, n_in, s, xb.data());
      for (int64_t c = 0; c < n_in; ++c) xq[size_t(c)] = bf16_to_f32(xb[size_t(c)]);
      xr = xq.data();
    }
    const int k = blocks ? 0 : fp8_x_exponent(amax_of(xr, n_in));
    back[size_t(i)] = Pow2(120 - k);
    permute_row(xr, n_in, Pow2(k), xf.data() + i * ps);
  }
  thread_local int64_t group_for[2] = {-1, -1};  // the (n_in, group_size) `group` was made for
  if (blocks && (group_for[0] != n_in || group_for[1] != w.group_size)) {
    group.assign(size_t(ps), -1);
    for (int64_t c0 = 0, g = 0; c0 < n_in; c0 += w.group_size, ++g)
      for (int64_t c = c0; c < std::min(n_in, c0 + w.group_size); ++c) group[size_t(permuted(c))] = int32_t(g);
    group_for[0] = n_in;
    group_for[1] = w.group_size;
  }
  const float* xd = xf.data();
  const float* xsd = xs.data();
  const Pow2* bk = back.data();
  const int32_t* gd = group.data();  // (inside the region the thread_local names are each thread's own)
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, 1, omp_get_thread_num(), omp_get_num_threads());
    if (blocks)
      block_rows(w, r0, r1, xd, ps, gd, xsd, m, y);
    else
      rows_range(w, r0, r1, xd, ps, xsd, bk, m, y);
  }
  return true;
}

}  // namespace tp::cpu::detail
