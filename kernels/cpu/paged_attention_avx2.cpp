// The AVX2 + FMA + F16C rows of paged attention: 8 stored elements widened to F32 per load —
//   f32 as is; bf16 shifted into the high half of an F32; int8 sign-extended and converted;
//   fp8 e4m3 rebuilt as the F16 with the same sign, exponent and mantissa bits (sign << 15 | bits << 7), which
//   is the E4M3 value × 2^-8 exactly (subnormals included), then vcvtph2ps — kFp8Unit = 256 puts the 2^8 back
//   into the row's scale. (0x7F, E4M3's NaN, reads as 480: never stored, write_kv saturates.)
// Products accumulate in F32 in vector accumulators. The naive kernel: scores of 4 rows at a time (one q load for
// 4 rows, one horizontal reduction for 4 sums), V rows 4 at a time (one load and store of the output per 4 rows).
// The tiled kernel (the group ops, paged_attention_tiled_impl.h's attend_heads_grouped): up to 4 query rows at once
// (a GQA group's heads), so each K / V element is loaded and widened once for all of them — scores of 3 rows × 4
// positions (4 × 2) in 12 (8) accumulators, V into 3 × 32 (4 × 16) output columns held in registers over a whole
// run of positions. Zen 3, 1 thread, kv_attention_bench --tokens 1 --layers 30 (bf16): 512 55 -> 37 µs,
// 16384 2790 -> 2340 µs; --tokens 512 at 4096: 131-145 -> 91-99 ms. Decode splits take every KV head in one work
// item (heads_avx2; paged_attention_tiled.cpp): 16384, bf16, 2 threads 1417-1443 -> 1328-1347 µs, 1 thread within
// the noise. While they work, dot_rows / axpy_rows issue the next run's prefetches a few lines a position
// (PrefetchLines, paged_attention_tiled_impl.h) instead of all at the run's start: Zen 3, 1 thread,
// kv_attention_bench --tokens 1 --layers 30 (bf16), 139e3ba's build and e166db6's alternated 3 times: 4096 571-706
// -> 461-468 µs, 16384 2379-3018 -> 1937-1985 µs; decode_bench SmolLM2 BF16 -d 4096 --tg 32: 24.0-25.3 -> 30.7-31.5
// tok/s. The
// softmax's exp 8 at a time (Cephes' expf: Cody-Waite reduction, degree-5 polynomial, 2^n from the
// exponent bits; ~1 ulp; inputs below -87 give exp(-87) ≈ 1.6e-38 instead of smaller, which no sum notices).
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

// The lane sums of [a0 a1 a2 a3]: hadd pairs, then the two 128-bit halves.
TP_KV_TARGET inline __m128 sums4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Scores of NR query rows (q [NR, hd]) against P stored rows (row + p · stride): s[r · ss + p]. Each K element is
// loaded and widened once for the NR rows; NR · P accumulators (at most 12, with a K vector: 13 of the 16 ymm).
template <KvDType D, int NR, int P, bool kPf>
TP_KV_TARGET inline void dot_block(const float* q, int64_t hd, const uint8_t* row, int64_t stride, float* s,
                                   int64_t ss, PrefetchLines* pf) {
  if constexpr (kPf) pf->issue(2 * P);
  __m256 a[NR][P];
  #pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) a[r][p] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= hd; i += 8) {
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const __m256 k = load8<D>(row + p * stride, i);
      #pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) a[r][p] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * hd + i), k, a[r][p]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    float* sr = s + r * ss;
    if constexpr (P == 4) {
      _mm_storeu_ps(sr, sums4(a[r][0], a[r][1], a[r][2], a[r][3]));
    } else if constexpr (P == 2 && NR % 2 == 0) {  // rows r and r + 1 in one reduction
      if (r % 2 == 0) {
        const __m128 t = sums4(a[r][0], a[r][1], a[r + 1][0], a[r + 1][1]);
        _mm_storel_pi(reinterpret_cast<__m64*>(sr), t);
        _mm_storeh_pi(reinterpret_cast<__m64*>(sr + ss), t);
      }
    } else {  // the same sum tree as sums4's: a position's score does not depend on its slot
      #pragma GCC unroll 16
      for (int p = 0; p < P; ++p) sr[p] = _mm_cvtss_f32(sums4(a[r][p], a[r][p], a[r][p], a[r][p]));
    }
    for (int64_t t = i; t < hd; ++t)
      for (int p = 0; p < P; ++p) sr[p] += q[r * hd + t] * load1<D>(row + p * stride, t);
  }
}

// Columns [i0, i0 + 8 · CB) of NR accumulator rows (acc [NR, hd]): acc_r = c[r] · acc_r + Σ_j w[r · ws + j] · x_j
// over n stored rows x_j (position j = b · seg + i at blocks[b] + i · stride), in j order. Each V element is loaded
// and widened once for the NR rows; NR · CB accumulators in registers for the whole block.
template <KvDType D, int NR, int CB, bool kPf>
TP_KV_TARGET inline void axpy_block(const float* w, int64_t ws, const uint8_t* const* blocks, int64_t seg,
                                    int64_t stride, int64_t n, int64_t hd, const float* c, float* acc, int64_t i0,
                                    PrefetchLines* pf) {
  __m256 a[NR][CB];
  #pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    const __m256 cr = _mm256_set1_ps(c[r]);
    #pragma GCC unroll 16
    for (int b = 0; b < CB; ++b) a[r][b] = _mm256_mul_ps(cr, _mm256_loadu_ps(acc + r * hd + i0 + 8 * b));
  }
  for (int64_t k = 0, j0 = 0; j0 < n; ++k, j0 += seg) {
    const uint8_t* x = blocks[k];
    const float* wj = w + j0;
    for (int64_t j = 0, nj = std::min(seg, n - j0); j < nj; ++j, x += stride, ++wj) {
      if constexpr (kPf) pf->issue(1);
      __m256 wv[NR];
      #pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) wv[r] = _mm256_broadcast_ss(wj + r * ws);
      #pragma GCC unroll 16
      for (int b = 0; b < CB; ++b) {
        const __m256 v = load8<D>(x, i0 + 8 * b);
        #pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) a[r][b] = _mm256_fmadd_ps(wv[r], v, a[r][b]);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    #pragma GCC unroll 16
    for (int b = 0; b < CB; ++b) _mm256_storeu_ps(acc + r * hd + i0 + 8 * b, a[r][b]);
  }
}

// Ops::dot_rows for NR rows (paged_attention_tiled_impl.h): P positions at a time within each block.
template <KvDType D, int NR, bool kPf = true>
TP_KV_TARGET inline void dot_rows_n(const float* q, int64_t hd, const uint8_t* const* blocks, int64_t seg,
                                    int64_t stride, int64_t n, float* s, int64_t ss, PrefetchLines* pf) {
  if constexpr (kPf)  // no prefetching (pf null): the loops without its calls
    if (pf == nullptr) return dot_rows_n<D, NR, false>(q, hd, blocks, seg, stride, n, s, ss, pf);
  constexpr int P = NR <= 3 ? 4 : 2;  // NR · P <= 12 accumulators
  for (int64_t b = 0, j0 = 0; j0 < n; ++b, j0 += seg) {
    const uint8_t* row = blocks[b];
    const int64_t nj = std::min(seg, n - j0);
    int64_t j = 0;
    for (; j + P <= nj; j += P) dot_block<D, NR, P, kPf>(q, hd, row + j * stride, stride, s + j0 + j, ss, pf);
    for (; j < nj; ++j) dot_block<D, NR, 1, kPf>(q, hd, row + j * stride, stride, s + j0 + j, ss, pf);
  }
}

// Ops::axpy_rows for NR rows: columns in blocks of 8 · CB, each block's accumulators in registers over all n rows.
template <KvDType D, int NR, bool kPf = true>
TP_KV_TARGET inline void axpy_rows_n(const float* w, int64_t ws, const uint8_t* const* blocks, int64_t seg,
                                     int64_t stride, int64_t n, int64_t hd, const float* c, float* acc,
                                     PrefetchLines* pf) {
  if constexpr (kPf)
    if (pf == nullptr) return axpy_rows_n<D, NR, false>(w, ws, blocks, seg, stride, n, hd, c, acc, pf);
  constexpr int CB = NR <= 3 ? 4 : 2;  // NR · CB <= 12 accumulators
  int64_t i = 0;
  for (; i + 8 * CB <= hd; i += 8 * CB)
    axpy_block<D, NR, CB, kPf>(w, ws, blocks, seg, stride, n, hd, c, acc, i, pf);
  for (; i + 8 <= hd; i += 8) axpy_block<D, NR, 1, kPf>(w, ws, blocks, seg, stride, n, hd, c, acc, i, pf);
  for (int r = 0; r < NR; ++r)
    for (int64_t t = i; t < hd; ++t) {
      float o = c[r] * acc[r * hd + t];
      for (int64_t j = 0; j < n; ++j) o += w[r * ws + j] * load1<D>(blocks[j / seg] + j % seg * stride, t);
      acc[r * hd + t] = o;
    }
}

struct Avx2Ops {
  static constexpr float kFp8Unit = 256.0f;
  static constexpr int64_t kGroupRows = 4;  // dot_rows / axpy_rows take up to this many query rows at once

  // The group ops of paged_attention_tiled_impl.h.
  template <KvDType D>
  TP_KV_TARGET static void dot_rows(const float* q, int64_t nr, int64_t hd, const uint8_t* const* blocks, int64_t seg,
                                    int64_t stride, int64_t n, float* s, int64_t ss, PrefetchLines* pf) {
    switch (nr) {
      case 1: return dot_rows_n<D, 1>(q, hd, blocks, seg, stride, n, s, ss, pf);
      case 2: return dot_rows_n<D, 2>(q, hd, blocks, seg, stride, n, s, ss, pf);
      case 3: return dot_rows_n<D, 3>(q, hd, blocks, seg, stride, n, s, ss, pf);
      default: return dot_rows_n<D, 4>(q, hd, blocks, seg, stride, n, s, ss, pf);
    }
  }

  template <KvDType D>
  TP_KV_TARGET static void axpy_rows(const float* w, int64_t ws, int64_t nr, const uint8_t* const* blocks,
                                     int64_t seg, int64_t stride, int64_t n, int64_t hd, const float* c, float* acc,
                                     PrefetchLines* pf) {
    switch (nr) {
      case 1: return axpy_rows_n<D, 1>(w, ws, blocks, seg, stride, n, hd, c, acc, pf);
      case 2: return axpy_rows_n<D, 2>(w, ws, blocks, seg, stride, n, hd, c, acc, pf);
      case 3: return axpy_rows_n<D, 3>(w, ws, blocks, seg, stride, n, hd, c, acc, pf);
      default: return axpy_rows_n<D, 4>(w, ws, blocks, seg, stride, n, hd, c, acc, pf);
    }
  }

  TP_KV_TARGET static float scale_max(float* s, int64_t n, float mul) {
    const __m256 mv = _mm256_set1_ps(mul);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + i), mv);
      _mm256_storeu_ps(s + i, x);
      mx = _mm256_max_ps(x, mx);  // a NaN score is passed over, as the scalar max below does
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float r = std::max(_mm_cvtss_f32(h), _mm_cvtss_f32(_mm_shuffle_ps(h, h, 1)));
    for (; i < n; ++i) {
      s[i] *= mul;
      r = s[i] > r ? s[i] : r;
    }
    return r;
  }

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
    _mm_storeu_ps(s, sums4(a0, a1, a2, a3));
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
TileFn tile_avx2(KvDType d) { return tile_for<Avx2Ops>(d); }
HeadsFn heads_avx2(KvDType d) { return heads_for<Avx2Ops>(d); }

}  // namespace tp::cpu::detail
