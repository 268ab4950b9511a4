// Test inputs for the CPU kernels: random rows in every weight type, with the values they encode computed
// independently of common/dtype.cpp's dequantize_row.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace tp::test {

// `rows` rows of `n` elements of type t (n a multiple of the block: 32, 256 for the K-quants and IQ4_XS), contiguous
// with `stride` bytes between rows (>= the row size; padding bytes are 0xAB). values = what they encode.
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
      case DType::Q2_K:  // scales[16] (scale | min << 4), qs[64] (weight i: byte 32 (i / 128) + i % 32, bits
                         // 2 ((i % 128) / 32)), f16 d, f16 dmin
        for (int64_t b = 0; b < n / 256; ++b) {
          uint8_t* blk = row + b * 84;
          std::memset(blk, 0, 84);
          const float d = float(1 + byte(rng) % 16) / 64.0f, dmin = float(1 + byte(rng) % 16) / 256.0f;
          put16(blk + 80, f32_to_f16(d));
          put16(blk + 82, f32_to_f16(dmin));
          int sc[16], mn[16];
          for (int j = 0; j < 16; ++j) {
            sc[j] = byte(rng) & 15, mn[j] = byte(rng) & 15;
            blk[j] = uint8_t(sc[j] | (mn[j] << 4));
          }
          for (int i = 0; i < 256; ++i) {
            const int q = byte(rng) & 3;
            blk[16 + 32 * (i / 128) + i % 32] |= uint8_t(q << (2 * ((i % 128) / 32)));
            val[b * 256 + i] = d * float(sc[i / 16]) * float(q) - dmin * float(mn[i / 16]);
          }
        }
        break;
      case DType::Q3_K:  // hmask[32] (weight i: byte i % 32, bit i / 32), qs[64] (low 2 bits as Q2_K's), 12 bytes of
                         // 6-bit scales (low nibbles of 0-7 then 8-15 in bytes 0-7, top 2 bits of j in byte 8 + j % 4
                         // at bit 2 (j / 4)), f16 d; x = d (s - 32) (q - 4)
        for (int64_t b = 0; b < n / 256; ++b) {
          uint8_t* blk = row + b * 110;
          std::memset(blk, 0, 110);
          const float d = float(1 + byte(rng) % 16) / 1024.0f;
          put16(blk + 108, f32_to_f16(d));
          int sc[16];
          for (int j = 0; j < 16; ++j) {
            sc[j] = byte(rng) & 63;
            blk[96 + j % 8] |= uint8_t((sc[j] & 15) << (j < 8 ? 0 : 4));
            blk[96 + 8 + j % 4] |= uint8_t((sc[j] >> 4) << (2 * (j / 4)));
          }
          for (int i = 0; i < 256; ++i) {
            const int q = byte(rng) & 7;  // q - 4 in [-4, 3]
            blk[32 + 32 * (i / 128) + i % 32] |= uint8_t((q & 3) << (2 * ((i % 128) / 32)));
            blk[i % 32] |= uint8_t((q >> 2) << (i / 32));
            val[b * 256 + i] = d * float(sc[i / 16] - 32) * float(q - 4);
          }
        }
        break;
      case DType::IQ4_NL:  // f16 d, 16 bytes of nibbles (Q4_0's order) indexing llama.cpp's kvalues_iq4nl
      case DType::IQ4_XS:  // f16 d, u16 scales_h, scales_l[4], 8 x 16 bytes of nibbles; x = d (ls - 32) kvalues[q]
        for (int64_t b = 0; b < n / (t == DType::IQ4_NL ? 32 : 256); ++b) {
          static constexpr int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
          const bool xs = t == DType::IQ4_XS;
          uint8_t* blk = row + b * (xs ? 136 : 18);
          std::memset(blk, 0, xs ? 136 : 18);
          const float d = float(1 + byte(rng) % 16) / 4096.0f;
          put16(blk, f32_to_f16(d));
          uint16_t scales_h = 0;
          for (int ib = 0; ib < (xs ? 8 : 1); ++ib) {
            const int ls = xs ? byte(rng) & 63 : 33;  // IQ4_NL: d alone (ls - 32 = 1)
            if (xs) {
              blk[4 + ib / 2] |= uint8_t((ls & 15) << (4 * (ib % 2)));
              scales_h = uint16_t(scales_h | ((ls >> 4) << (2 * ib)));
            }
            uint8_t* qs = blk + (xs ? 8 + 16 * ib : 2);
            float* v = val + b * (xs ? 256 : 32) + 32 * ib;
            for (int j = 0; j < 16; ++j) {
              const int lo = byte(rng) & 15, hi = byte(rng) & 15;
              qs[j] = uint8_t(lo | (hi << 4));
              v[j] = d * float(ls - 32) * float(kv[lo]);
              v[j + 16] = d * float(ls - 32) * float(kv[hi]);
            }
          }
          if (xs) put16(blk + 2, scales_h);
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
