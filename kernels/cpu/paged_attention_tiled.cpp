// paged_attention (paged_attention.h): the tiled, flash-style kernel the model runs. This file cuts the work and
// combines it; one work item is paged_attention_tiled_impl.h's attend_tile.
//
// Work items: (query tile, KV head, split). A query tile is up to q_tokens consecutive tokens × the group's
// query heads; a split is a range of the sequence's KV blocks. Prefill (several tiles) runs each tile over all
// blocks it sees, one split, and writes acc / l straight to out; the latest tiles (the most positions) go first
// under a dynamic schedule. A sequence with one tile (decode, a short chunk) cuts its blocks into
// ceil(n_blocks / split_blocks) splits that run in parallel and leave (m, l, acc) per row; the combine is exact:
//   M = max_s m_s,  L = Σ_s l_s · e^(m_s − M),  out = Σ_s acc_s · e^(m_s − M) / L.
// Every cut depends on the shapes and AttentionTiling only, so a result is the same on any number of threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

#define TP_KV_TARGET
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"

namespace tp::cpu {

void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                     const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out,
                     AttentionImpl impl, const AttentionTiling& tiling) {
  const AttentionImpl rows = detail::check_attention_args(n_heads, k_pool, v_pool, impl);
  if (n_tokens <= 0) return;
  const KvBlockLayout& kl = k_pool.layout;
  const int64_t n_kv = kl.n_kv_heads, hd = kl.head_dim, bs = kl.block_size;
  const int64_t group = n_heads / n_kv;
  const detail::TileFn tile = rows == AttentionImpl::Avx512 ? detail::tile_avx512(kl.dtype)
                              : rows == AttentionImpl::Avx2 ? detail::tile_avx2(kl.dtype)
                                                            : detail::tile_portable(kl.dtype);
  const detail::TileArgs args{q, n_heads, group, start_pos, &k_pool, &v_pool, block_table, scale};

  const int64_t q_tokens = std::min(n_tokens, tiling.q_tokens > 0 ? tiling.q_tokens : std::max<int64_t>(1, 32 / group));
  const int64_t n_tiles = (n_tokens + q_tokens - 1) / q_tokens;
  const int64_t n_blocks = (start_pos + n_tokens + bs - 1) / bs;
  // Blocks per split: all of them unless one tile (several tiles already give the threads work).
  const int64_t split_blocks = n_tiles > 1 || tiling.split_blocks < 0 ? n_blocks
                               : tiling.split_blocks > 0              ? tiling.split_blocks
                                                                      : (128 + bs - 1) / bs;
  const int64_t n_splits = (n_blocks + split_blocks - 1) / split_blocks;
  const int64_t max_rows = q_tokens * group;
  const int64_t n_items = n_tiles * n_kv * n_splits;

  // Split partials: [n_kv, n_splits, max_rows] m and l, [n_kv, n_splits, max_rows, hd] acc.
  std::vector<float> part_m, part_l, part_acc;
  if (n_splits > 1) {
    part_m.resize(size_t(n_kv * n_splits * max_rows));
    part_l.resize(part_m.size());
    part_acc.resize(part_m.size() * size_t(hd));
  }
  const int64_t work = n_tokens * (start_pos + n_tokens) * n_heads * hd;
#pragma omp parallel num_threads(num_threads()) if (n_items > 1 && work >= (int64_t(1) << 16))
  {
    detail::TileScratch scratch;
    scratch.reserve(max_rows, hd, bs);
    std::vector<float> m(static_cast<size_t>(max_rows)), l(static_cast<size_t>(max_rows)),
        acc(static_cast<size_t>(max_rows * hd));
#pragma omp for schedule(dynamic, 1)
    for (int64_t j = n_items - 1; j >= 0; --j) {
      const int64_t ti = j / (n_kv * n_splits), kvh = j / n_splits % n_kv, sp = j % n_splits;
      const int64_t t0 = ti * q_tokens, n_tok = std::min(q_tokens, n_tokens - t0);
      const int64_t b0 = sp * split_blocks, b1 = std::min(n_blocks, b0 + split_blocks);
      if (n_splits > 1) {
        const size_t at = size_t((kvh * n_splits + sp) * max_rows);
        tile(args, kvh, t0, n_tok, b0, b1, scratch, part_m.data() + at, part_l.data() + at,
             part_acc.data() + at * size_t(hd));
        continue;
      }
      tile(args, kvh, t0, n_tok, b0, b1, scratch, m.data(), l.data(), acc.data());
      for (int64_t r = 0; r < n_tok * group; ++r) {
        float* o = out + ((t0 + r / group) * n_heads + kvh * group + r % group) * hd;
        const float inv = 1.0f / l[size_t(r)];
        for (int64_t i = 0; i < hd; ++i) o[i] = acc[size_t(r * hd + i)] * inv;
      }
    }
    if (n_splits > 1) {  // one tile: its rows are all n_tokens × group rows of each KV head
      const int64_t n_rows = n_tokens * group;
#pragma omp for schedule(static)
      for (int64_t j = 0; j < n_kv * n_rows; ++j) {
        const int64_t kvh = j / n_rows, r = j % n_rows;
        float mx = -INFINITY;
        for (int64_t sp = 0; sp < n_splits; ++sp) mx = std::max(mx, part_m[size_t((kvh * n_splits + sp) * max_rows + r)]);
        float* o = out + ((r / group) * n_heads + kvh * group + r % group) * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] = 0.0f;
        float sum = 0.0f;
        for (int64_t sp = 0; sp < n_splits; ++sp) {
          const size_t at = size_t((kvh * n_splits + sp) * max_rows + r);
          if (part_m[at] == -INFINITY) continue;  // the split lies past this row's position
          const float c = std::exp(part_m[at] - mx);
          sum += part_l[at] * c;
          const float* a = part_acc.data() + at * size_t(hd);
          for (int64_t i = 0; i < hd; ++i) o[i] += a[i] * c;
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < hd; ++i) o[i] *= inv;
      }
    }
  }
}

}  // namespace tp::cpu
