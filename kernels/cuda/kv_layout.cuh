// A KV pool view as the kernels read it: common/kv_dtype.h's layout with its byte counts computed on the host
// (KvBlockLayout's member functions are host code). Included by .cu files only.
#pragma once
#include <cstdint>

#include "common/kv_dtype.h"
#include "kernels/cuda/device_math.cuh"

namespace tp::cuda::dev {

struct KvPoolDev {
  uint8_t* blocks = nullptr;
  int64_t block_size = 0, n_kv_heads = 0, head_dim = 0;
  int64_t row_bytes = 0, data_bytes = 0, block_bytes = 0;  // one token, one block's elements, one block
  KvDType dtype = KvDType::F32;
  bool block_scales = false;
  float tensor_scale = 1.0f;

  static KvPoolDev from(const KvTensorView& v) {
    const KvBlockLayout& l = v.layout;
    return {v.blocks, l.block_size, l.n_kv_heads, l.head_dim, l.row_bytes(), l.data_bytes(), l.block_bytes(),
            l.dtype, l.block_scales(), v.tensor_scale};
  }
};

// Element i of a stored row as F32, before any scale.
__device__ __forceinline__ float kv_load(const uint8_t* row, KvDType t, int64_t i) {
  switch (t) {
    case KvDType::F32:
      return reinterpret_cast<const float*>(row)[i];
    case KvDType::BF16:
      return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    case KvDType::FP8_E4M3:
      return e4m3_to_f32(row[i]);
    case KvDType::INT8:
      return float(int8_t(row[i]));
  }
  return 0.0f;
}

}  // namespace tp::cuda::dev
