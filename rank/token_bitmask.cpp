// Token bitmask application (see token_bitmask.h).
#include "rank/token_bitmask.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace tp {

void apply_token_bitmask(float* row, int64_t vocab, std::span<const int32_t> mask) {
  if (mask.empty()) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t covered = std::min<int64_t>(vocab, int64_t(mask.size()) * 32);
  for (int64_t w = 0; w * 32 < covered; ++w) {
    const uint32_t bits = uint32_t(mask[size_t(w)]);
    if (bits == 0xffffffffu) continue;  // all 32 allowed
    const int64_t base = w * 32, end = std::min<int64_t>(base + 32, covered);
    if (bits == 0) {
      std::fill(row + base, row + end, kNegInf);
      continue;
    }
    for (int64_t t = base; t < end; ++t)
      if (!((bits >> (t - base)) & 1u)) row[t] = kNegInf;
  }
  std::fill(row + covered, row + vocab, kNegInf);
}

void apply_token_bitmasks(float* logits, int64_t vocab, std::span<const MaskedRow> rows) {
  for (const MaskedRow& r : rows) apply_token_bitmask(logits + r.row * vocab, vocab, r.mask);
}

int64_t count_allowed(std::span<const int32_t> mask, int64_t vocab) {
  int64_t n = 0;
  const int64_t covered = std::min<int64_t>(vocab, int64_t(mask.size()) * 32);
  for (int64_t w = 0; w * 32 < covered; ++w) {
    uint32_t bits = uint32_t(mask[size_t(w)]);
    const int64_t left = covered - w * 32;
    if (left < 32) bits &= (1u << left) - 1u;
    n += std::popcount(bits);
  }
  return n;
}

}  // namespace tp
