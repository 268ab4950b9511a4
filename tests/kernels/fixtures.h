// Test inputs for the CPU kernels: random rows in every weight type, with the values they encode computed
// independently of common/dtype.cpp's dequantize_row.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace tp::test {

// `rows` rows of `n` elements of type t (n a multiple of the block: 32, 256 for Q4_K / Q5_K / Q6_K), contiguous with
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
      case DType::Q5_1:  // Q4_1 with a fifth bit a weight in qh (bit j: weight j, bit j + 16: weight j + 16)
        for (int64_t b = 0; b < n / 32; ++b) {
          const bool five = t == DType::Q5_1;
          uint8_t* blk = row + b * (five ? 24 : 20);
          const float d = scale(blk);
          const float m = -float(byte(rng) % 32) / 16.0f;  // exact in F16
          put16(blk + 2, f32_to_f16(m));
          uint8_t* qs = blk + (five ? 8 : 4);
          uint32_t qh = 0;
          for (int j = 0; j < 16; ++j) {
            const int lo = byte(rng) & (five ? 31 : 15), hi = byte(rng) & (five ? 31 : 15);
            qs[j] = uint8_t((lo & 15) | ((hi & 15) << 4));
            qh |= uint32_t(lo >> 4) << j;
            qh |= uint32_t(hi >> 4) << (j + 16);
            val[b * 32 + j] = d * float(lo) + m;
            val[b * 32 + j + 16] = d * float(hi) + m;
          }
          if (five) std::memcpy(blk + 4, &qh, 4);
        }
        break;
      case DType::Q5_0:
        for (int64_t b = 0; b < n / 32; ++b) {
          uint8_t* blk = row + b * 22;
          const float d = scale(blk);
          uint32_t qh = 0;
          for (int j = 0; j < 16; ++j) {
            const int lo = byte(rng) & 31, hi = byte(rng) & 31;
            blk[6 + j] = uint8_t((lo & 15) | ((hi & 15) << 4));
            qh |= uint32_t(lo >> 4) << j;
            qh |= uint32_t(hi >> 4) << (j + 16);
            val[b * 32 + j] = float(lo - 16) * d;
            val[b * 32 + j + 16] = float(hi - 16) * d;
          }
          std::memcpy(blk + 2, &qh, 4);
        }
        break;
      case DType::Q4_K:  // packed as llama.cpp's quantize_row_q4_K_ref packs (sc, m) and the nibbles
      case DType::Q5_K:  // the same, and the fifth bits: bit 2c / 2c + 1 of qh[l] for weight 64c + l / 64c + 32 + l
        for (int64_t b = 0; b < n / 256; ++b) {
          const bool five = t == DType::Q5_K;
          uint8_t* blk = row + b * (five ? 176 : 144);
          const float d = scale(blk), dmin = float(1 + byte(rng) % 16) / 256.0f;
          put16(blk + 2, f32_to_f16(dmin));
          uint8_t* scales = blk + 4;
          std::memset(scales, 0, 12);
          int sc[8], mn[8];
          for (int j = 0; j < 8; ++j) {
            sc[j] = byte(rng) & 63;
            mn[j] = byte(rng) & 63;
            if (j < 4) {
              scales[j] = uint8_t(sc[j]);
              scales[j + 4] = uint8_t(mn[j]);
            } else {
              scales[j + 4] = uint8_t((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
              scales[j - 4] |= uint8_t((sc[j] >> 4) << 6);
              scales[j - 0] |= uint8_t((mn[j] >> 4) << 6);
            }
          }
          int q[256];
          for (int& v : q) v = byte(rng) & (five ? 31 : 15);
          uint8_t* qs = blk + (five ? 48 : 16);
          for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l)
              qs[32 * c + l] = uint8_t((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
          if (five)
            for (int l = 0; l < 32; ++l) {
              uint8_t h = 0;
              for (int c = 0; c < 4; ++c)
                h |= uint8_t(((q[64 * c + l] >> 4) << (2 * c)) | ((q[64 * c + 32 + l] >> 4) << (2 * c + 1)));
              blk[16 + l] = h;
            }
          for (int i = 0; i < 256; ++i)
            val[b * 256 + i] = d * float(sc[i / 32]) * float(q[i]) - dmin * float(mn[i / 32]);
        }
        break;
      case DType::Q6_K:  // packed as llama.cpp's quantize_row_q6_K_ref packs ql / qh
        for (int64_t b = 0; b < n / 256; ++b) {
          uint8_t* blk = row + b * 210;
          const float d = float(1 + byte(rng) % 16) / 1024.0f;
          put16(blk + 208, f32_to_f16(d));
          int sc[16], q[256];
          for (int j = 0; j < 16; ++j) {
            sc[j] = byte(rng) - 128;
            blk[192 + j] = uint8_t(int8_t(sc[j]));
          }
          for (int& v : q) v = byte(rng) & 63;
          uint8_t* ql = blk;
          uint8_t* qh = blk + 128;
          for (int h = 0; h < 2; ++h, ql += 64, qh += 32)
            for (int l = 0; l < 32; ++l) {
              const int* L = q + 128 * h;
              ql[l] = uint8_t((L[l] & 15) | ((L[l + 64] & 15) << 4));
              ql[l + 32] = uint8_t((L[l + 32] & 15) | ((L[l + 96] & 15) << 4));
              qh[l] = uint8_t((L[l] >> 4) | ((L[l + 32] >> 4) << 2) | ((L[l + 64] >> 4) << 4) | ((L[l + 96] >> 4) << 6));
            }
          for (int i = 0; i < 256; ++i) val[b * 256 + i] = d * float(sc[i / 16]) * float(q[i] - 32);
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
