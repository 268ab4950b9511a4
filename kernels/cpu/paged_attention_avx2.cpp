// The AVX2 + FMA + F16C rows of paged attention: 8 stored elements widened to F32 per load —
//   f32 as is; bf16 shifted into the high half of an F32; int8 sign-extended and converted;
//   fp8 e4m3 rebuilt as the F16 with the same sign, exponent and mantissa bits (sign << 15 | bits << 7), which
//   is the E4M3 value × 2^-8 exactly (subnormals included), then vcvtph2ps — kFp8Unit = 256 puts the 2^8 back
//   into the row's scale. (0x7F, E4M3's NaN, reads as 480: never stored, write_kv saturates.)
// Products accumulate in F32 in vector accumulators; scores of 4 rows at a time (one q load for 4 rows, one
// horizontal reduction for 4 sums), V rows 4 at a time (one load and store of the output per 4 rows), and the
// softmax's exp 8 at a time (Cephes' expf: Cody-Waite reduction, degree-5 polynomial, 2^n from the exponent
// bits; ~1 ulp; inputs below -87 give exp(-87) ≈ 1.6e-38 instead of smaller, which no sum notices).
#include <immintrin.h>

#include "common/dtype.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/simd_exp.h"

#define TP_KV_TARGET __attribute__((target("avx2,fma,f16c")))
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"

namespace tp::cpu::detail {
namespace {

TP_KV_TARGET inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// Elements [i, i + 8) of a row, in the units of kFp8Unit.
template <KvDType D>
TP_KV_TARGET inline __m256 load8(const uint8_t* row, int64_t i) {
  const uint8_t* p = row + i * kv_elem_bytes<D>;
  if constexpr (D == KvDType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (D == KvDType::BF16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (D == KvDType::FP8_E4M3) {
    // byte << 8 in each 16-bit lane, shifted right arithmetically by 1 (the sign lands in bits 15 and 14),
    // bit 14 cleared: sign << 15 | (byte & 0x7F) << 7.
    const __m128i hi = _mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(hi, 1), _mm_set1_epi16(int16_t(0xBFFF))));
  } else {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
}

// Element i of a row, in the units of kFp8Unit.
template <KvDType D>
TP_KV_TARGET inline float load1(const uint8_t* row, int64_t i) {
  if constexpr (D == KvDType::F32) {
    float f;
    std::memcpy(&f, row + 4 * i, sizeof f);
    return f;
  } else if constexpr (D == KvDType::BF16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, sizeof h);
    return bf16_to_f32(h);
  } else if constexpr (D == KvDType::FP8_E4M3) {
    return e4m3_table()[row[i]] * (1.0f / 256.0f);
  } else {
    return float(int8_t(row[i]));
  }
}

struct Avx2Ops {
  static constexpr float kFp8Unit = 256.0f;

  template <KvDType D>
  TP_KV_TARGET static float dot(const float* q, const uint8_t* row, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<D>(row, i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8<D>(row, i + 8), a1);
    }
    if (i + 8 <= n) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<D>(row, i), a0);
      i += 8;
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; ++i) s += q[i] * load1<D>(row, i);
    return s;
  }

  template <KvDType D>
  TP_KV_TARGET static void dot4(const float* q, const uint8_t* row, int64_t stride, int64_t n, float* s) {
    const uint8_t *r1 = row + stride, *r2 = row + 2 * stride, *r3 = row + 3 * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_fmadd_ps(qv, load8<D>(row, i), a0);
      a1 = _mm256_fmadd_ps(qv, load8<D>(r1, i), a1);
      a2 = _mm256_fmadd_ps(qv, load8<D>(r2, i), a2);
      a3 = _mm256_fmadd_ps(qv, load8<D>(r3, i), a3);
    }
    // [a0 a1 a2 a3] sums: hadd pairs, then the two 128-bit halves.
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
    for (; i < n; ++i) {
      s[0] += q[i] * load1<D>(row, i);
      s[1] += q[i] * load1<D>(r1, i);
      s[2] += q[i] * load1<D>(r2, i);
      s[3] += q[i] * load1<D>(r3, i);
    }
  }

  template <KvDType D>
  TP_KV_TARGET static void axpy4(const float* w, const uint8_t* row, int64_t stride, int64_t n, float* out) {
    const uint8_t *r1 = row + stride, *r2 = row + 2 * stride, *r3 = row + 3 * stride;
    const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]),
                 w3 = _mm256_set1_ps(w[3]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 o = _mm256_loadu_ps(out + i);
      o = _mm256_fmadd_ps(w0, load8<D>(row, i), o);
      o = _mm256_fmadd_ps(w1, load8<D>(r1, i), o);
      o = _mm256_fmadd_ps(w2, load8<D>(r2, i), o);
      o = _mm256_fmadd_ps(w3, load8<D>(r3, i), o);
      _mm256_storeu_ps(out + i, o);
    }
    for (; i < n; ++i)
      out[i] += w[0] * load1<D>(row, i) + w[1] * load1<D>(r1, i) + w[2] * load1<D>(r2, i) + w[3] * load1<D>(r3, i);
  }

  TP_KV_TARGET static float exp_sum(float* s, int64_t n, float max) {
    const __m256 m = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
      _mm256_storeu_ps(s + i, e);
      acc = _mm256_add_ps(acc, e);
    }
    float sum = hsum(acc);
    for (; i < n; ++i) sum += (s[i] = std::exp(s[i] - max));
    return sum;
  }

  template <KvDType D>
  TP_KV_TARGET static void widen(const uint8_t* row, int64_t n, float s, float* out) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(sv, load8<D>(row, i)));
    for (; i < n; ++i) out[i] = s * load1<D>(row, i);
  }

  template <KvDType D>
  TP_KV_TARGET static void axpy(float w, const uint8_t* row, int64_t n, float* out) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8<D>(row, i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] += w * load1<D>(row, i);
  }
};

}  // namespace

AttendFn attend_avx2(KvDType d) { return attend_for<Avx2Ops>(d); }
// Decode tiles (the group's 3 query heads) of FP8 pools widen each K/V block once, as AVX-512 does for every dtype:
// reading the stored rows converts each E4M3 row again for every head (vcvtph2ps, 2 cycles a ymm on Zen 3).
// Zen 3, kv_attention_bench --tokens 1 --layers 30 --paths avx2, alternated twice: fp8_e4m3 4096 818 / 870 ->
// 629 / 630 µs, 16384 3341 / 3472 -> 2549 / 2675; BF16 within the noise and INT8 slower (524 / 577 -> 583 / 589):
// they keep reading the stored rows below kWidenRows.
TileFn tile_avx2(KvDType d) { return tile_for<Avx2Ops, 2>(d); }

}  // namespace tp::cpu::detail
