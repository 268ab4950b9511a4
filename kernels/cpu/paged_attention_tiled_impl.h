// Private to kernels/cpu/paged_attention*.cpp: one work item of the tiled (flash-style) paged attention —
// a query tile of one KV head against a range of its KV blocks, with an online softmax — written once over the
// row-ops policy of paged_attention_impl.h and compiled twice (AVX2 + FMA + F16C, and portably). Include it
// after paged_attention_impl.h, in the TU that defines the Ops.
//
// Extra op: template <KvDType D> static void widen(const uint8_t* row, int64_t n, float s, float* out)
//           — out[i] = s · x[i], x in the units of kFp8Unit.
// Group ops (optional; an Ops with them runs attend_tile_grouped): static constexpr int64_t kGroupRows (<=
// kMaxGroupRows) and, for nr <= kGroupRows query rows q [nr, hd] and n stored rows x_j, position j = b · seg + i
// at blocks[b] + i · stride:
//   template <KvDType D> static void dot_rows(const float* q, int64_t nr, int64_t hd, const uint8_t* const* blocks,
//       int64_t seg, int64_t stride, int64_t n, float* s, int64_t ss, PrefetchLines* pf)
//       — s[r · ss + j] = Σ_i q[r · hd + i] · x_j[i]; pf->issue(2) a position (pf null: none)
//   template <KvDType D> static void axpy_rows(const float* w, int64_t ws, int64_t nr, const uint8_t* const* blocks,
//       int64_t seg, int64_t stride, int64_t n, int64_t hd, const float* c, float* acc, PrefetchLines* pf)
//       — acc[r · hd + i] = c[r] · acc[r · hd + i] + Σ_j w[r · ws + j] · x_j[i], j in order; pf->issue(1) a
//       position and pass over the columns (pf null: none)
//   static float scale_max(float* s, int64_t n, float mul)  — s[j] *= mul; returns max s[j] (-inf for n = 0)
//
// A tile has n_rows = n_tok × group query rows: row r is token t0 + r / group, query head
// kv_head · group + r % group (the group of query heads that share KV head kv_head, GQA). Each KV block of the
// range is read once from memory per KV head and tile, and used by all the tile's rows while it is in L1: a tile
// of >= kWidenRows rows (prefill) first widens its K and V rows to F32 (times their scale) into scratch; a
// smaller tile (decode: the group's heads) reads the stored rows in every dot, which costs no extra pass. An Ops
// with group ops runs attend_tile_grouped instead: the same, with the blocks in runs and the rows in groups.
// Rows see only positions <= their own (causal by position); a block past the tile's last position ends the
// range.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// The most query rows any Ops takes at once (Ops::kGroupRows).
constexpr int64_t kMaxGroupRows = 4;

// A grouped tile (attend_tile_grouped) takes whole blocks, kRunPositions positions or one block when blocks are
// larger, per online-softmax step: the max, the rescale, the exp and the accumulators' loads and stores happen once
// a run instead of once a block.
constexpr int64_t kRunPositions = 64;
inline int64_t run_blocks(int64_t block_size) { return std::max<int64_t>(1, kRunPositions / block_size); }

// Cache lines to prefetch, issued a few at a time from inside the group ops' loops (dot_rows, axpy_rows: issue()
// per position they take) so that the next run's reads from memory overlap this run's arithmetic. Prefetched in
// one burst at a run's start, hundreds of lines wait on the few outstanding-miss slots and the core stalls as if it
// had loaded them: a decode step's scattered KV blocks then stream at the pace of a latency-bound read plus the
// arithmetic, not the larger of the two (Zen 3 figures in paged_attention_avx2.cpp; into L2 instead of L1 measured
// the same there). The list holds row ranges, not lines: a run's takes a few entries to make.
struct PrefetchLines {
  // `rows` rows of `bytes` bytes each, `stride` bytes apart, from p.
  struct Range {
    const uint8_t* p;
    int64_t bytes, stride, rows;
  };
  std::vector<Range> ranges;
  size_t i = 0;             // the range being issued,
  int64_t row = 0, at = 0;  // its row and the byte offset in it
  void clear() {
    ranges.clear();
    i = 0;
    row = at = 0;
  }
  void add(const uint8_t* p, int64_t bytes, int64_t stride, int64_t rows) {
    ranges.push_back({p, bytes, stride, rows});
  }
  // The next k lines (fewer when the list runs out).
  void issue(int64_t k) {
    for (; k > 0 && i < ranges.size(); --k) {
      const Range& r = ranges[i];
      __builtin_prefetch(r.p + row * r.stride + at, 0, 3);
      if ((at += 64) >= r.bytes) {
        at = 0;
        if (++row == r.rows) row = 0, ++i;
      }
    }
  }
  void flush() { issue(std::numeric_limits<int64_t>::max()); }
};

// Per-thread scratch, sized by reserve() for tiles of up to max_rows rows.
struct TileScratch {
  // [rows, head_dim] scaled q; [run, head_dim] K and V widened; [kMaxGroupRows, run] scores, where run =
  // run_blocks(block_size) · block_size positions
  std::vector<float> q, k, v, s;
  std::vector<float> x;  // the lane and AMX kernels' own (paged_attention_avx512 / _amx.cpp), sized there
  PrefetchLines pf;      // the grouped tiles' (attend_heads_grouped)
  // Grows the buffers to hold these sizes (never shrinks them).
  void reserve(int64_t max_rows, int64_t head_dim, int64_t block_size) {
    const int64_t run = run_blocks(block_size) * block_size;
    grow(q, max_rows * head_dim);
    grow(k, run * head_dim);
    grow(v, run * head_dim);
    grow(s, kMaxGroupRows * run);
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

// A tile over KV heads [h0, h1) at once (rows as TileFn's for each head): head h's m, l at (h − h0) · head_rows,
// acc at (h − h0) · head_rows · head_dim. Each head's results are TileFn's for that head alone.
using HeadsFn = void (*)(const TileArgs& a, int64_t h0, int64_t h1, int64_t t0, int64_t n_tok, int64_t b0, int64_t b1,
                         TileScratch& scratch, float* m, float* l, float* acc, int64_t head_rows);
HeadsFn heads_avx2(KvDType d);  // paged_attention_avx2.cpp (the other row kernels have none)

namespace {

// Tiles with at least this many rows widen each K/V block to F32 once; smaller ones (decode: the group's heads)
// read the stored rows in every dot (the block stays in L1 between rows; widening would add a pass).
constexpr int64_t kWidenRows = 8;

// How far ahead the tile kernels prefetch, in blocks.
constexpr int64_t kPrefetchBlocks = 3;

// Before block b of a tile's range [b0, b1) (positions up to `last`): blocks are scattered in memory, so prefetch
// the K / V rows of this head (head_bytes from head_at) kPrefetchBlocks blocks ahead (a block's compute is shorter
// than a DRAM round trip), and at b0 the first blocks before the loop reaches them. full_rows: the first of a
// split's KV heads to run (paged_attention_tiled.cpp runs them last head first) prefetches whole rows, every head's
// part: the others then read them from cache instead of each streaming its 1 / n_kv of them.
inline void prefetch_ahead(const KvTensorView& k, const KvTensorView& v, const int32_t* table, int64_t b, int64_t b0,
                           int64_t b1, int64_t last, int64_t head_at, int64_t head_bytes, bool full_rows) {
  const int64_t bs = k.layout.block_size, row = k.layout.row_bytes();
  for (int64_t ahead = b == b0 ? 1 : kPrefetchBlocks; ahead <= kPrefetchBlocks; ++ahead) {
    const int64_t bn = b + ahead;
    if (bn >= b1 || bn * bs > last) break;
    const uint8_t* kn = k.block(table[bn]);
    const uint8_t* vn = v.block(table[bn]);
    if (full_rows) {
      for (int64_t o = 0; o < bs * row; o += 64) {
        __builtin_prefetch(kn + o);
        __builtin_prefetch(vn + o);
      }
      continue;
    }
    for (int64_t j = 0; j < bs; ++j)
      for (int64_t o = 0; o < head_bytes; o += 64) {
        __builtin_prefetch(kn + head_at + j * row + o);
        __builtin_prefetch(vn + head_at + j * row + o);
      }
  }
}

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

// A tile's start: qs [n_rows, hd] the scaled query rows, contiguous; m = -inf, l = 0, acc = 0.
TP_KV_TARGET inline void start_tile(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_rows, int64_t hd,
                                    float* qs, float* m, float* l, float* acc) {
  const int64_t g = a.group;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd;
    float* dst = qs + r * hd;
    for (int64_t i = 0; i < hd; ++i) dst[i] = src[i] * a.scale;
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int64_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
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
  start_tile(a, kv_head, t0, n_rows, hd, sc.q.data(), m, l, acc);
  const int64_t pos0 = a.start_pos + t0;  // the position of the tile's first token
  const int64_t last = pos0 + n_tok - 1;  // and of its last
  const bool widen = D != KvDType::F32 && n_rows >= widen_rows;
  const bool full_rows = lay.n_kv_heads > 1 && kv_head == lay.n_kv_heads - 1;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * bs;
    if (p0 > last) break;
    const int64_t n = std::min(bs, last + 1 - p0);  // positions of this block that some row sees
    const uint8_t* kb = k.block(a.block_table[b]) + head_at;
    const uint8_t* vb = v.block(a.block_table[b]) + head_at;
    const float ks = row_scale<D, Ops>(k, kb - head_at, kv_head), vs = row_scale<D, Ops>(v, vb - head_at, kv_head);
    prefetch_ahead(k, v, a.block_table, b, b0, b1, last, head_at, hd * kv_elem_bytes<D>, full_rows);
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

// Query rows an Ops takes at once in dot_rows / axpy_rows (Ops::kGroupRows), or 1: Ops without them.
template <class Ops>
constexpr int64_t group_rows() {
  if constexpr (requires { Ops::kGroupRows; }) {
    static_assert(Ops::kGroupRows <= kMaxGroupRows);
    return Ops::kGroupRows;
  } else {
    return 1;
  }
}

// Rows [r_begin, n_rows) of a tile against the n positions of one run from p0 (attend_tile_grouped): its blocks'
// K rows kp[i], V rows vp[i] (position i · seg + j at + j · stride) of dtype RD, whose values are ks[i] (vs[i]) ×
// what Ops read (ks, vs null: 1). Rows in groups of up to group_rows<Ops>(): each K and V row of the run is loaded
// and widened once a group (in decode: once for the GQA group's query heads). A group's scores run to the
// positions its last row sees; an earlier row's positions past its own get weight 0. s: [kMaxGroupRows, ss].
template <KvDType RD, class Ops>
TP_KV_TARGET inline void run_rows(const float* qs, int64_t hd, int64_t g, int64_t pos0, int64_t p0, int64_t n,
                                  int64_t r_begin, int64_t n_rows, const uint8_t* const* kp, const uint8_t* const* vp,
                                  int64_t seg, int64_t stride, const float* ks, const float* vs, float* s, int64_t ss,
                                  float* m, float* l, float* acc, PrefetchLines* pf) {
  constexpr int64_t G = group_rows<Ops>();
  for (int64_t r0 = r_begin; r0 < n_rows;) {
    const int64_t left = n_rows - r0;
    const int64_t nr = left > G && left < 2 * G ? (left + 1) / 2 : std::min(left, G);  // 5 rows: 3 + 2, not 4 + 1
    const int64_t nv_max = std::min(n, pos0 + (r0 + nr - 1) / g - p0 + 1);
    Ops::template dot_rows<RD>(qs + r0 * hd, nr, hd, kp, seg, stride, nv_max, s, ss, pf);
    float c[G];
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t r = r0 + i;
      const int64_t nv = std::min(n, pos0 + r / g - p0 + 1);
      float* sr = s + i * ss;
      float mx = m[r];
      for (int64_t b = 0, j0 = 0; j0 < nv; ++b, j0 += seg)
        mx = std::max(mx, Ops::scale_max(sr + j0, std::min(seg, nv - j0), ks ? ks[b] : 1.0f));
      c[i] = 1.0f;
      if (mx > m[r] && m[r] != -INFINITY) {
        c[i] = std::exp(m[r] - mx);
        l[r] *= c[i];
      }
      m[r] = mx;
      l[r] += Ops::exp_sum(sr, nv, mx);
      if (vs)
        for (int64_t b = 0, j0 = 0; j0 < nv; ++b, j0 += seg)
          if (vs[b] != 1.0f)
            for (int64_t j = j0; j < std::min(nv, j0 + seg); ++j) sr[j] *= vs[b];
      for (int64_t j = nv; j < nv_max; ++j) sr[j] = 0.0f;
    }
    Ops::template axpy_rows<RD>(s, ss, nr, vp, seg, stride, nv_max, hd, c, acc + r0 * hd, pf);
    r0 += nr;
  }
}

// attend_tile for Ops with group ops (group_rows<Ops>() > 1), over KV heads [h0, h1) at once: the same arithmetic
// for each head, the blocks taken in runs of run_blocks(block_size) (one online-softmax step a run), the rows in
// groups (run_rows), and the heads in turn within each run, so a run's blocks (whose rows hold every head) come
// from memory once, at an even pace, and serve the other heads from cache. Head h's m, l start at
// (h − h0) · head_rows, its acc at (h − h0) · head_rows · head_dim. A head's results do not depend on h0, h1.
template <KvDType D, class Ops, int64_t widen_rows = kWidenRows>
TP_KV_TARGET void attend_heads_grouped(const TileArgs& a, int64_t h0, int64_t h1, int64_t t0, int64_t n_tok,
                                       int64_t b0, int64_t b1, TileScratch& sc, float* m, float* l, float* acc,
                                       int64_t head_rows) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g;
  const int64_t head_bytes = hd * kv_elem_bytes<D>;
  for (int64_t h = h0; h < h1; ++h)
    start_tile(a, h, t0, n_rows, hd, sc.q.data() + (h - h0) * n_rows * hd, m + (h - h0) * head_rows,
               l + (h - h0) * head_rows, acc + (h - h0) * head_rows * hd);
  const int64_t pos0 = a.start_pos + t0;  // the position of the tile's first token
  const int64_t last = pos0 + n_tok - 1;  // and of its last
  const bool widen = D != KvDType::F32 && n_rows >= widen_rows;
  // The first head to run prefetches whole rows for the others: of this item, or of the split's items, which
  // paged_attention_tiled.cpp runs last head first.
  const bool full_rows = h1 - h0 > 1 || (lay.n_kv_heads > 1 && h0 == lay.n_kv_heads - 1);
  const int64_t rb = run_blocks(bs), ss = rb * bs;
  const uint8_t *kb[kRunPositions], *vb[kRunPositions], *kp[kRunPositions], *vp[kRunPositions];
  float ks[kRunPositions], vs[kRunPositions];
  for (int64_t b = b0; b < b1 && b * bs <= last; b += rb) {
    const int64_t p0 = b * bs;
    const int64_t n = std::min(std::min(b1, b + rb) * bs, last + 1) - p0;  // positions of the run some row sees
    const int64_t nb = (n + bs - 1) / bs;
    // The lines of blocks [from, to) (positions up to last) this item reads: every head's part of the rows with
    // full_rows, else heads [h0, h1)'s.
    const auto add_blocks = [&](int64_t from, int64_t to) {
      for (int64_t bn = from; bn < to && bn * bs <= last; ++bn) {
        const uint8_t* kn = k.block(a.block_table[bn]);
        const uint8_t* vn = v.block(a.block_table[bn]);
        if (full_rows) {
          sc.pf.add(kn, bs * row, 0, 1);
          sc.pf.add(vn, bs * row, 0, 1);
        } else {
          sc.pf.add(kn + h0 * head_bytes, (h1 - h0) * head_bytes, row, bs);
          sc.pf.add(vn + h0 * head_bytes, (h1 - h0) * head_bytes, row, bs);
        }
      }
    };
    if (widen) {  // prefill: bound by its arithmetic on the widened rows; prefetched a few blocks ahead at once
      for (int64_t i = 0; i < nb; ++i)
        prefetch_ahead(k, v, a.block_table, b + i, b0, b1, last, h0 * head_bytes, head_bytes, full_rows);
    } else {  // decode: what the last run left unissued now; at the item's first run the rest of that run at once;
              // then the next run's (past b1 too: split items run in order, so the next item's first run is
              // usually this thread's next), a few lines at a time during this run's work (run_rows).
      sc.pf.flush();
      sc.pf.clear();
      if (b == b0) {
        add_blocks(b + 1, b + rb);
        sc.pf.flush();
        sc.pf.clear();
      }
      add_blocks(b + rb, b + 2 * rb);
    }
    for (int64_t i = 0; i < nb; ++i) {
      kb[i] = k.block(a.block_table[b + i]);
      vb[i] = v.block(a.block_table[b + i]);
    }
    // Rows of tokens before p0 see nothing of this run.
    const int64_t r_begin = std::max<int64_t>(0, p0 - pos0) * g;
    for (int64_t h = h0; h < h1; ++h) {
      const float* qs = sc.q.data() + (h - h0) * n_rows * hd;
      float *mh = m + (h - h0) * head_rows, *lh = l + (h - h0) * head_rows, *ah = acc + (h - h0) * head_rows * hd;
      for (int64_t i = 0; i < nb; ++i) {
        ks[i] = row_scale<D, Ops>(k, kb[i], h);
        vs[i] = row_scale<D, Ops>(v, vb[i], h);
        kp[i] = kb[i] + h * head_bytes;
        vp[i] = vb[i] + h * head_bytes;
      }
      if (widen) {
        for (int64_t j = 0; j < n; ++j) {
          Ops::template widen<D>(kp[j / bs] + j % bs * row, hd, ks[j / bs], sc.k.data() + j * hd);
          Ops::template widen<D>(vp[j / bs] + j % bs * row, hd, vs[j / bs], sc.v.data() + j * hd);
        }
        const uint8_t* kw = reinterpret_cast<const uint8_t*>(sc.k.data());
        const uint8_t* vw = reinterpret_cast<const uint8_t*>(sc.v.data());
        run_rows<KvDType::F32, Ops>(qs, hd, g, pos0, p0, n, r_begin, n_rows, &kw, &vw, ss,
                                    hd * int64_t(sizeof(float)), nullptr, nullptr, sc.s.data(), ss, mh, lh, ah,
                                    nullptr);
      } else {
        run_rows<D, Ops>(qs, hd, g, pos0, p0, n, r_begin, n_rows, kp, vp, bs, row, ks, vs, sc.s.data(), ss, mh, lh,
                         ah, &sc.pf);
      }
    }
  }
  sc.pf.flush();  // the rest of the next item's first run (and no stale addresses for the next call)
  sc.pf.clear();
}

// One KV head: a TileFn.
template <KvDType D, class Ops>
TP_KV_TARGET void attend_tile_grouped(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0,
                                      int64_t b1, TileScratch& sc, float* m, float* l, float* acc) {
  attend_heads_grouped<D, Ops>(a, kv_head, kv_head + 1, t0, n_tok, b0, b1, sc, m, l, acc, 0);
}

// attend_heads_grouped for Ops with group ops, else nullptr.
template <class Ops>
HeadsFn heads_for(KvDType d) {
  if constexpr (group_rows<Ops>() > 1) {
    switch (d) {
      case KvDType::F32: return attend_heads_grouped<KvDType::F32, Ops>;
      case KvDType::BF16: return attend_heads_grouped<KvDType::BF16, Ops>;
      case KvDType::FP8_E4M3: return attend_heads_grouped<KvDType::FP8_E4M3, Ops>;
      case KvDType::INT8: return attend_heads_grouped<KvDType::INT8, Ops>;
    }
  }
  return nullptr;
}

template <class Ops>
TileFn tile_for(KvDType d) {
  if constexpr (group_rows<Ops>() > 1) {
    switch (d) {
      case KvDType::F32: return attend_tile_grouped<KvDType::F32, Ops>;
      case KvDType::BF16: return attend_tile_grouped<KvDType::BF16, Ops>;
      case KvDType::FP8_E4M3: return attend_tile_grouped<KvDType::FP8_E4M3, Ops>;
      case KvDType::INT8: return attend_tile_grouped<KvDType::INT8, Ops>;
    }
  } else {
    switch (d) {
      case KvDType::F32: return attend_tile<KvDType::F32, Ops>;
      case KvDType::BF16: return attend_tile<KvDType::BF16, Ops>;
      case KvDType::FP8_E4M3: return attend_tile<KvDType::FP8_E4M3, Ops>;
      case KvDType::INT8: return attend_tile<KvDType::INT8, Ops>;
    }
  }
  return nullptr;
}

}  // namespace
}  // namespace tp::cpu::detail
