// Attention over a paged K/V pool (layout of kvstore/kv_pool.h: [n_blocks, block_size, n_kv_heads, head_dim]).
#pragma once
#include <cstdint>

namespace tp::cpu {

// Writes k, v [n_tokens, n_kv_heads, head_dim] into one layer's pool at slots[n_tokens]
// (slot = block * block_size + offset; -1 = skip).
void write_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_heads, int64_t head_dim,
              const int64_t* slots, float* k_pool, float* v_pool);

// Causal attention for one sequence. q: [n_tokens, n_heads, head_dim], token i at position start_pos + i,
// attends to positions [0, start_pos + i] whose K/V live in the pool at
// block_table[p / block_size] * block_size + p % block_size. GQA: head h reads KV head h / (n_heads / n_kv_heads).
// out: [n_tokens, n_heads, head_dim]. scale = 1/sqrt(head_dim) typically.
void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, const float* k_pool, const float* v_pool, const int32_t* block_table,
                     int64_t block_size, float scale, float* out);

}  // namespace tp::cpu
