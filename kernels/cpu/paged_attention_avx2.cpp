// The AVX2 + FMA + F16C rows of paged attention: 8 stored elements widened to F32 per load —
//   f32 as is; bf16 shifted into the high half of an F32; int8 sign-extended and converted;
//   fp8 e4m3 rebuilt as the F16 with the same sign, exponent and mantissa bits (sign << 15 | bits << 7), which
//   is the E4M3 value × 2^-8 exactly (subnormals included), then vcvtph2ps — kFp8Unit = 256 puts the 2^8 back
//   into the row's scale. (0x7F, E4M3's NaN, reads as 480: never stored, write_kv saturates.)
// Products accumulate in F32 in two vector accumulators.
#include <immintrin.h>

#include "common/dtype.h"
#include "kernels/cpu/kv_write.h"

#define TP_KV_TARGET __attribute__((target("avx2,fma,f16c")))
#include "kernels/cpu/paged_attention_impl.h"

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
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
    const __m128i bits = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7);
    return _mm256_cvtph_ps(_mm_or_si128(sign, bits));
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
  TP_KV_TARGET static void axpy(float w, const uint8_t* row, int64_t n, float* out) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8<D>(row, i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] += w * load1<D>(row, i);
  }
};

}  // namespace

AttendFn attend_avx2(KvDType d) { return attend_for<Avx2Ops>(d); }

}  // namespace tp::cpu::detail
