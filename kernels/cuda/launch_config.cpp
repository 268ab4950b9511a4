// Host-side launch choices and argument checks of kernels/cuda (launch_config.h).
#include "kernels/cuda/launch_config.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace tp::cuda {

int row_threads(int64_t dim, int per_thread) {
  const int64_t want = (std::max<int64_t>(dim, 1) + per_thread - 1) / per_thread;
  const int64_t t = std::clamp<int64_t>((want + 31) / 32 * 32, 32, 1024);
  return int(t);
}

int64_t attention_items(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads) {
  const int64_t group = n_heads / n_kv_heads;
  return n_tokens * n_kv_heads * ((group + kMaxGroupHeads - 1) / kMaxGroupHeads);
}

int attention_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t max_context, int n_sms) {
  if (n_tokens <= 0 || n_heads <= 0 || n_kv_heads <= 0 || max_context <= 0 || n_sms <= 0) return 1;
  const int64_t items = attention_items(n_tokens, n_heads, n_kv_heads);
  const int64_t want_items = 2 * int64_t(n_sms);
  if (items >= want_items) return 1;
  const int64_t by_sms = (want_items + items - 1) / items;
  const int64_t by_len = max_context / kMinSplitTokens;
  return int(std::clamp<int64_t>(std::min(by_sms, by_len), 1, kMaxSplits));
}

int64_t attention_workspace_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim, int n_splits) {
  if (n_splits <= 1) return 0;
  return n_tokens * n_heads * int64_t(n_splits) * (2 + head_dim) * int64_t(sizeof(float));
}

int64_t attention_workspace_peak(int64_t max_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                 int64_t max_context, int n_sms) {
  int64_t peak = 0;
  for (int64_t n = 1; n <= max_tokens; ++n)
    peak = std::max(peak, attention_workspace_bytes(
                              n, n_heads, head_dim, attention_splits(n, n_heads, n_kv_heads, max_context, n_sms)));
  return peak;
}

void check_positive(const char* entry, const char* name, int64_t v) {
  if (v <= 0) throw InputError(std::string(entry) + ": " + name + " " + std::to_string(v) + " <= 0");
}

void check_non_negative(const char* entry, const char* name, int64_t v) {
  if (v < 0) throw InputError(std::string(entry) + ": " + name + " " + std::to_string(v) + " < 0");
}

void check_aligned(const char* entry, const char* name, const void* p, int64_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) != 0)
    throw InputError(std::string(entry) + ": " + name + " is not " + std::to_string(bytes) + "-byte aligned");
}

void check_kv_pools(const char* entry, const KvTensorView& k, const KvTensorView& v, bool attention) {
  const KvBlockLayout &a = k.layout, &b = v.layout;
  if (a.dtype != b.dtype || a.block_size != b.block_size || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
      a.tensor_scales != b.tensor_scales)
    throw InputError(std::string(entry) + ": the K and V pools differ in layout");
  check_positive(entry, "block_size", a.block_size);
  check_positive(entry, "n_kv_heads", a.n_kv_heads);
  check_positive(entry, "head_dim", a.head_dim);
  if (k.blocks == nullptr || v.blocks == nullptr) throw InputError(std::string(entry) + ": a pool has no blocks");
  const int64_t hd = a.head_dim;
  if (attention && hd != 32 && hd != 64 && hd != 128 && hd != 256)
    throw InputError(std::string(entry) + ": head_dim " + std::to_string(hd) + " is not 32, 64, 128 or 256");
  if (a.block_scales() && a.block_bytes() % 4 != 0)
    throw InputError(std::string(entry) + ": int8 block of " + std::to_string(a.block_bytes()) +
                     " bytes leaves its scales unaligned (n_kv_heads · head_dim · block_size not a multiple of 4)");
}

}  // namespace tp::cuda
