// Private to kernels/cpu/paged_attention*.cpp: the attention of one (query token, head) over a paged pool,
// written once over a row-ops policy and compiled twice — for AVX2 + FMA + F16C (paged_attention_avx2.cpp,
// where TP_KV_TARGET is the target attribute) and portably (paged_attention.cpp, TP_KV_TARGET empty).
// Define TP_KV_TARGET before including it. The templates live in an unnamed namespace so the two compilations
// never merge (an AVX2 instantiation must not be picked by the linker for the portable path).
//
// Ops: template <KvDType D> static float dot(const float* q, const uint8_t* row, int64_t n)  — Σ q[i] · x[i]
//      template <KvDType D> static void dot4(const float* q, const uint8_t* row, int64_t stride, int64_t n,
//                                            float* s)  — s[j] = dot(q, row + j · stride, n), j < 4
//      template <KvDType D> static void axpy(float w, const uint8_t* row, int64_t n, float* out) — out += w · x
//      template <KvDType D> static void axpy4(const float* w, const uint8_t* row, int64_t stride, int64_t n,
//                                             float* out)  — out += Σ_j w[j] · x(row + j · stride), j < 4
//      static float exp_sum(float* s, int64_t n, float max)  — s[i] = exp(s[i] - max), returns Σ s[i]
//      static constexpr float kFp8Unit — the true value of an fp8 element is kFp8Unit × what dot/axpy read
// where x[i] is element i of a stored row (elements of kv_elem_bytes<D> bytes), before its scale.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/kv_dtype.h"
#include "kernels/cpu/paged_attention.h"

#ifndef TP_KV_TARGET
#error "define TP_KV_TARGET before including paged_attention_impl.h"
#endif

namespace tp::cpu::detail {

// One query row [head_dim] against positions [0, n_pos) of KV head kv_head; scores: [n_pos] scratch;
// out [head_dim].
using AttendFn = void (*)(const float* q, int64_t n_pos, int64_t kv_head, const KvTensorView& k,
                          const KvTensorView& v, const int32_t* block_table, float scale, float* scores, float* out);
AttendFn attend_avx512(KvDType d);    // paged_attention_avx512.cpp
AttendFn attend_avx2(KvDType d);      // paged_attention_avx2.cpp
AttendFn attend_portable(KvDType d);  // paged_attention.cpp

// The checks both entries make (the InputErrors of paged_attention.h); returns the rows to take: Avx512, Avx2 or
// Portable (Auto resolved by the CPU's features).
AttentionImpl check_attention_args(int64_t n_heads, const KvTensorView& k_pool, const KvTensorView& v_pool,
                                   AttentionImpl impl);

namespace {

template <KvDType D>
constexpr int64_t kv_elem_bytes = D == KvDType::F32 ? 4 : D == KvDType::BF16 ? 2 : 1;

// What multiplies a row of block `blk` of head kv_head: its block scale, the tensor scale, or 1; fp8 rows also
// carry Ops::kFp8Unit.
template <KvDType D, class Ops>
TP_KV_TARGET inline float row_scale(const KvTensorView& t, const uint8_t* blk, int64_t kv_head) {
  if constexpr (D == KvDType::INT8) {
    if (!t.layout.block_scales()) return t.tensor_scale;
    float s;
    std::memcpy(&s, blk + t.layout.data_bytes() + kv_head * kKvScaleBytes, sizeof s);
    return s;
  } else if constexpr (D == KvDType::FP8_E4M3) {
    return t.tensor_scale * Ops::kFp8Unit;
  } else {
    return 1.0f;
  }
}

// Scores for every attended position (block by block), softmax with max subtraction, weighted sum of V rows.
template <KvDType D, class Ops>
TP_KV_TARGET void attend_one(const float* q, int64_t n_pos, int64_t kv_head, const KvTensorView& k,
                             const KvTensorView& v, const int32_t* block_table, float scale, float* scores,
                             float* out) {
  const KvBlockLayout& l = k.layout;
  const int64_t hd = l.head_dim, bs = l.block_size, row = l.row_bytes();
  const int64_t head_at = kv_head * hd * kv_elem_bytes<D>;
  float max_s = -INFINITY;
  for (int64_t p0 = 0, b = 0; p0 < n_pos; p0 += bs, ++b) {
    const uint8_t* blk = k.block(block_table[b]);
    const float s_row = row_scale<D, Ops>(k, blk, kv_head) * scale;
    const int64_t n = std::min(bs, n_pos - p0);
    const uint8_t* r = blk + head_at;
    float* s = scores + p0;
    int64_t o = 0;
    for (; o + 4 <= n; o += 4, r += 4 * row) Ops::template dot4<D>(q, r, row, hd, s + o);
    for (; o < n; ++o, r += row) s[o] = Ops::template dot<D>(q, r, hd);
    for (o = 0; o < n; ++o) {
      s[o] *= s_row;
      max_s = s[o] > max_s ? s[o] : max_s;
    }
  }
  const float sum = Ops::exp_sum(scores, n_pos, max_s);
  for (int64_t d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t p0 = 0, b = 0; p0 < n_pos; p0 += bs, ++b) {
    const uint8_t* blk = v.block(block_table[b]);
    const float s_row = row_scale<D, Ops>(v, blk, kv_head);
    const int64_t n = std::min(bs, n_pos - p0);
    const uint8_t* r = blk + head_at;
    const float* e = scores + p0;
    int64_t o = 0;
    for (; o + 4 <= n; o += 4, r += 4 * row) {
      const float w[4] = {e[o] * s_row, e[o + 1] * s_row, e[o + 2] * s_row, e[o + 3] * s_row};
      Ops::template axpy4<D>(w, r, row, hd, out);
    }
    for (; o < n; ++o, r += row) Ops::template axpy<D>(e[o] * s_row, r, hd, out);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

template <class Ops>
AttendFn attend_for(KvDType d) {
  switch (d) {
    case KvDType::F32: return attend_one<KvDType::F32, Ops>;
    case KvDType::BF16: return attend_one<KvDType::BF16, Ops>;
    case KvDType::FP8_E4M3: return attend_one<KvDType::FP8_E4M3, Ops>;
    case KvDType::INT8: return attend_one<KvDType::INT8, Ops>;
  }
  return nullptr;
}

}  // namespace
}  // namespace tp::cpu::detail
