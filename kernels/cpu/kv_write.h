// Storing K and V into a paged pool in its dtype (layout: common/kv_dtype.h, kvstore/kv_pool.h), and the
// scalar conversions the store and the attention kernels share.
//
// int8 with block scales — one F32 scale s per (block, KV head) of K and of V, beside the block:
//   Tokens reach a block one at a time (decode) or many at once (prefill chunks), in position order. A write
//   at offset 0 starts the block: s = amax(token's head row) / 127. A later token whose amax exceeds 127 s
//   raises the scale to s' = amax / 127 and requantizes the rows already in the block for that head,
//   q' = round(q · s / s'), before storing its own row at s'. Consequences:
//   - the stored bytes depend only on the token values in position order, never on how they were chunked
//     into steps: a recompute after preemption, or a prefill of what was decoded, stores the same bytes;
//   - no clipping: every value fits its block's final scale;
//   - a requantized row carries one more rounding: |error| <= 0.5 s (own rounding) + 0.5 s' per raise, so a
//     row's error is bounded by 0.5 · (sum of the scales its block went through), at most 0.5 · s_final · (1 +
//     number of raises); the first token of a block usually sets most of its range, and a new maximum among j
//     tokens is expected ~ln(j) times (2.4 raises per 16-token block of i.i.d. values);
//   - the alternative, a scale per token and head beside each token, needs no requantization and is exact per
//     token, but costs 4 B per 64 elements (6% at head_dim 64: 3.76x the tokens of F32 instead of 3.98x).
//   Attention in the same step may read a row requantized by a later token of the same chunk: within the same
//   bound, so a chunked prefill and a token-by-token decode agree to the int8 tolerance, not bit for bit.
// int8 / fp8_e4m3 with a tensor scale s: q = round(x / s) clamped to ±127, or e4m3(x / s) saturating at ±448.
// bf16: round to nearest even. A NaN input stores NaN (f32, bf16; fp8: code 0x7F) or 0 (int8, tensor scale).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "common/kv_dtype.h"

namespace tp::cpu {

// Writes k, v [n_tokens, n_kv_heads, head_dim] (F32) into one layer's K and V pools at slots[n_tokens]
// (slot = block * block_size + offset; -1 = skip), converting to the pool's dtype as above. The pools'
// layouts give n_kv_heads and head_dim. Slots must lie in [0, n_blocks * block_size) (not checked).
void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
              const KvTensorView& v_pool);

// F32 -> E4M3 ("e4m3fn"), round to nearest even, saturating to ±448, NaN -> 0x7F: the same result as
// common/fp_formats.h's f32_to_fp8_e4m3, by bit manipulation (no libm but one nearbyint on subnormals).
inline uint8_t f32_to_e4m3(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7F;               // NaN
  if (u >= 0x43E00000u) return uint8_t(sign | 0x7E);  // |f| >= 448 (and inf): saturate
  if (u < 0x3C800000u)  // |f| < 2^-6: the subnormal grid m · 2^-9, m in [0, 8] (8 is the smallest normal)
    return uint8_t(sign | uint8_t(std::nearbyint(std::bit_cast<float>(u) * 512.0f)));
  u += 0x7FFFFu + ((u >> 20) & 1u);  // round 23 mantissa bits to 3, ties to even (a carry bumps the exponent)
  return uint8_t(sign | uint8_t((u >> 20) - (120u << 3)));  // rebias the exponent: 127 - 7
}

// The 256 E4M3 values (common/fp_formats.h's fp8_e4m3_to_f32; 0x7F and 0xFF are NaN).
const float* e4m3_table();

// round(x · inv) clamped to [-127, 127] (ties to even); NaN -> 0.
inline int8_t quantize_i8(float x, float inv) {
  const float r = std::nearbyint(x * inv);
  return int8_t(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f);
}

}  // namespace tp::cpu
