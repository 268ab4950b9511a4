// FP8 (E4M3) decode on Intel AVX-512 (packed_kernels.h: fp8_f16_decode): per-tensor or per-channel weight scales,
// F32 activations (FP8 weight-only) or FP8 ones per token / static (W8A8-FP8, emulated: x / s rounded to E4M3),
// every m below kFp8OnednnMinM (the prefill sizes keep gemm_fp8_bf16.cpp's oneDNN path).
//
// Why: gemm_fp8_bf16.cpp multiplies by vdpbf16ps, which issues once every 2 cycles on the AMX Xeon (family 6
// model 167; bench/isa_throughput): its decode ran at 10.7 GB/s (FP8 weight-only, x as two BF16 parts) and 14.2
// GB/s (FP8 activations) from cache, below one core's DRAM read. Here a weight byte b becomes the F16 with bits
// ((b sign-extended) << 7) & 0xbfff — sign to bit 15, the 4 exponent and 3 mantissa bits under F16's 5 and 10, so
// the F16's value is E4M3's × 2⁻⁸, subnormals included (0x7f / 0xff, E4M3's NaN, become ±1.875 · 2⁻⁸: the
// weights have none) — and vcvtph2ps widens 16 of them to F32; F32 FMAs against x then, exact products rounded
// once a sum as every A16 kernel. x: F32 as it is, or its E4M3 values q = E4M3(x / s) (exact in F32; the
// scale s after). A row is read 32 columns a step, in memory order one row after another (the W8A8 decode's
// order), software-prefetched kPrefetchBytes ahead; four accumulator chains a row, summed in one order; with
// m > 1 each widened step serves up to 4 rows of x.
// y = Σ × the weight scale × 2⁸ (× s). Every row of x gets the same operations whatever m: a row of a batch has
// the bits of that row alone.
#include <algorithm>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/dtype.h"
#include "common/fp_formats.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_F16 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,bmi2")))

// Prefetched into L2 (gemv.h prefetch_weights): 6144 ahead ran as L1 at 2048 did (SmolLM2 CT-FP8-dynamic tg128, 1
// thread, 72.2 vs 72.1 tok/s), L2 at 2048 lost 4% (69.0).
constexpr int64_t kPrefetchBytes = 6144;
constexpr int64_t kBlockRows = 16;        // weight rows a block (m > 4: every tile of x rows meets the block in L1)

// 32 weight bytes (the first n: the rest read as 0) -> two F32 vectors of value · 2⁻⁸ (columns 0-15, 16-31).
TP_F16 __attribute__((always_inline)) inline void widen(const uint8_t* p, int64_t n, __m512& lo, __m512& hi) {
  const __m256i b = n >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                            : _mm256_maskz_loadu_epi8(__mmask32(_bzhi_u32(~0u, unsigned(n))), p);
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7), _mm512_set1_epi16(short(0xbfff)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// One weight row (n_in bytes) against G rows of x (F32, zero-padded to a multiple of 32, ps apart): out[g] =
// Σ w · x / 2⁸. Each 32-column step is widened once for the G rows; every row of x gets the operations it gets at
// G = 1, in the same order.
template <int G>
TP_F16 void row_fp8(const uint8_t* row, int64_t n_in, const float* x, int64_t ps, bool prefetch, float (&out)[G]) {
  __m512 a0[G], a1[G], a2[G], a3[G], lo, hi;
  for (int g = 0; g < G; ++g) a0[g] = a1[g] = a2[g] = a3[g] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(row) + kPrefetchBytes;
  int64_t c = 0;
  for (; c + 64 <= n_in; c += 64, pf += 64) {
    if (prefetch) prefetch_weights(pf);
    widen(row + c, 32, lo, hi);
    for (int g = 0; g < G; ++g) {
      a0[g] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + g * ps + c), a0[g]);
      a1[g] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + g * ps + c + 16), a1[g]);
    }
    widen(row + c + 32, 32, lo, hi);
    for (int g = 0; g < G; ++g) {
      a2[g] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + g * ps + c + 32), a2[g]);
      a3[g] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + g * ps + c + 48), a3[g]);
    }
  }
  for (; c < n_in; c += 32) {  // the last (maybe short) steps: x is zero-padded past n_in
    widen(row + c, std::min<int64_t>(32, n_in - c), lo, hi);
    for (int g = 0; g < G; ++g) {
      a0[g] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + g * ps + c), a0[g]);
      a1[g] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + g * ps + c + 16), a1[g]);
    }
  }
  for (int g = 0; g < G; ++g)
    out[g] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[g], a1[g]), _mm512_add_ps(a2[g], a3[g])));
}

// Row r of W against rows [i0, i0 + G) of x: y[i · n_out + r].
template <int G>
TP_F16 void rows_of_x(const PackedWeight& w, int64_t r, const float* xd, int64_t ps, const float* xs, int64_t i0,
                      float* y) {
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const float ws = (w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)]) * 256.0f;
  float out[G];
  row_fp8<G>(row, w.n_in, xd + i0 * ps, ps, i0 == 0, out);
  for (int g = 0; g < G; ++g) y[(i0 + g) * w.n_out + r] = out[g] * ws * xs[i0 + g];
}

}  // namespace

TP_F16 bool fp8_f16_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Fp8E4M3 || w.block_out > 0 || m >= kFp8OnednnMinM || !cpu_is_intel() ||
      !cpu_has_avx512f())
    return false;
  const bool fp8_act = w.act == ActQuant::Fp8Dynamic || w.act == ActQuant::Fp8Static;
  if (w.act != ActQuant::None && !(fp8_act && (w.act == ActQuant::Fp8Static || w.act_group == 0))) return false;
  if (fp8_act && !cpu_has_avx512bf16()) return false;  // fp8_act_row_bf16
  const int64_t n_in = w.n_in, ps = (n_in + 31) / 32 * 32;
  thread_local std::vector<float> xf, xs;
  thread_local std::vector<uint16_t> xb;
  xs.assign(size_t(m), 1.0f);
  // F32 x whose rows are whole 32-column steps is read where it is; else rows zero-padded to ps (or x's E4M3 values).
  const bool in_place = !fp8_act && ps == n_in;
  if (!in_place) xf.assign(size_t(m * ps), 0.0f);
  for (int64_t i = 0; i < m && !in_place; ++i) {
    const float* xr = x + i * n_in;
    float* out = xf.data() + i * ps;
    if (!fp8_act) {
      std::memcpy(out, xr, size_t(n_in) * 4);
      continue;
    }
    const float s = w.act == ActQuant::Fp8Dynamic ? fp8_amax(xr, n_in) / kFp8E4M3Max : w.act_scale;
    xs[size_t(i)] = s;
    if (s == 0.0f) continue;  // q = 0
    xb.resize(size_t(n_in));
    fp8_act_row_bf16(xr, n_in, s, xb.data());
    for (int64_t c = 0; c < n_in; ++c) out[c] = bf16_to_f32(xb[size_t(c)]);
  }
  const float* xd = in_place ? x : xf.data();
  const float* xsd = xs.data();
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [r0, r1] = thread_rows(w.n_out, 1, omp_get_thread_num(), omp_get_num_threads());
    prefetch_range_start(w.data.data() + r0 * w.row_bytes(), kPrefetchBytes, (r1 - r0) * w.row_bytes());
    // Blocks of kBlockRows weight rows: each tile of 4 rows of x meets the whole block while it is in L1.
    for (int64_t rb = r0; rb < r1; rb += kBlockRows) {
      const int64_t re = std::min(r1, rb + kBlockRows);
      int64_t i = 0;
      for (; i + 4 <= m; i += 4)
        for (int64_t r = rb; r < re; ++r) rows_of_x<4>(w, r, xd, ps, xsd, i, y);
      for (int64_t r = rb; r < re; ++r) switch (m - i) {
          case 1: rows_of_x<1>(w, r, xd, ps, xsd, i, y); break;
          case 2: rows_of_x<2>(w, r, xd, ps, xsd, i, y); break;
          case 3: rows_of_x<3>(w, r, xd, ps, xsd, i, y); break;
          default: break;
        }
    }
  }
  return true;
}

}  // namespace tp::cpu::detail
