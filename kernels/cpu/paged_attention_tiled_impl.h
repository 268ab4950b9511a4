// Private to kernels/cpu/paged_attention*.cpp: one work item of the tiled (flash-style) paged attention —
// a query tile of one KV head against a range of its KV blocks, with an online softmax — written once over the
// row-ops policy of paged_attention_impl.h and compiled twice (AVX2 + FMA + F16C, and portably). Include it
// after paged_attention_impl.h, in the TU that defines the Ops.
//
// Extra op: template <KvDType D> static void widen(const uint8_t* row, int64_t n, float s, float* out)
//           — out[i] = s · x[i], x in the units of kFp8Unit.
//
// A tile has n_rows = n_tok × group query rows: row r is token t0 + r / group, query head
// kv_head · group + r % group (the group of query heads that share KV head kv_head, GQA). Each KV block of the
// range is read once from memory per KV head and tile, and used by all the tile's rows while it is in L1: a tile
// of >= kWidenRows rows (prefill) first widens its K and V rows to F32 (times their scale) into scratch; a
// smaller tile (decode: the group's heads) reads the stored rows in every dot, which costs no extra pass.
// Rows see only positions <= their own (causal by position); a block past the tile's last position ends the
// range.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/kv_dtype.h"

namespace tp::cpu::detail {

// What every work item of one call shares. q: [n_tokens, n_heads, head_dim] F32 of the sequence.
struct TileArgs {
  const float* q;
  int64_t n_heads, group, start_pos;
  const KvTensorView* k;
  const KvTensorView* v;
  const int32_t* block_table;
  float scale;
  bool lanes;  // AttentionTiling::lanes
};

// b holds at least n elements (grown, never shrunk: the contents are scratch a thread keeps from call to call).
inline void grow(std::vector<float>& b, int64_t n) {
  if (b.size() < size_t(n)) b.resize(size_t(n));
}

// Per-thread scratch, sized by reserve() for tiles of up to max_rows rows.
struct TileScratch {
  std::vector<float> q, k, v, s;  // [rows, head_dim] scaled q; [block_size, head_dim] K and V; [block_size]
  std::vector<float> x;           // the lane and AMX kernels' own (paged_attention_avx512 / _amx.cpp), sized there
  // Grows the buffers to hold these sizes (never shrinks them).
  void reserve(int64_t max_rows, int64_t head_dim, int64_t block_size) {
    grow(q, max_rows * head_dim);
    grow(k, block_size * head_dim);
    grow(v, block_size * head_dim);
    grow(s, block_size);
  }
};

// Tile rows against blocks [b0, b1) of the block table. Out, unnormalized: m [n_rows] the running max of the
// scaled scores (-inf where a row saw no position), l [n_rows] Σ exp(score - m), acc [n_rows, head_dim]
// Σ exp(score - m) · v. The attention output of a row is acc / l.
using TileFn = void (*)(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0, int64_t b1,
                        TileScratch& scratch, float* m, float* l, float* acc);
TileFn tile_avx512(KvDType d);    // paged_attention_avx512.cpp
TileFn tile_avx2(KvDType d);      // paged_attention_avx2.cpp
TileFn tile_portable(KvDType d);  // paged_attention.cpp
TileFn tile_amx(KvDType d);       // paged_attention_amx.cpp: BF16 pools only (else nullptr)

namespace {

// Tiles with at least this many rows widen each K/V block to F32 once; smaller ones (decode: the group's heads)
// read the stored rows in every dot (the block stays in L1 between rows; widening would add a pass).
constexpr int64_t kWidenRows = 8;

// Rows [r_begin, n_rows) of a tile against the n positions of one block from p0: K rows kr, V rows vr of dtype
// RD (stored, or F32 widened) every `stride` bytes; their values are k_mul (v_mul) × what Ops read.
template <KvDType RD, class Ops>
TP_KV_TARGET inline void rows_block(const float* qs, int64_t hd, int64_t g, int64_t pos0, int64_t p0, int64_t n,
                                    int64_t r_begin, int64_t n_rows, const uint8_t* kr, const uint8_t* vr,
                                    int64_t stride, float k_mul, float v_mul, float* s, float* m, float* l,
                                    float* acc) {
  for (int64_t r = r_begin; r < n_rows; ++r) {
    const int64_t nv = std::min(n, pos0 + r / g - p0 + 1);
    const float* qr = qs + r * hd;
    int64_t j = 0;
    for (; j + 4 <= nv; j += 4) Ops::template dot4<RD>(qr, kr + j * stride, stride, hd, s + j);
    for (; j < nv; ++j) s[j] = Ops::template dot<RD>(qr, kr + j * stride, hd);
    float mx = m[r];
    for (j = 0; j < nv; ++j) {
      s[j] *= k_mul;
      mx = s[j] > mx ? s[j] : mx;
    }
    float* ar = acc + r * hd;
    if (mx > m[r] && m[r] != -INFINITY) {
      const float c = std::exp(m[r] - mx);
      l[r] *= c;
      for (int64_t i = 0; i < hd; ++i) ar[i] *= c;
    }
    m[r] = mx;
    l[r] += Ops::exp_sum(s, nv, mx);
    if (v_mul != 1.0f)
      for (j = 0; j < nv; ++j) s[j] *= v_mul;
    for (j = 0; j + 4 <= nv; j += 4) Ops::template axpy4<RD>(s + j, vr + j * stride, stride, hd, ar);
    for (; j < nv; ++j) Ops::template axpy<RD>(s[j], vr + j * stride, hd, ar);
  }
}

// widen_rows: tiles with at least this many rows widen (kWidenRows by default).
template <KvDType D, class Ops, int64_t widen_rows = kWidenRows>
TP_KV_TARGET void attend_tile(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0, int64_t b1,
                              TileScratch& sc, float* m, float* l, float* acc) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g;
  const int64_t head_at = kv_head * hd * kv_elem_bytes<D>;
  // The scaled query rows, contiguous.
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd;
    float* dst = sc.q.data() + r * hd;
    for (int64_t i = 0; i < hd; ++i) dst[i] = src[i] * a.scale;
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int64_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
  const int64_t pos0 = a.start_pos + t0;  // the position of the tile's first token
  const int64_t last = pos0 + n_tok - 1;  // and of its last
  const bool widen = D != KvDType::F32 && n_rows >= widen_rows;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * bs;
    if (p0 > last) break;
    const int64_t n = std::min(bs, last + 1 - p0);  // positions of this block that some row sees
    const uint8_t* kb = k.block(a.block_table[b]) + head_at;
    const uint8_t* vb = v.block(a.block_table[b]) + head_at;
    const float ks = row_scale<D, Ops>(k, kb - head_at, kv_head), vs = row_scale<D, Ops>(v, vb - head_at, kv_head);
    if (b + 1 < b1 && p0 + bs <= last) {  // the next block's rows of this head: blocks are scattered in memory
      const uint8_t* kn = k.block(a.block_table[b + 1]) + head_at;
      const uint8_t* vn = v.block(a.block_table[b + 1]) + head_at;
      for (int64_t j = 0; j < bs; ++j)
        for (int64_t o = 0; o < hd * kv_elem_bytes<D>; o += 64) {
          __builtin_prefetch(kn + j * row + o);
          __builtin_prefetch(vn + j * row + o);
        }
    }
    // Rows of tokens before p0 see nothing of this block.
    const int64_t r_begin = std::max<int64_t>(0, p0 - pos0) * g;
    if (!widen) {
      rows_block<D, Ops>(sc.q.data(), hd, g, pos0, p0, n, r_begin, n_rows, kb, vb, row, ks, vs, sc.s.data(), m, l,
                         acc);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      Ops::template widen<D>(kb + j * row, hd, ks, sc.k.data() + j * hd);
      Ops::template widen<D>(vb + j * row, hd, vs, sc.v.data() + j * hd);
    }
    rows_block<KvDType::F32, Ops>(sc.q.data(), hd, g, pos0, p0, n, r_begin, n_rows,
                                  reinterpret_cast<const uint8_t*>(sc.k.data()),
                                  reinterpret_cast<const uint8_t*>(sc.v.data()), hd * int64_t(sizeof(float)), 1.0f,
                                  1.0f, sc.s.data(), m, l, acc);
  }
}

// fp8_widen_rows: the FP8 pools' threshold (their widening, vcvtph2ps, costs most: AVX2 widens from 2 rows).
template <class Ops, int64_t fp8_widen_rows = kWidenRows>
TileFn tile_for(KvDType d) {
  switch (d) {
    case KvDType::F32: return attend_tile<KvDType::F32, Ops>;
    case KvDType::BF16: return attend_tile<KvDType::BF16, Ops>;
    case KvDType::FP8_E4M3: return attend_tile<KvDType::FP8_E4M3, Ops, fp8_widen_rows>;
    case KvDType::INT8: return attend_tile<KvDType::INT8, Ops>;
  }
  return nullptr;
}

}  // namespace
}  // namespace tp::cpu::detail
