// The GGUF block kernels for AVX-512 VNNI + VBMI (vpdpbusd on 512-bit vectors for the 32-blocks, 256-bit for the
// K-quants; vpermb): gemm_gguf_simd.inc compiled for that ISA. Runs on Intel Ice Lake / Sapphire Rapids and
// later and AMD Zen 4+ (not Cascade Lake: no VBMI);
// gemm_gguf() picks it only where __builtin_cpu_supports says so.
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")
// GCC 12's AVX-512 headers trip -Wuninitialized / -Wmaybe-uninitialized once inlined (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"

#define TP_GGUF_VNNI 1
#define TP_GGUF_NS vnni
#include "kernels/cpu/gemm_gguf_simd.inc"

namespace tp::cpu::detail {
void gguf_rows_vnni(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y) {
  vnni::rows(w, a, r0, r1, y);
}

void quantize_q8_32_elems_avx512(const float* x, int64_t n, int8_t* q, float* amax, int* sum) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float am = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const __m512 id = _mm512_set1_ps(am != 0.0f ? 127.f / am : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
    amax[b] = am;
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

void quantize_q8_k_elems_avx512(const float* x, int64_t n, int8_t* q, float* vmax, int16_t* bsums) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * k)));
    const float am = _mm512_reduce_max_ps(m);
    if (am == 0.0f) {
      vmax[b] = 0.0f;
      std::memset(q + 256 * b, 0, 256);
      std::fill(bsums + 16 * b, bsums + 16 * b + 16, int16_t(0));
      continue;
    }
    float v = 0;  // the first element of largest magnitude (as the scalar loop's strict >)
    for (int k = 0; k < 16; ++k) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * k)), _mm512_set1_ps(am), _CMP_EQ_OQ);
      if (hit) {
        v = xb[16 * k + __builtin_ctz(hit)];
        break;
      }
    }
    vmax[b] = v;
    const __m512 iscale = _mm512_set1_ps(-127.f / v);
    for (int k = 0; k < 16; ++k) {
      const __m512i qi = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * k), iscale)), _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 256 * b + 16 * k), _mm512_cvtepi32_epi8(qi));
      bsums[16 * b + k] = int16_t(_mm512_reduce_add_epi32(qi));
    }
  }
}

}  // namespace tp::cpu::detail
