// The paged KV cache on the GPU: storing K/V by slot and paged attention, over pools in exactly the byte layout
// of common/kv_dtype.h / kvstore/kv_pool.h (a KvTensorView whose `blocks` is a device pointer), so a CPU pool
// and a CUDA pool holding the same tokens hold the same bytes. Plain C++ header; device pointers; enqueued on
// `stream`, no synchronization. Pool dtypes: f32, bf16, fp8_e4m3, int8 (block or tensor scales).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kv_dtype.h"

namespace tp::cuda {

// Writes k, v [n_tokens, n_kv_heads, head_dim] (F32) at slots [n_tokens] (int64; slot = block · block_size +
// offset; -1 = padding, skipped) of one layer's K and V pools, converted as kernels/cpu/kv_write.h states —
// byte for byte the bytes the CPU write_kv stores, int8 block-scale raises and requantization included.
// Precondition for int8 with block scales: the tokens that land in one block come in position order and are
// consecutive in the token list (padding aside), as every StepPlan gives them. Slots must be < n_blocks ·
// block_size (not checked). Throws InputError when the K and V layouts differ.
void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
              const KvTensorView& v_pool, cudaStream_t stream);

// Which keys each query token sees, for a batch of sequences (decode, chunked prefill or both mixed):
// query token t belongs to sequence token_seq[t] and sits at position token_pos[t]; it attends to positions
// [0, token_pos[t]] of its sequence, position p stored at offset p % block_size of block
// block_tables[token_seq[t] · max_blocks_per_seq + p / block_size].
struct AttentionBatch {
  const int32_t* token_seq = nullptr;     // [n_tokens] device
  const int32_t* token_pos = nullptr;     // [n_tokens] device
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq] device
  int64_t max_blocks_per_seq = 0;
  int64_t max_context = 0;  // >= 1 + max(token_pos): the longest context in the batch (host-known)
  int n_splits = 1;         // split-K partitions of the context (attention_splits(), launch_config.h)
};

// Causal paged attention, online softmax in F32. q: [n_tokens, n_heads, head_dim] F32; out: same shape F32.
// GQA: head h reads KV head h / (n_heads / n_kv_heads). scale = 1/sqrt(head_dim) typically. With
// batch.n_splits > 1 each token's context is cut into n_splits partitions computed in parallel and merged by
// a second kernel, through `workspace` (device, >= attention_workspace_bytes(...) bytes; may be null when
// n_splits == 1). head_dim: 32, 64, 128 or 256. Throws InputError on a bad shape, layout or workspace.
void paged_attention(const float* q, int64_t n_tokens, int64_t n_heads, const AttentionBatch& batch,
                     const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                     void* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace tp::cuda
