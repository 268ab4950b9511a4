// write_kv: one token row at a time, in slot order, converted to the pool's dtype (kv_write.h states the
// int8 block-scale scheme).
#include "kernels/cpu/kv_write.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "kernels/cpu/bf16_round.h"

namespace tp::cpu {
namespace {

float load_scale(const uint8_t* p) {
  float s;
  std::memcpy(&s, p, sizeof s);
  return s;
}

void store_scale(uint8_t* p, float s) { std::memcpy(p, &s, sizeof s); }

// int8 with block scales: x [head_dim], head h of the token at offset `off` of the block at `blk`.
void store_int8_block_scaled(const KvBlockLayout& l, uint8_t* blk, int64_t off, int64_t h, const float* x) {
  const int64_t hd = l.head_dim, row = l.row_bytes();
  uint8_t* scale_at = blk + l.data_bytes() + h * kKvScaleBytes;
  float amax = 0.0f;
  for (int64_t d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
  const float need = amax / 127.0f;
  float s = load_scale(scale_at);
  if (off == 0) {
    s = need;  // the block starts here: whatever scale it held belonged to an earlier owner
  } else if (need > s) {
    const float ratio = s / need;  // requantize the rows already in the block to the raised scale
    for (int64_t o = 0; o < off; ++o) {
      int8_t* q = reinterpret_cast<int8_t*>(blk + o * row + h * hd);
      for (int64_t d = 0; d < hd; ++d) q[d] = quantize_i8(float(q[d]), ratio);
    }
    s = need;
  }
  store_scale(scale_at, s);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  int8_t* q = reinterpret_cast<int8_t*>(blk + off * row + h * hd);
  for (int64_t d = 0; d < hd; ++d) q[d] = quantize_i8(x[d], inv);
}

void write_tensor(const float* x, int64_t n_tokens, const int64_t* slots, const KvTensorView& pool) {
  const KvBlockLayout& l = pool.layout;
  const int64_t n_row = l.n_kv_heads * l.head_dim;
  const float inv_t = 1.0f / pool.tensor_scale;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t off = slots[t] % l.block_size;
    uint8_t* blk = pool.block(slots[t] / l.block_size);
    uint8_t* dst = blk + off * l.row_bytes();
    const float* src = x + t * n_row;
    switch (l.dtype) {
      case KvDType::F32:
        std::memcpy(dst, src, size_t(n_row) * sizeof(float));
        break;
      case KvDType::BF16:
        detail::round_bf16(src, n_row, reinterpret_cast<uint16_t*>(dst));
        break;
      case KvDType::FP8_E4M3:
        for (int64_t i = 0; i < n_row; ++i) dst[i] = f32_to_e4m3(src[i] * inv_t);
        break;
      case KvDType::INT8:
        if (l.block_scales()) {
          for (int64_t h = 0; h < l.n_kv_heads; ++h) store_int8_block_scaled(l, blk, off, h, src + h * l.head_dim);
        } else {
          for (int64_t i = 0; i < n_row; ++i) dst[i] = uint8_t(quantize_i8(src[i], inv_t));
        }
        break;
    }
  }
}

}  // namespace

void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
              const KvTensorView& v_pool) {
  const KvBlockLayout &a = k_pool.layout, &b = v_pool.layout;
  if (a.dtype != b.dtype || a.block_size != b.block_size || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
      a.tensor_scales != b.tensor_scales || a.block_size <= 0)
    throw InputError("write_kv: the K and V pools differ in layout");
  write_tensor(k, n_tokens, slots, k_pool);
  write_tensor(v, n_tokens, slots, v_pool);
}

const float* e4m3_table() {
  static const std::array<float, 256> kTable = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = fp8_e4m3_to_f32(uint8_t(i));
    return t;
  }();
  return kTable.data();
}

}  // namespace tp::cpu
