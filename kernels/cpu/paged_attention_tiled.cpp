// paged_attention (paged_attention.h): the tiled, flash-style kernel the model runs. This file cuts the work and
// combines it; one work item is paged_attention_tiled_impl.h's attend_tile (attend_heads_grouped for the AVX2 rows).
//
// Work items: (query tile, KV head, split). A query tile is up to q_tokens consecutive tokens × the group's
// query heads; a split is a range of the sequence's KV blocks. Where the row kernel has a HeadsFn (the AVX2 rows)
// a split's work item takes every KV head, in turn within each run of blocks (the same results a head). Prefill
// (several tiles) runs each tile over all blocks it sees in one work item and writes the output straight to out;
// the latest tiles (the most positions) go first under a dynamic schedule. A sequence with one tile (decode, a
// short chunk) cuts its blocks into ceil(n_blocks / split_blocks) splits that run in parallel and leave (m, l, acc)
// per row; the combine folds them in split order, exactly (max-rescaled sums), with fold_segment below:
//   M' = max(M, m_s),  L' = L · e^(M − M') + l_s · e^(m_s − M'),  A' = A · e^(M − M') + acc_s · e^(m_s − M'),
// and out = A · (1 / L).
// With the AVX-512 lane kernels (AttentionTiling::lanes) the splits are "segments" at fixed block boundaries
// (multiples of split_blocks from block 0, 512 positions by default): a prefill tile too attends each segment
// afresh and folds the segments in the same order with the same fold_segment, so a query row gets the same
// operations, in the same order, whether it was decoded (segments in parallel) or prefilled (segments in turn):
// the lane kernels' "prefill equals decode, bit for bit" holds at any depth.
// Every cut depends on the shapes and AttentionTiling only, so a result is the same on any number of threads.
// paged_attention_batch runs the items of several sequences in one parallel region (one fork/join per layer and
// step instead of one per sequence), each sequence cut as paged_attention cuts it alone: the same results.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"

#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

#define TP_KV_TARGET
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"

namespace tp::cpu {
namespace {

// How one sequence of the call is cut (see the top of this file); item0 / part0 / comb0: where its work items,
// split partial rows and combine rows start in the call's lists. n_splits: work items per (tile, KV head);
// n_segs: segments each of them folds in turn (lane kernels' prefill tiles; else 1). heads: KV heads a work item
// takes at once (all of them for split sequences where the row kernel has a HeadsFn; else 1).
struct SeqCut {
  const AttentionSeqArgs* s;
  int64_t q_tokens, n_tiles, n_blocks, split_blocks, n_splits, n_segs, max_rows, heads, n_items;
  int64_t tok0, item0, part0, comb0;
};

// Default segment of the lane kernels, in positions: long enough that a segment's fresh start and its fold cost
// well under 1% of its attention, short enough that decode at 1-2k positions has several per KV head to share
// among the threads.
constexpr int64_t kLaneSegmentPositions = 512;

// Default query rows a tile (q_tokens × group): the row kernel 32; the lane kernels 96 (paged_attention.h); the AMX
// tiles 192, which share each chunk's K load and V pairs among more rows (512-token chunks at depth 4096, 1 thread,
// bench/kv_attention_bench --tokens 512 --q-tokens 64 vs 32: 33.0-34.2 vs 35.5-39.7 ms a layer, Xeon with AMX).
constexpr int64_t kRowKernelTileRows = 32, kLaneTileRows = 96, kAmxTileRows = 192;

// lanes: the AVX-512 lane kernels run (paged_attention.h, AttentionTiling::lanes): splits at fixed block
// boundaries, prefill tiles folding the same segments in turn. amx: the AMX tiles run (cut as the lane kernels).
SeqCut cut_sequence(const AttentionSeqArgs& s, int64_t group, int64_t bs, const AttentionTiling& tiling, bool lanes,
                    bool amx) {
  SeqCut c{};
  const int64_t q_default =
      std::max<int64_t>(1, (amx ? kAmxTileRows : lanes ? kLaneTileRows : kRowKernelTileRows) / group);
  c.q_tokens = std::min(s.n_tokens, tiling.q_tokens > 0 ? tiling.q_tokens : q_default);
  c.n_tiles = (s.n_tokens + c.q_tokens - 1) / c.q_tokens;
  c.n_blocks = (s.start_pos + s.n_tokens + bs - 1) / bs;
  const int64_t seg = tiling.split_blocks < 0 ? c.n_blocks
                      : tiling.split_blocks > 0 ? tiling.split_blocks
                                                : ((lanes ? kLaneSegmentPositions : 128) + bs - 1) / bs;
  const int64_t n_seg = (c.n_blocks + seg - 1) / seg;
  // One tile: its segments are the work items. Several tiles already give the threads work: one item per tile,
  // which folds its segments in turn with the lane kernels and runs all its blocks at once with the row kernel.
  c.split_blocks = c.n_tiles > 1 && !lanes ? c.n_blocks : seg;
  c.n_splits = c.n_tiles > 1 ? 1 : n_seg;
  c.n_segs = c.n_tiles > 1 && lanes ? n_seg : 1;
  c.max_rows = c.q_tokens * group;
  return c;
}

// One row's running (M, L, A [hd]) and a segment's partial (m, l, a) of it: fold the partial in (see the top of
// this file). A partial that saw no position (m = -inf) leaves the row as it is. Not inlined, and this file is
// built with -ffp-contract=off: the decode combine and the prefill tiles run the very same instructions.
[[gnu::noinline]] void fold_segment(float& M, float& L, float* A, float m, float l, const float* a, int64_t hd) {
  if (m == -INFINITY) return;
  if (M == -INFINITY) {
    M = m;
    L = l;
    for (int64_t i = 0; i < hd; ++i) A[i] = a[i];
    return;
  }
  const float mx = std::max(M, m);
  const float e0 = std::exp(M - mx), e1 = std::exp(m - mx);
  M = mx;
  L = L * e0 + l * e1;
  for (int64_t i = 0; i < hd; ++i) A[i] = A[i] * e0 + a[i] * e1;
}

// out [hd] = A · (1 / L): 16 at a time where the CPU has AVX-512 (the same bits: one rounded product each; the scalar
// loop, which GCC left scalar, was 2.8 % of a W8A8 prefill on the AMX Xeon).
__attribute__((target("avx512f"))) void finish_row_avx512(const float* A, float inv, int64_t hd, float* out) {
  const __m512 v = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= hd; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(A + i), v));
  for (; i < hd; ++i) out[i] = A[i] * inv;
}

[[gnu::noinline]] void finish_row(const float* A, float L, int64_t hd, float* out) {
  const float inv = 1.0f / L;
  static const bool avx512 = attention_has_avx512();
  if (avx512) return finish_row_avx512(A, inv, hd, out);
  for (int64_t i = 0; i < hd; ++i) out[i] = A[i] * inv;
}

}  // namespace

bool attention_uses_amx(KvDType dtype, int64_t head_dim, AttentionImpl impl, const AttentionTiling& tiling) {
  const bool avx512 = impl == AttentionImpl::Avx512 || (impl == AttentionImpl::Auto && attention_has_avx512());
  const bool lanes = tiling.lanes && avx512 && head_dim % 16 == 0;
  return lanes && tiling.amx && dtype == KvDType::BF16 && head_dim % 32 == 0 && attention_has_amx();
}

void paged_attention_batch(const float* q, const AttentionSeqArgs* seqs, int64_t n_seqs, int64_t n_heads,
                           const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                           AttentionImpl impl, const AttentionTiling& tiling) {
  const AttentionImpl rows = detail::check_attention_args(n_heads, k_pool, v_pool, impl);
  const KvBlockLayout& kl = k_pool.layout;
  const int64_t n_kv = kl.n_kv_heads, hd = kl.head_dim, bs = kl.block_size;
  const int64_t group = n_heads / n_kv;
  const bool lanes = tiling.lanes && rows == AttentionImpl::Avx512 && hd % 16 == 0;
  // AMX tiles (AttentionTiling::amx): cut as the lane kernels are (they keep the lanes' cuts and softmax).
  const bool amx = attention_uses_amx(kl.dtype, hd, rows, tiling);
  const detail::TileFn tile = amx                             ? detail::tile_amx(kl.dtype)
                              : rows == AttentionImpl::Avx512 ? detail::tile_avx512(kl.dtype)
                              : rows == AttentionImpl::Avx2   ? detail::tile_avx2(kl.dtype)
                                                              : detail::tile_portable(kl.dtype);
  // Split sequences (decode) take every KV head in one work item where the row kernel can (the AVX2 rows): a
  // split's blocks then stream from memory at the pace of the whole item instead of all in its first head's
  // share of it (measured on Zen 3, see paged_attention_avx2.cpp). The same results: each head's are its own.
  const detail::HeadsFn heads = rows == AttentionImpl::Avx2 ? detail::heads_avx2(kl.dtype) : nullptr;

  std::vector<SeqCut> cuts;
  cuts.reserve(size_t(n_seqs));
  int64_t n_items = 0, n_part_rows = 0, n_comb = 0, n_tok_all = 0, max_rows = 1, max_q_rows = 1, work = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const AttentionSeqArgs& s = seqs[i];
    if (s.start_pos < 0)
      throw InputError("paged_attention_batch: sequence " + std::to_string(i) + " has start_pos " +
                       std::to_string(s.start_pos) + " < 0");
    if (s.n_tokens <= 0) continue;
    SeqCut c = cut_sequence(s, group, bs, tiling, lanes, amx);
    c.s = &s;
    c.heads = heads && c.n_splits > 1 ? n_kv : 1;
    c.n_items = c.n_tiles * (n_kv / c.heads) * c.n_splits;
    c.tok0 = n_tok_all;
    c.item0 = n_items;
    c.part0 = n_part_rows;
    c.comb0 = n_comb;
    n_items += c.n_items;
    if (c.n_splits > 1) {
      n_part_rows += n_kv * c.n_splits * c.max_rows;
      n_comb += n_kv * s.n_tokens * group;
    }
    n_tok_all += s.n_tokens;
    max_rows = std::max(max_rows, c.max_rows);
    max_q_rows = std::max(max_q_rows, c.max_rows * c.heads);
    work += s.n_tokens * (s.start_pos + s.n_tokens) * n_heads * hd;
    cuts.push_back(c);
  }
  if (cuts.empty()) return;
  std::vector<size_t> split_seqs;  // the cuts with several splits, their comb0 strictly increasing
  for (size_t i = 0; i < cuts.size(); ++i)
    if (cuts[i].n_splits > 1) split_seqs.push_back(i);
  // The last entry of `order` (indices into cuts) whose `start` is at or before g.
  auto owner = [&](int64_t g, int64_t SeqCut::*start, const auto& order, auto index) {
    size_t lo = 0, hi = order.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (cuts[index(order, mid)].*start <= g ? lo : hi) = mid;
    }
    return index(order, lo);
  };
  const auto identity = [](const std::vector<SeqCut>&, size_t i) { return i; };
  const auto through = [](const std::vector<size_t>& v, size_t i) { return v[i]; };

  // Split partials: per split sequence [n_kv, n_splits, max_rows] m and l, [..., hd] acc.
  // Buffers kept by each thread from call to call (a decode step calls this once a layer: allocating and zeroing
  // them every time cost more than the attention itself at short contexts). Every kernel writes what it reads.
  // (The split partials are the calling thread's, shared with the team through these pointers: a thread_local name
  // inside the parallel region would be each thread's own.)
  static thread_local std::vector<float> part_m_buf, part_l_buf, part_acc_buf;
  detail::grow(part_m_buf, n_part_rows);
  detail::grow(part_l_buf, n_part_rows);
  detail::grow(part_acc_buf, n_part_rows * hd);
  float *const part_m = part_m_buf.data(), *const part_l = part_l_buf.data(), *const part_acc = part_acc_buf.data();
  const int64_t row_len = n_heads * hd;
#pragma omp parallel num_threads(num_threads()) if (n_items > 1 && work >= (int64_t(1) << 16))
  {
    static thread_local detail::TileScratch scratch;
    scratch.reserve(max_q_rows, hd, bs);
    // m, l, acc: one tile's (or segment's) rows; fm, fl, facc: the rows' fold over segments.
    static thread_local std::vector<float> m, l, acc, fm, fl, facc;
    for (auto* v : {&m, &l, &fm, &fl}) detail::grow(*v, max_rows);
    for (auto* v : {&acc, &facc}) detail::grow(*v, max_rows * hd);
#pragma omp for schedule(dynamic, 1)
    for (int64_t g = 0; g < n_items; ++g) {
      const SeqCut& c = cuts[owner(g, &SeqCut::item0, cuts, identity)];
      const AttentionSeqArgs& s = *c.s;
      const int64_t j = c.n_items - 1 - (g - c.item0);  // the sequence's latest tiles (most positions) first
      // Within a tile the KV heads of a split run one after another (kvh fastest), so the split's blocks, whose rows
      // hold every head, are read from DRAM once and by the other heads from cache.
      const int64_t n_hg = n_kv / c.heads;  // work items a (tile, split) has: groups of c.heads KV heads
      const int64_t ti = j / (n_hg * c.n_splits), sp = j / n_hg % c.n_splits, kvh = j % n_hg * c.heads;
      const int64_t t0 = ti * c.q_tokens, n_tok = std::min(c.q_tokens, s.n_tokens - t0), n_rows = n_tok * group;
      const int64_t b0 = sp * c.split_blocks, b1 = std::min(c.n_blocks, b0 + c.split_blocks);
      const detail::TileArgs a{q + c.tok0 * row_len, n_heads, group,        s.start_pos, &k_pool,
                               &v_pool,            s.block_table, scale, tiling.lanes};
      if (c.n_splits > 1) {
        const size_t at = size_t(c.part0 + (kvh * c.n_splits + sp) * c.max_rows);
        if (c.heads > 1)
          heads(a, kvh, kvh + c.heads, t0, n_tok, b0, b1, scratch, part_m + at, part_l + at, part_acc + at * size_t(hd),
                c.n_splits * c.max_rows);
        else
          tile(a, kvh, t0, n_tok, b0, b1, scratch, part_m + at, part_l + at, part_acc + at * size_t(hd));
        continue;
      }
      const float *rl = l.data(), *racc = acc.data();
      if (c.n_segs == 1) {
        tile(a, kvh, t0, n_tok, b0, b1, scratch, m.data(), l.data(), acc.data());
      } else {  // the lane kernels' segments in turn, folded as the decode combine folds them
        const int64_t last = s.start_pos + t0 + n_tok - 1;  // the tile's last position
        for (int64_t r = 0; r < n_rows; ++r) fm[size_t(r)] = -INFINITY, fl[size_t(r)] = 0.0f;
        for (int64_t sg = 0; sg < c.n_segs && sg * c.split_blocks * bs <= last; ++sg) {
          tile(a, kvh, t0, n_tok, sg * c.split_blocks, std::min(c.n_blocks, (sg + 1) * c.split_blocks), scratch,
               m.data(), l.data(), acc.data());
          for (int64_t r = 0; r < n_rows; ++r)
            fold_segment(fm[size_t(r)], fl[size_t(r)], facc.data() + r * hd, m[size_t(r)], l[size_t(r)],
                         acc.data() + r * hd, hd);
        }
        rl = fl.data(), racc = facc.data();
      }
      float* so = out + c.tok0 * row_len;
      for (int64_t r = 0; r < n_rows; ++r)
        finish_row(racc + r * hd, rl[size_t(r)], hd, so + ((t0 + r / group) * n_heads + kvh * group + r % group) * hd);
    }
    // Split sequences have one tile: its rows are all n_tokens × group rows of each KV head. Each row folds its
    // splits in order (into this thread's facc).
#pragma omp for schedule(static)
    for (int64_t g = 0; g < n_comb; ++g) {
      const SeqCut& c = cuts[owner(g, &SeqCut::comb0, split_seqs, through)];
      const int64_t n_rows = c.s->n_tokens * group;
      const int64_t kvh = (g - c.comb0) / n_rows, r = (g - c.comb0) % n_rows;
      const size_t at0 = size_t(c.part0 + kvh * c.n_splits * c.max_rows + r);
      float M = -INFINITY, L = 0.0f;
      float* A = facc.data();
      for (int64_t sp = 0; sp < c.n_splits; ++sp) {
        const size_t at = at0 + size_t(sp * c.max_rows);
        fold_segment(M, L, A, part_m[at], part_l[at], part_acc + at * size_t(hd), hd);
      }
      finish_row(A, L, hd, out + c.tok0 * row_len + ((r / group) * n_heads + kvh * group + r % group) * hd);
    }
  }
}

void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                     const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out,
                     AttentionImpl impl, const AttentionTiling& tiling) {
  const AttentionSeqArgs s{n_tokens, start_pos, block_table};
  paged_attention_batch(q, &s, 1, n_heads, k_pool, v_pool, scale, out, impl, tiling);
}

}  // namespace tp::cpu
