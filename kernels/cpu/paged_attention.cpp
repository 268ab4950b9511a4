// Paged attention: one (query token, head) pair at a time, parallel over pairs. Scores for all attended
// positions go to a per-thread buffer, softmax in F32 with max subtraction, then a weighted sum of V rows.
// O(n_tokens · context · head_dim) per head; inner loops are contiguous over head_dim.
#include "kernels/cpu/paged_attention.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu {

namespace {

// One query row against positions [0, n_pos). kv_stride = floats between consecutive slots of one KV head.
__attribute__((target_clones("avx512f", "avx2", "default"))) void attend_one(
    const float* q, int64_t n_pos, int64_t head_dim, const float* k_head, const float* v_head, int64_t kv_stride,
    const int32_t* block_table, int64_t block_size, float scale, float* scores, float* out) {
  float max_s = -INFINITY;
  for (int64_t p = 0; p < n_pos; ++p) {
    const int64_t slot = int64_t(block_table[p / block_size]) * block_size + p % block_size;
    const float* k = k_head + slot * kv_stride;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < head_dim; ++d) s += q[d] * k[d];
    s *= scale;
    scores[p] = s;
    max_s = s > max_s ? s : max_s;
  }
  float sum = 0.0f;
  for (int64_t p = 0; p < n_pos; ++p) {
    const float e = std::exp(scores[p] - max_s);
    scores[p] = e;
    sum += e;
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t p = 0; p < n_pos; ++p) {
    const int64_t slot = int64_t(block_table[p / block_size]) * block_size + p % block_size;
    const float* v = v_head + slot * kv_stride;
    const float w = scores[p];
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) out[d] += w * v[d];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace

void write_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_heads, int64_t head_dim,
              const int64_t* slots, float* k_pool, float* v_pool) {
  const int64_t row = n_kv_heads * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0) continue;
    std::memcpy(k_pool + slots[t] * row, k + t * row, size_t(row) * sizeof(float));
    std::memcpy(v_pool + slots[t] * row, v + t * row, size_t(row) * sizeof(float));
  }
}

void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, const float* k_pool, const float* v_pool, const int32_t* block_table,
                     int64_t block_size, float scale, float* out) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw InputError("paged_attention: n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " +
                     std::to_string(n_kv_heads));
  if (block_size <= 0) throw InputError("paged_attention: block_size must be positive");
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kv_stride = n_kv_heads * head_dim;
  const int64_t n_pairs = n_tokens * n_heads;
  const int64_t work = n_tokens * (start_pos + n_tokens) * n_heads * head_dim;
#pragma omp parallel num_threads(num_threads()) if (n_pairs > 1 && work >= (int64_t(1) << 16))
  {
    std::vector<float> scores(static_cast<size_t>(start_pos + n_tokens));
    // Later tokens attend to more positions: dynamic schedule, latest tokens first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t j = n_pairs - 1; j >= 0; --j) {
      const int64_t t = j / n_heads, h = j % n_heads;
      const int64_t kvh = h / group;
      attend_one(q + (t * n_heads + h) * head_dim, start_pos + t + 1, head_dim, k_pool + kvh * head_dim,
                 v_pool + kvh * head_dim, kv_stride, block_table, block_size, scale, scores.data(),
                 out + (t * n_heads + h) * head_dim);
    }
  }
}

}  // namespace tp::cpu
