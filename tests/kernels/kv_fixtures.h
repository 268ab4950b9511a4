// Test pools for write_kv and paged_attention: a layer's K or V as raw blocks (garbage-filled, as reused
// memory is), and the value an element stores, decoded with the scalar reference conversions of common/
// (bf16_to_f32, fp8_e4m3_to_f32), independently of kernels/cpu.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/fp_formats.h"
#include "common/kv_dtype.h"

namespace tp::test {

struct TestPool {
  TestPool(const KvBlockLayout& layout, int64_t n_blocks, float tensor_scale = 1.0f, uint8_t fill = 0xAB)
      : bytes(size_t(n_blocks * layout.block_bytes()), fill) {
    view.blocks = bytes.data();
    view.n_blocks = n_blocks;
    view.layout = layout;
    view.tensor_scale = tensor_scale;
  }
  TestPool(const TestPool&) = delete;
  std::vector<uint8_t> bytes;
  KvTensorView view;
};

// The F32 scale of (block, head) for int8 with block scales.
inline float block_scale(const KvTensorView& t, int64_t block, int64_t head) {
  float s;
  std::memcpy(&s, t.block(block) + t.layout.data_bytes() + head * kKvScaleBytes, sizeof s);
  return s;
}

// The value element d of KV head h at `slot` stands for (x̂ in common/kv_dtype.h).
inline float stored_value(const KvTensorView& t, int64_t slot, int64_t h, int64_t d) {
  const KvBlockLayout& l = t.layout;
  const int64_t b = slot / l.block_size, off = slot % l.block_size, i = h * l.head_dim + d;
  const uint8_t* row = t.block(b) + off * l.row_bytes();
  switch (l.dtype) {
    case KvDType::F32: {
      float f;
      std::memcpy(&f, row + 4 * i, sizeof f);
      return f;
    }
    case KvDType::BF16: {
      uint16_t u;
      std::memcpy(&u, row + 2 * i, sizeof u);
      return bf16_to_f32(u);
    }
    case KvDType::FP8_E4M3:
      return fp8_e4m3_to_f32(row[i]) * t.tensor_scale;
    case KvDType::INT8:
      return float(int8_t(row[i])) * (l.block_scales() ? block_scale(t, b, h) : t.tensor_scale);
  }
  return 0.0f;
}

inline std::string dtype_label(KvDType t, bool tensor_scales = false) {
  return std::string(kv_dtype_name(t)) + (tensor_scales ? "_tensor" : "");
}

}  // namespace tp::test
