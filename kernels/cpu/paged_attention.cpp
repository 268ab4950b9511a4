// The naive paged attention (paged_attention_naive, the reference of the tiled kernel): one (query token, head)
// pair at a time, parallel over pairs, each reading the pool block by block through the sequence's block table.
// Scores for all attended positions go to a per-thread buffer, softmax in F32 with max subtraction, then a
// weighted sum of V rows (paged_attention_impl.h). This file holds its entry, the argument checks and dispatch
// both kernels share, and the portable rows of both (scalar; the compiler may vectorize them).
// O(n_tokens · context · head_dim) per head; inner loops are contiguous over head_dim.
#include "kernels/cpu/paged_attention.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"

#define TP_KV_TARGET
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"

namespace tp::cpu {
namespace detail {
namespace {

const float* const kE4m3 = e4m3_table();

template <KvDType D>
inline float element(const uint8_t* row, int64_t i) {
  if constexpr (D == KvDType::F32) {
    float f;
    std::memcpy(&f, row + 4 * i, sizeof f);
    return f;
  } else if constexpr (D == KvDType::BF16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, sizeof h);
    return bf16_to_f32(h);
  } else if constexpr (D == KvDType::FP8_E4M3) {
    return kE4m3[row[i]];
  } else {
    return float(int8_t(row[i]));
  }
}

struct PortableOps {
  static constexpr float kFp8Unit = 1.0f;

  template <KvDType D>
  static float dot(const float* q, const uint8_t* row, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += q[i] * element<D>(row, i);
    return s;
  }

  template <KvDType D>
  static void dot4(const float* q, const uint8_t* row, int64_t stride, int64_t n, float* s) {
    for (int j = 0; j < 4; ++j) s[j] = dot<D>(q, row + j * stride, n);
  }

  template <KvDType D>
  static void axpy(float w, const uint8_t* row, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] += w * element<D>(row, i);
  }

  template <KvDType D>
  static void axpy4(const float* w, const uint8_t* row, int64_t stride, int64_t n, float* out) {
    for (int j = 0; j < 4; ++j) axpy<D>(w[j], row + j * stride, n, out);
  }

  template <KvDType D>
  static void widen(const uint8_t* row, int64_t n, float s, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = s * element<D>(row, i);
  }

  static float exp_sum(float* s, int64_t n, float max) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - max));
    return sum;
  }
};

}  // namespace

AttendFn attend_portable(KvDType d) { return attend_for<PortableOps>(d); }
TileFn tile_portable(KvDType d) { return tile_for<PortableOps>(d); }

}  // namespace detail

bool attention_has_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

bool attention_has_avx512() {
  static const bool has = attention_has_avx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::Auto: return "auto";
    case AttentionImpl::Avx512: return "avx512";
    case AttentionImpl::Avx2: return "avx2";
    case AttentionImpl::Portable: return "portable";
  }
  return "?";
}

namespace detail {
namespace {

// TPSERVE_ATTENTION=avx512|avx2|portable makes Auto take those rows (benchmarks: one binary, each path end to
// end); unset or auto: the CPU's widest. A path the CPU lacks, or another value, is an InputError naming it.
AttentionImpl forced_attention_impl() {
  const char* v = std::getenv("TPSERVE_ATTENTION");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return AttentionImpl::Auto;
  const AttentionImpl impl = s == "avx512" ? AttentionImpl::Avx512
                             : s == "avx2" ? AttentionImpl::Avx2
                             : s == "portable" ? AttentionImpl::Portable
                                               : throw InputError("TPSERVE_ATTENTION: '" + s +
                                                                  "' is not one of auto, avx512, avx2, portable");
  if ((impl == AttentionImpl::Avx512 && !attention_has_avx512()) || (impl == AttentionImpl::Avx2 && !attention_has_avx2()))
    throw InputError("TPSERVE_ATTENTION: this CPU lacks the " + s + " rows");
  return impl;
}

}  // namespace

AttentionImpl check_attention_args(int64_t n_heads, const KvTensorView& k_pool, const KvTensorView& v_pool,
                                   AttentionImpl impl) {
  const KvBlockLayout &kl = k_pool.layout, &vl = v_pool.layout;
  const int64_t n_kv_heads = kl.n_kv_heads;
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw InputError("paged_attention: n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " +
                     std::to_string(n_kv_heads));
  if (kl.block_size <= 0) throw InputError("paged_attention: block_size must be positive");
  if (kl.dtype != vl.dtype || kl.block_size != vl.block_size || kl.n_kv_heads != vl.n_kv_heads ||
      kl.head_dim != vl.head_dim || kl.tensor_scales != vl.tensor_scales)
    throw InputError("paged_attention: the K and V pools differ in layout");
  if (impl == AttentionImpl::Avx2 && !attention_has_avx2())
    throw InputError("paged_attention: this CPU lacks avx2, fma or f16c");
  if (impl == AttentionImpl::Avx512 && !attention_has_avx512())
    throw InputError("paged_attention: this CPU lacks avx512f, avx512bw, avx512vl or avx512dq");
  if (impl != AttentionImpl::Auto) return impl;
  static const AttentionImpl forced = forced_attention_impl();
  if (forced != AttentionImpl::Auto) return forced;
  return attention_has_avx512() ? AttentionImpl::Avx512
         : attention_has_avx2() ? AttentionImpl::Avx2
                                : AttentionImpl::Portable;
}

}  // namespace detail

void paged_attention_naive(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads,
                           const KvTensorView& k_pool, const KvTensorView& v_pool, const int32_t* block_table,
                           float scale, float* out, AttentionImpl impl) {
  const AttentionImpl rows = detail::check_attention_args(n_heads, k_pool, v_pool, impl);
  const KvBlockLayout& kl = k_pool.layout;
  const int64_t n_kv_heads = kl.n_kv_heads, head_dim = kl.head_dim;
  const detail::AttendFn attend = rows == AttentionImpl::Avx512 ? detail::attend_avx512(kl.dtype)
                                  : rows == AttentionImpl::Avx2 ? detail::attend_avx2(kl.dtype)
                                                                : detail::attend_portable(kl.dtype);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t n_pairs = n_tokens * n_heads;
  const int64_t work = n_tokens * (start_pos + n_tokens) * n_heads * head_dim;
#pragma omp parallel num_threads(num_threads()) if (n_pairs > 1 && work >= (int64_t(1) << 16))
  {
    std::vector<float> scores(static_cast<size_t>(start_pos + n_tokens));
    // Later tokens attend to more positions: dynamic schedule, latest tokens first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t j = n_pairs - 1; j >= 0; --j) {
      const int64_t t = j / n_heads, h = j % n_heads;
      attend(q + (t * n_heads + h) * head_dim, start_pos + t + 1, h / group, k_pool, v_pool, block_table, scale,
             scores.data(), out + (t * n_heads + h) * head_dim);
    }
  }
}

}  // namespace tp::cpu
