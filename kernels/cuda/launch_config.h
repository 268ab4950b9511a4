// Pure host logic of the CUDA kernels: launch shapes, the split-K choice of paged attention and the argument
// checks the entries share. No CUDA call here, so it is unit-tested without a device.
#pragma once
#include <cstdint>

#include "common/kv_dtype.h"

namespace tp::cuda {

// Threads for a row-wise kernel over rows of `dim` elements: a multiple of 32 in [32, 1024], about one element
// (or `per_thread` elements) per thread.
int row_threads(int64_t dim, int per_thread = 1);

// Attention work items without splitting: one per (query token, KV head, chunk of up to kMaxGroupHeads query
// heads of that KV head).
inline constexpr int kMaxGroupHeads = 8;
int64_t attention_items(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads);

// Split-K partitions for paged attention: 1 unless the work items leave SMs idle and the context is long; then
// enough partitions (of at least kMinSplitTokens tokens each, at most kMaxSplits) to give every SM ~2 items.
inline constexpr int64_t kMinSplitTokens = 256;
inline constexpr int kMaxSplits = 64;
int attention_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t max_context, int n_sms);

// Device bytes paged_attention needs for n_splits > 1 (0 for 1): per (token, head, split) an F32 max, an F32
// sum and head_dim F32 partial outputs.
int64_t attention_workspace_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim, int n_splits);

// The most workspace any step of 1..max_tokens query tokens over contexts up to max_context needs (split-K
// chooses more partitions for fewer tokens, so the peak is not at max_tokens): the GPU memory plan's share for
// attention partials.
int64_t attention_workspace_peak(int64_t max_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                 int64_t max_context, int n_sms);

// Argument checks (throw InputError "<entry>: <why>").
void check_positive(const char* entry, const char* name, int64_t v);
void check_non_negative(const char* entry, const char* name, int64_t v);
void check_aligned(const char* entry, const char* name, const void* p, int64_t bytes);
// The layouts of K and V pools agree and are ones the CUDA kernels handle (head_dim a multiple of 32 when
// `attention`: 32, 64, 128 or 256).
void check_kv_pools(const char* entry, const KvTensorView& k, const KvTensorView& v, bool attention);

}  // namespace tp::cuda
