// The AVX-512 (F + BW + VL + DQ) rows of paged attention, for CPUs such as AMD Zen 4 and Intel since Skylake-X:
// 16 stored elements widened to F32 per load (f32 as is; bf16 shifted into the high half of an F32; int8
// sign-extended; fp8 e4m3 rebuilt as the F16 with the same bits, × 2^-8, as in paged_attention_avx2.cpp, so
// kFp8Unit = 256), products accumulated in F32 with FMA.
//
// Tile kernels:
// - with AttentionTiling::lanes (the default; see paged_attention.h) and head_dim a multiple of 16:
//   * prefill tiles (>= kWidenRows rows): a register-blocked kernel with the query rows across the 16 lanes.
//     Q^T [head_dim, W] (W = rows rounded up to 16) is built once per tile; each 16-position chunk of a KV block
//     is widened once to F32 (× its scale) and then, for each vector of 16 rows,
//       S^T[j] = Σ_d K[j][d] · Q^T[d]        (16 accumulators, one FMA with a broadcast K element per (j, d)),
//     the online softmax runs on whole vectors (running max, sum, rescale factor per row), causal and padding
//     lanes masked to zero weight, and
//       Acc^T[d] = c · Acc^T[d] + Σ_j V[j][d] · P^T[j]   (16 accumulators over d, one FMA per (j, d)).
//     No horizontal reductions; the FMAs run at the vector unit's F32 peak. Acc^T is transposed back once per
//     tile. The loops over the 16 accumulators are unrolled (#pragma GCC unroll) so they live in registers.
//   * smaller tiles (decode: one token × the GQA group): attend_tile_lanes_few, the chunk's 16 positions across
//     the lanes (K^T per chunk), each row taking exactly the operations of the kernel above in the same order.
//   This file is built with -ffp-contract=off (kernels/cpu/CMakeLists.txt): every FMA is written out, so both
//   kernels give a row the same bits (tests/kernels/test_paged_attention_tiled.cpp, LanesPrefillEqualsDecode…).
// - otherwise (lanes off, or head_dim % 16 != 0): the row-ops policy of paged_attention_tiled_impl.h with 512-bit
//   rows (4 K rows per q load, 4 V rows per output load/store).
// GCC 12's AVX-512 headers trip -Wuninitialized / -Wmaybe-uninitialized once inlined (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "common/dtype.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/simd_exp.h"

#define TP_KV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"
#include "kernels/cpu/paged_attention_lanes.h"

namespace tp::cpu::detail {
namespace {

constexpr int64_t kLanes = 16;

// Elements [i, i + 16) of a row, in the units of kFp8Unit.
template <KvDType D>
TP_KV_TARGET inline __m512 load16(const uint8_t* row, int64_t i) {
  const uint8_t* p = row + i * kv_elem_bytes<D>;
  if constexpr (D == KvDType::F32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (D == KvDType::BF16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  } else if constexpr (D == KvDType::FP8_E4M3) {
    // byte << 8 in each 16-bit lane, shifted right arithmetically by 1, bit 14 cleared: sign << 15 | bits << 7.
    const __m256i hi = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 8);
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(hi, 1), _mm256_set1_epi16(int16_t(0xBFFF))));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
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

TP_KV_TARGET inline __m256 half_sum(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

TP_KV_TARGET inline float hsum(__m512 v) {
  const __m256 h = half_sum(v);
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

struct Avx512Ops {
  static constexpr float kFp8Unit = 256.0f;

  template <KvDType D>
  TP_KV_TARGET static float dot(const float* q, const uint8_t* row, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16<D>(row, i), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load16<D>(row, i + 16), a1);
    }
    if (i + 16 <= n) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16<D>(row, i), a0);
      i += 16;
    }
    float s = hsum(_mm512_add_ps(a0, a1));
    for (; i < n; ++i) s += q[i] * load1<D>(row, i);
    return s;
  }

  template <KvDType D>
  TP_KV_TARGET static void dot4(const float* q, const uint8_t* row, int64_t stride, int64_t n, float* s) {
    const uint8_t *r1 = row + stride, *r2 = row + 2 * stride, *r3 = row + 3 * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 qv = _mm512_loadu_ps(q + i);
      a0 = _mm512_fmadd_ps(qv, load16<D>(row, i), a0);
      a1 = _mm512_fmadd_ps(qv, load16<D>(r1, i), a1);
      a2 = _mm512_fmadd_ps(qv, load16<D>(r2, i), a2);
      a3 = _mm512_fmadd_ps(qv, load16<D>(r3, i), a3);
    }
    // 512 → 256 bits each, then [a0 a1 a2 a3] sums as in the AVX2 rows: hadd pairs, then the 128-bit halves.
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(half_sum(a0), half_sum(a1)), _mm256_hadd_ps(half_sum(a2), half_sum(a3)));
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
    const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]), w2 = _mm512_set1_ps(w[2]),
                 w3 = _mm512_set1_ps(w[3]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 o = _mm512_loadu_ps(out + i);
      o = _mm512_fmadd_ps(w0, load16<D>(row, i), o);
      o = _mm512_fmadd_ps(w1, load16<D>(r1, i), o);
      o = _mm512_fmadd_ps(w2, load16<D>(r2, i), o);
      o = _mm512_fmadd_ps(w3, load16<D>(r3, i), o);
      _mm512_storeu_ps(out + i, o);
    }
    for (; i < n; ++i)
      out[i] += w[0] * load1<D>(row, i) + w[1] * load1<D>(r1, i) + w[2] * load1<D>(r2, i) + w[3] * load1<D>(r3, i);
  }

  template <KvDType D>
  TP_KV_TARGET static void axpy(float w, const uint8_t* row, int64_t n, float* out) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, _mm512_fmadd_ps(wv, load16<D>(row, i), _mm512_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] += w * load1<D>(row, i);
  }

  TP_KV_TARGET static float exp_sum(float* s, int64_t n, float max) {
    const __m512 m = _mm512_set1_ps(max);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
      _mm512_storeu_ps(s + i, e);
      acc = _mm512_add_ps(acc, e);
    }
    float sum = hsum(acc);
    for (; i < n; ++i) sum += (s[i] = std::exp(s[i] - max));
    return sum;
  }

  template <KvDType D>
  TP_KV_TARGET static void widen(const uint8_t* row, int64_t n, float s, float* out) {
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(sv, load16<D>(row, i)));
    for (; i < n; ++i) out[i] = s * load1<D>(row, i);
  }
};

// One vector of 16 query rows (lanes) against one chunk of <= 16 positions whose K and V rows, widened and
// scaled, are kw / vw [16, hd] (rows >= the chunk's length zero). qt, at: [hd, W] with this vector's lanes at
// column offset 0 of each row (the caller offsets the pointers); pt [16, 16] scratch. m, l: this vector's running
// max and sum. visible[j]: the lanes that see chunk position j (causal, padding), 0 past the chunk.
TP_KV_TARGET inline void chunk_rows(const float* kw, const float* vw, int64_t hd, int64_t W, const float* qt, float* at,
                                    const __mmask16* visible, float* pt, float* m, float* l) {
  __m512 s[kLanes];
  #pragma GCC unroll 16
  for (int j = 0; j < kLanes; ++j) s[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const __m512 qv = _mm512_loadu_ps(qt + d * W);
    const float* kd = kw + d;
    #pragma GCC unroll 16
    for (int j = 0; j < kLanes; ++j) s[j] = _mm512_fmadd_ps(_mm512_set1_ps(kd[j * hd]), qv, s[j]);
  }
  const __m512 c = chunk_softmax(s, visible, pt, m, l);
  int n_vis = 0;  // positions some lane sees: a prefix of the chunk
  while (n_vis < kLanes && visible[n_vis]) ++n_vis;
  for (int64_t d0 = 0; d0 < hd; d0 += kLanes) {
    __m512 a[kLanes];
    #pragma GCC unroll 16
    for (int i = 0; i < kLanes; ++i) a[i] = _mm512_mul_ps(_mm512_loadu_ps(at + (d0 + i) * W), c);
    for (int j = 0; j < n_vis; ++j) {
      const __m512 p = _mm512_loadu_ps(pt + j * kLanes);
      const float* vj = vw + j * hd + d0;
      #pragma GCC unroll 16
      for (int i = 0; i < kLanes; ++i) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(vj[i]), p, a[i]);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < kLanes; ++i) _mm512_storeu_ps(at + (d0 + i) * W, a[i]);
  }
}

// attend_tile (paged_attention_tiled_impl.h) for tiles of >= kWidenRows rows and head_dim % 16 == 0.
template <KvDType D>
TP_KV_TARGET void attend_tile_lanes(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0,
                                    int64_t b1, TileScratch& sc, float* m, float* l, float* acc) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g, n_vec = (n_rows + kLanes - 1) / kLanes, W = n_vec * kLanes;
  const int64_t head_at = kv_head * hd * kv_elem_bytes<D>;
  // Scratch: qt, at [hd, W]; kw, vw [16, hd]; pt [16, 16]; mm, ll [W]; row positions [W].
  const size_t need = size_t(2 * hd * W + 2 * kLanes * hd + kLanes * kLanes + 3 * W);
  if (sc.x.size() < need) sc.x.resize(need);
  float* qt = sc.x.data();
  float* at = qt + hd * W;
  float* kw = at + hd * W;
  float* vw = kw + kLanes * hd;
  float* pt = vw + kLanes * hd;
  float* mm = pt + kLanes * kLanes;
  float* ll = mm + W;
  int32_t* rpos = reinterpret_cast<int32_t*>(ll + W);
  const int64_t pos0 = a.start_pos + t0, last = pos0 + n_tok - 1;
  for (int64_t r = 0; r < W; ++r) {
    mm[r] = -INFINITY;
    ll[r] = 0.0f;
    rpos[r] = r < n_rows ? int32_t(pos0 + r / g) : -1;  // padding lanes see nothing
  }
  for (int64_t i = 0; i < hd * W; ++i) qt[i] = at[i] = 0.0f;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd;
    for (int64_t d = 0; d < hd; ++d) qt[d * W + r] = src[d] * a.scale;
  }
  __mmask16 visible[kLanes];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * bs;
    if (p0 > last) break;
    const int64_t n = std::min(bs, last + 1 - p0);
    const uint8_t* kb = k.block(a.block_table[b]) + head_at;
    const uint8_t* vb = v.block(a.block_table[b]) + head_at;
    const float ks = row_scale<D, Avx512Ops>(k, kb - head_at, kv_head);
    const float vs = row_scale<D, Avx512Ops>(v, vb - head_at, kv_head);
    if (b + 1 < b1 && p0 + bs <= last) {
      const uint8_t* kn = k.block(a.block_table[b + 1]) + head_at;
      const uint8_t* vn = v.block(a.block_table[b + 1]) + head_at;
      for (int64_t j = 0; j < bs; ++j)
        for (int64_t o = 0; o < hd * kv_elem_bytes<D>; o += 64) {
          __builtin_prefetch(kn + j * row + o);
          __builtin_prefetch(vn + j * row + o);
        }
    }
    for (int64_t c0 = 0; c0 < n; c0 += kLanes) {
      const int64_t nc = std::min(kLanes, n - c0);
      for (int64_t j = 0; j < kLanes; ++j) {
        if (j < nc) {
          Avx512Ops::widen<D>(kb + (c0 + j) * row, hd, ks, kw + j * hd);
          Avx512Ops::widen<D>(vb + (c0 + j) * row, hd, vs, vw + j * hd);
        } else {
          for (int64_t d = 0; d < hd; ++d) kw[j * hd + d] = vw[j * hd + d] = 0.0f;
        }
      }
      const int64_t cpos = p0 + c0;  // position of the chunk's first row
      // Rows of tokens before cpos see nothing of this chunk: start at the vector holding the first that does.
      const int64_t first_vec = std::max<int64_t>(0, cpos - pos0) * g / kLanes;
      for (int64_t iv = first_vec; iv < n_vec; ++iv) {
        const __m512i rp = _mm512_loadu_si512(rpos + iv * kLanes);
        for (int64_t j = 0; j < kLanes; ++j)
          visible[j] = j < nc ? _mm512_cmp_epi32_mask(rp, _mm512_set1_epi32(int32_t(cpos + j)), _MM_CMPINT_NLT) : 0;
        chunk_rows(kw, vw, hd, W, qt + iv * kLanes, at + iv * kLanes, visible, pt, mm + iv * kLanes,
                   ll + iv * kLanes);
      }
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    m[r] = mm[r];
    l[r] = ll[r];
    for (int64_t d = 0; d < hd; ++d) acc[r * hd + d] = at[d * W + r];
  }
}

// attend_tile_lanes' arithmetic for tiles of few rows (decode: one token × the GQA group; prefill chunks of
// < kWidenRows rows), with the chunk's 16 positions across the lanes instead of the rows: every row gets the same
// operations in the same order as in attend_tile_lanes, so a token's output does not depend on the tile, chunk or
// batch it was computed in. Per row and 16-position chunk:
//   S[j] = Σ_d K[j][d] · q[d]           one FMA chain over d from 0, as the lane kernel's (K^T built once a chunk)
//   M' = max(M, S[j] seen), c = exp16(M − M'), L' = L·c + P[0] + … + P[15] (in order; unseen P = 0)
//   Acc[d] = c · Acc[d] + Σ_j V[j][d] · P[j]  (j in order, FMA)
// A row that sees nothing of a chunk is left as it is, which is what the lane kernel's update leaves (c = 1 and
// zero weights, or l = acc = 0 before the first position).

// NG consecutive 16-position chunks (K^T kt + i·hd·16 [hd, 16], V vw + i·16·hd [nc_i, hd]) against R consecutive
// rows from r0 of a small tile, each row's own operations and order attend_tile_lanes_few's (above), in three
// passes over the chunks:
//   scores   NG·R independent FMA chains over d (one chain is hd dependent FMAs: with R = 3 rows alone they left
//            the FMA units idle most of the time);
//   softmax  each chunk in turn (a row's running max moves chunk by chunk): c and the weights P into pj;
//   sums     L = L·c + P[0] + … + P[15] and Acc = c·Acc + Σ_j V[j]·P[j], chunk after chunk, Acc held in registers
//            over all NG chunks (min(hd / 16, 16 / R) vectors of d at a time; loaded and stored once a group).
// Zen 5, kv_attention_bench bf16, one layer in cache: 4096 positions 191 -> 178 µs against one chunk at a time with
// Acc through memory (bench/results/zen5-kernels-20261204.md). pj: [NG, R, 16] scratch (the weights, read back
// scalar by the sums).
struct RowsArgs {
  const float* qs;
  const float* kt;
  const float* vw;
  float* pj;
  const int64_t* cpos;  // [NG] each chunk's first position
  const int64_t* nc;    // [NG] each chunk's positions (<= 16)
  int64_t hd, g, pos0, r0;
};

template <int R, int NG>
TP_KV_TARGET inline void few_rows_chunks(const RowsArgs& a, float* m, float* l, float* acc) {
  const int64_t hd = a.hd;
  __m512 sv[NG][R];
  for (int i = 0; i < NG; ++i)
    for (int r = 0; r < R; ++r) sv[i][r] = _mm512_setzero_ps();
  const float* q0 = a.qs + a.r0 * hd;
  for (int64_t d = 0; d < hd; ++d) {
    __m512 qd[R];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) qd[r] = _mm512_set1_ps(q0[r * hd + d]);
    #pragma GCC unroll 4
    for (int i = 0; i < NG; ++i) {
      __m512 kd = _mm512_loadu_ps(a.kt + (i * hd + d) * kLanes);
      // One load for the R FMAs: GCC otherwise folds it into each (R loads of the same vector a d); one load ran
      // the kernel 178 -> 171 µs at 4096 positions in cache (Zen 5).
      __asm__("" : "+v"(kd));
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) sv[i][r] = _mm512_fmadd_ps(kd, qd[r], sv[i][r]);
    }
  }
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  int64_t nv[NG][R], nv_max[NG];
  float c[NG][R];
  for (int i = 0; i < NG; ++i) {
    nv_max[i] = 0;
    for (int r = 0; r < R; ++r) {
      const int64_t row = a.r0 + r, rp = a.pos0 + row / a.g;
      float* pj = a.pj + (i * R + r) * kLanes;
      nv[i][r] = rp < a.cpos[i] ? 0 : std::min(a.nc[i], rp - a.cpos[i] + 1);
      if (nv[i][r] == 0) {  // the row sees nothing of this chunk: left as it is
        c[i][r] = 1.0f;
        continue;
      }
      nv_max[i] = std::max(nv_max[i], nv[i][r]);
      const __mmask16 visible = __mmask16((1u << nv[i][r]) - 1);
      const __m512 s = _mm512_mask_blend_ps(visible, neg_inf, sv[i][r]);
      const float m_old = m[row];
      const float mx = std::max(m_old, _mm512_reduce_max_ps(s));
      const float sub = mx == -INFINITY ? 0.0f : mx;
      // exp16(0) is exactly 1: the max did not move (the common case once a row has seen a few chunks).
      c[i][r] = mx == m_old && m_old != -INFINITY ? 1.0f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(m_old - sub)));
      _mm512_storeu_ps(pj, _mm512_maskz_mov_ps(visible, exp16(_mm512_sub_ps(s, _mm512_set1_ps(sub)))));
      m[row] = mx;
    }
  }
  for (int r = 0; r < R; ++r) {
    float L = l[a.r0 + r];
    for (int i = 0; i < NG; ++i) {
      if (nv[i][r] == 0) continue;
      const float* pj = a.pj + (i * R + r) * kLanes;
      L *= c[i][r];
      for (int j = 0; j < kLanes; ++j) L += pj[j];  // in order; unseen weights are 0
    }
    l[a.r0 + r] = L;
  }
  constexpr int DV = R <= 2 ? 8 : 4;  // vectors of d a pass: R · DV <= 16 accumulators
  for (int64_t d0 = 0; d0 < hd; d0 += DV * kLanes) {
    const int dv = int(std::min<int64_t>(DV, (hd - d0) / kLanes));
    __m512 ac[R][DV];
    for (int r = 0; r < R; ++r) {
      const float* ar = acc + (a.r0 + r) * hd + d0;
      #pragma GCC unroll 8
      for (int v = 0; v < DV; ++v) ac[r][v] = v < dv ? _mm512_loadu_ps(ar + v * kLanes) : _mm512_setzero_ps();
    }
    for (int i = 0; i < NG; ++i) {
      if (nv_max[i] == 0) continue;
      const float* vw = a.vw + i * kLanes * hd + d0;
      for (int r = 0; r < R; ++r) {
        if (nv[i][r] == 0) continue;
        const __m512 cv = _mm512_set1_ps(c[i][r]);
        #pragma GCC unroll 8
        for (int v = 0; v < DV; ++v) ac[r][v] = _mm512_mul_ps(ac[r][v], cv);
      }
      for (int64_t j = 0; j < nv_max[i]; ++j) {
        __m512 vj[DV];
        #pragma GCC unroll 8
        for (int v = 0; v < DV; ++v) vj[v] = v < dv ? _mm512_loadu_ps(vw + j * hd + v * kLanes) : _mm512_setzero_ps();
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          if (j >= nv[i][r]) continue;  // not seen by this row
          const __m512 p = _mm512_set1_ps(a.pj[(i * R + r) * kLanes + j]);
          #pragma GCC unroll 8
          for (int v = 0; v < DV; ++v) ac[r][v] = _mm512_fmadd_ps(vj[v], p, ac[r][v]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float* ar = acc + (a.r0 + r) * hd + d0;
      #pragma GCC unroll 8
      for (int v = 0; v < DV; ++v)
        if (v < dv) _mm512_storeu_ps(ar + v * kLanes, ac[r][v]);
    }
  }
}

template <int R>
TP_KV_TARGET void few_rows_group(const RowsArgs& a, int ng, float* m, float* l, float* acc) {
  switch (ng) {
    case 1: few_rows_chunks<R, 1>(a, m, l, acc); break;
    case 2: few_rows_chunks<R, 2>(a, m, l, acc); break;
    case 3: few_rows_chunks<R, 3>(a, m, l, acc); break;
    default: few_rows_chunks<R, 4>(a, m, l, acc); break;
  }
}

// Chunks whose scores few_rows_chunks computes together: up to 4 (16 · 4 positions), fewer where their K^T and V
// (2 · 16 · hd F32 a chunk) would leave L1.
inline int few_group_chunks(int64_t hd) { return hd <= 64 ? 4 : hd <= 128 ? 2 : 1; }

template <KvDType D>
TP_KV_TARGET void attend_tile_lanes_few(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0,
                                        int64_t b1, TileScratch& sc, float* m, float* l, float* acc) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g;
  const int64_t head_at = kv_head * hd * kv_elem_bytes<D>;
  const int G = few_group_chunks(hd);
  // Scratch: qs [n_rows, hd] scaled queries; kt [G, hd, 16] the chunks' K transposed; vw [G, 16, hd]; pj [G, 4, 16].
  const size_t need = size_t(n_rows * hd + 2 * G * kLanes * hd + G * 4 * kLanes);
  if (sc.x.size() < need) sc.x.resize(need);
  float* qs = sc.x.data();
  float* kt = qs + n_rows * hd;
  float* vw = kt + G * kLanes * hd;
  float* pj = vw + G * kLanes * hd;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd;
    for (int64_t d = 0; d < hd; ++d) qs[r * hd + d] = src[d] * a.scale;
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int64_t d = 0; d < hd; ++d) acc[r * hd + d] = 0.0f;
  }
  const int64_t pos0 = a.start_pos + t0, last = pos0 + n_tok - 1;
  // The first of a split's KV heads to run (paged_attention_tiled.cpp runs them last head first) prefetches whole
  // rows, every head's part: the others then read them from cache instead of each streaming its 1 / n_kv of them.
  const bool full_rows = lay.n_kv_heads > 1 && kv_head == lay.n_kv_heads - 1;
  int64_t cpos[4], ncs[4];
  int ng = 0;
  const auto run_group = [&] {
    for (int64_t r = 0; r < n_rows; r += 4) {
      const RowsArgs ra{qs, kt, vw, pj, cpos, ncs, hd, g, pos0, r};
      switch (std::min<int64_t>(4, n_rows - r)) {
        case 1: few_rows_group<1>(ra, ng, m, l, acc); break;
        case 2: few_rows_group<2>(ra, ng, m, l, acc); break;
        case 3: few_rows_group<3>(ra, ng, m, l, acc); break;
        default: few_rows_group<4>(ra, ng, m, l, acc); break;
      }
    }
    ng = 0;
  };
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * bs;
    if (p0 > last) break;
    const int64_t n = std::min(bs, last + 1 - p0);
    const uint8_t* kb = k.block(a.block_table[b]) + head_at;
    const uint8_t* vb = v.block(a.block_table[b]) + head_at;
    const float ks = row_scale<D, Avx512Ops>(k, kb - head_at, kv_head);
    const float vs = row_scale<D, Avx512Ops>(v, vb - head_at, kv_head);
    prefetch_ahead(k, v, a.block_table, b, b0, b1, last, head_at, hd * kv_elem_bytes<D>, full_rows);
    const __m512 ksv = _mm512_set1_ps(ks);
    for (int64_t c0 = 0; c0 < n; c0 += kLanes) {
      const int64_t nc = std::min(kLanes, n - c0);
      float* ktc = kt + ng * hd * kLanes;
      float* vwc = vw + ng * kLanes * hd;
      for (int64_t d0 = 0; d0 < hd; d0 += kLanes) {  // K^T, widened × ks as the lane kernel's kw (0 past nc)
        __m512 t[kLanes];
        for (int64_t j = 0; j < kLanes; ++j)
          t[j] = j < nc ? _mm512_mul_ps(ksv, load16<D>(kb + (c0 + j) * row, d0)) : _mm512_setzero_ps();
        transpose16(t);
        for (int64_t i = 0; i < kLanes; ++i) _mm512_storeu_ps(ktc + (d0 + i) * kLanes, t[i]);
      }
      for (int64_t j = 0; j < nc; ++j) Avx512Ops::widen<D>(vb + (c0 + j) * row, hd, vs, vwc + j * hd);
      cpos[ng] = p0 + c0;
      ncs[ng] = nc;
      if (++ng == G) run_group();
    }
  }
  if (ng > 0) run_group();
}

// Small tiles of >= 2 rows (decode with GQA: the group's heads) widen each K/V block once too: the 512-bit
// widening costs two ops per 16 elements, which reading the stored rows would pay again for every row.
constexpr int64_t kWidenRowsAvx512 = 2;

template <KvDType D>
TP_KV_TARGET void tile512(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0, int64_t b1,
                          TileScratch& sc, float* m, float* l, float* acc) {
  if (a.lanes && a.k->layout.head_dim % kLanes == 0) {
    if (n_tok * a.group >= kWidenRows)
      attend_tile_lanes<D>(a, kv_head, t0, n_tok, b0, b1, sc, m, l, acc);
    else
      attend_tile_lanes_few<D>(a, kv_head, t0, n_tok, b0, b1, sc, m, l, acc);
  } else
    attend_tile<D, Avx512Ops, kWidenRowsAvx512>(a, kv_head, t0, n_tok, b0, b1, sc, m, l, acc);
}

}  // namespace

AttendFn attend_avx512(KvDType d) { return attend_for<Avx512Ops>(d); }

TileFn tile_avx512(KvDType d) {
  switch (d) {
    case KvDType::F32: return tile512<KvDType::F32>;
    case KvDType::BF16: return tile512<KvDType::BF16>;
    case KvDType::FP8_E4M3: return tile512<KvDType::FP8_E4M3>;
    case KvDType::INT8: return tile512<KvDType::INT8>;
  }
  return nullptr;
}

}  // namespace tp::cpu::detail
