// Test inputs for the CPU kernels: random rows in every weight type, with the values they encode computed
// independently of common/dtype.cpp's dequantize_row.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace tp::test {

// `rows` rows of `n` elements of type t (n a multiple of 32 for quantized types), contiguous with
// `stride` bytes between rows (>= the row size; padding bytes are 0xAB). values = what they encode.
struct TypedRows {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, n]
  int64_t stride = 0;
};

inline TypedRows make_typed_rows(DType t, int64_t rows, int64_t n, uint32_t seed, int64_t extra_stride = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  TypedRows out;
  out.stride = dtype_row_bytes(t, n) + extra_stride;
  out.bytes.assign(size_t(out.stride * rows), 0xAB);
  out.values.resize(size_t(rows * n));
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  // Scales that are exact in F16: k / 64 for k in [1, 16].
  auto scale = [&](uint8_t* p) {
    const float d = float(1 + byte(rng) % 16) / 64.0f;
    put16(p, f32_to_f16(d));
    return d;
  };
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.bytes.data() + r * out.stride;
    float* val = out.values.data() + r * n;
    switch (t) {
      case DType::F32:
        for (int64_t i = 0; i < n; ++i) {
          val[i] = uni(rng);
          std::memcpy(row + 4 * i, &val[i], 4);
        }
        break;
      case DType::F16:
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t h = f32_to_f16(uni(rng));
          put16(row + 2 * i, h);
          val[i] = f16_to_f32(h);
        }
        break;
      case DType::BF16:
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t h = f32_to_bf16(uni(rng));
          put16(row + 2 * i, h);
          val[i] = bf16_to_f32(h);
        }
        break;
      case DType::Q8_0:
        for (int64_t b = 0; b < n / 32; ++b) {
          uint8_t* blk = row + b * 34;
          const float d = scale(blk);
          for (int j = 0; j < 32; ++j) {
            const int8_t q = int8_t(byte(rng) - 128);
            blk[2 + j] = uint8_t(q);
            val[b * 32 + j] = d * float(q);
          }
        }
        break;
      case DType::Q4_0:
        for (int64_t b = 0; b < n / 32; ++b) {
          uint8_t* blk = row + b * 18;
          const float d = scale(blk);
          for (int j = 0; j < 16; ++j) {
            const int lo = byte(rng) & 15, hi = byte(rng) & 15;
            blk[2 + j] = uint8_t(lo | (hi << 4));
            val[b * 32 + j] = d * float(lo - 8);
            val[b * 32 + j + 16] = d * float(hi - 8);
          }
        }
        break;
      case DType::Q4_1:
        for (int64_t b = 0; b < n / 32; ++b) {
          uint8_t* blk = row + b * 20;
          const float d = scale(blk);
          const float m = -float(byte(rng) % 32) / 16.0f;  // exact in F16
          put16(blk + 2, f32_to_f16(m));
          for (int j = 0; j < 16; ++j) {
            const int lo = byte(rng) & 15, hi = byte(rng) & 15;
            blk[4 + j] = uint8_t(lo | (hi << 4));
            val[b * 32 + j] = d * float(lo) + m;
            val[b * 32 + j + 16] = d * float(hi) + m;
          }
        }
        break;
    }
  }
  return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = uni(rng);
  return v;
}

inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace tp::test
