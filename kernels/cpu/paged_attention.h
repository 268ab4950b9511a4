// Attention over a paged K/V pool in its stored dtype (layout: common/kv_dtype.h, kvstore/kv_pool.h; the store
// side is kernels/cpu/kv_write.h). K and V are read as stored — f32, bf16, fp8_e4m3 or int8 rows widened to F32
// in registers, the block's or tensor's scale applied to the dot product and to the softmax weight — never
// copied to F32. AVX-512 (F/BW/VL/DQ) and AVX2 + FMA + F16C rows with runtime dispatch, and a portable path.
#pragma once
#include <cstdint>

#include "common/kv_dtype.h"

namespace tp::cpu {

enum class AttentionImpl : uint8_t { Auto, Avx512, Avx2, Portable };

// How paged_attention cuts the work; 0 picks the default. Results never depend on the thread count: the cuts
// depend only on these values and the shapes.
struct AttentionTiling {
  // Query tokens per tile (a tile = these tokens × the query heads of one KV head). Default: max(1, 32 / group),
  // with the lane kernels max(1, 96 / group): each K/V chunk widened once serves up to 6 vectors of 16 rows
  // instead of 2 (a 512-token chunk at depth 16384, 1 thread, Zen 4 under load: 171 ms CPU a layer against 252-270
  // with 32 / group; bench/kv_attention_bench --tokens 512 --q-tokens), with the AMX tiles max(1, 192 / group).
  int64_t q_tokens = 0;
  // Split-K: when the sequence's query tokens fit one tile (decode, short chunks), its context is cut into
  // partitions of this many KV blocks from block 0, attended in parallel and combined exactly (max-rescaled sums,
  // folded in partition order). Default: 128 positions' worth (ceil(128 / block_size)) for the row kernel, 512
  // for the lane kernels; -1: never split. With the lane kernels, prefill tiles fold the same partitions in turn.
  int64_t split_blocks = 0;
  // AVX-512 rows with head_dim % 16 == 0 only: the lane kernels (paged_attention_avx512.cpp). Prefill tiles of >= 8
  // query rows put the rows across the 16 lanes (~1.8-2.2x less CPU than the row kernel for 512-token chunks at
  // depth 1.5k-8.7k on Zen 4); smaller tiles (decode: the GQA group) put a chunk's 16 positions across the lanes
  // and give each row the very same operations in the same order. Split-K partitions sit at fixed block
  // boundaries and every tile, prefill or decode, attends each partition afresh and folds them in the same order
  // with the same code (paged_attention_tiled.cpp). So a token's attention is the same, bit for bit, whether its
  // prompt was prefilled in one chunk or several, or it was decoded alone or in a batch, on any number of threads
  // (the engine's "batched equals alone" invariant). False: the row kernel everywhere, split-K as set above
  // (what AVX2 and portable rows always run), prefill tiles unsplit.
  bool lanes = true;
  // With lanes, on CPUs with AMX (amx_tile + amx_bf16, attention_has_amx()), BF16 pools and head_dim % 32 == 0:
  // every tile, prefill and decode alike, runs on AMX tiles (paged_attention_amx.cpp) — S^T = K · Q^T and
  // P · V as BF16 tile products with q and P split into two BF16 parts each (16 significant bits: the scores within
  // about 2^-18 · Σ|q k| of the F32 ones, the weighted sums within 2^-18 relative); the online softmax is the lane
  // kernels'. Per query row the operations do not depend on the tile, so prefill equals decode bit for bit here too
  // (not the lane kernels' bits). False: the lane kernels. attention_uses_amx() tells whether a call takes it.
  bool amx = true;
};

// Causal attention for one sequence. q: [n_tokens, n_heads, head_dim] F32, token i at position start_pos + i,
// attends to positions [0, start_pos + i] whose K/V live in block block_table[p / block_size] at offset
// p % block_size of k_pool / v_pool (one layer's views, the same layout; n_kv_heads, head_dim and block_size
// from it). GQA: head h reads KV head h / (n_heads / n_kv_heads). out: [n_tokens, n_heads, head_dim] F32.
// scale = 1/sqrt(head_dim) typically. Scores and softmax in F32. Throws InputError when n_heads is not a
// multiple of n_kv_heads or the K and V layouts differ; block ids are not checked (the Worker does).
// impl: Auto takes AVX-512 when the CPU has avx512f/bw/vl/dq (+ avx2, fma, f16c), else AVX2 when it has avx2, fma
// and f16c, else the portable rows; asking for rows the CPU lacks throws InputError.
//
// Tiled, flash-style (paged_attention_tiled.cpp): each KV block is read once per KV head and query tile, its
// rows widened to F32 once and used by every query row of the tile (all the group's heads × q_tokens tokens),
// with an online softmax (running max, sum and output per row). Threads over (KV head, query tile, split).
void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                     const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out,
                     AttentionImpl impl = AttentionImpl::Auto, const AttentionTiling& tiling = {});

// One sequence of paged_attention_batch: its n_tokens query rows follow the previous sequence's in q and out.
struct AttentionSeqArgs {
  int64_t n_tokens;  // query tokens (0: the sequence has none this call)
  int64_t start_pos;  // position of its first query token
  const int32_t* block_table;
};

// paged_attention for n_seqs sequences of one step (q, out: [Σ n_tokens, n_heads, head_dim]) in one parallel
// region: their work items are pooled, each sequence cut exactly as paged_attention cuts it alone, so the results
// are bit-identical to one paged_attention call per sequence. Throws InputError as paged_attention does, or
// naming a sequence with start_pos < 0.
void paged_attention_batch(const float* q, const AttentionSeqArgs* seqs, int64_t n_seqs, int64_t n_heads,
                           const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                           AttentionImpl impl = AttentionImpl::Auto, const AttentionTiling& tiling = {});

// The same attention, one (query token, head) pair at a time: all scores of the pair, softmax, weighted sum of
// V rows (paged_attention.cpp). Each K/V row is read once per query head. The reference for the tiled kernel.
void paged_attention_naive(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads,
                           const KvTensorView& k_pool, const KvTensorView& v_pool, const int32_t* block_table,
                           float scale, float* out, AttentionImpl impl = AttentionImpl::Auto);

bool attention_has_avx2();    // avx2 + fma + f16c
bool attention_has_avx512();  // avx512f + avx512bw + avx512vl + avx512dq, and attention_has_avx2()
// attention_has_avx512() + avx512_bf16 + amx_tile + amx_bf16, and Linux granted the process the AMX tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here).
bool attention_has_amx();
// Whether paged_attention(_batch) with these arguments runs the AMX tile kernel (AttentionTiling::amx): the AVX-512
// rows (impl Avx512, or Auto on a CPU that has them), the lane kernels, a bf16 pool, head_dim % 32 == 0 and
// attention_has_amx(). Its results meet looser bounds than the F32 kernels' (q and P in two BF16 parts).
bool attention_uses_amx(KvDType dtype, int64_t head_dim, AttentionImpl impl, const AttentionTiling& tiling);
const char* attention_impl_name(AttentionImpl impl);  // auto, avx512, avx2, portable

}  // namespace tp::cpu
