#include "common/dtype.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace tp {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q6_K: return "q6_k";
    case DType::Q5_1: return "q5_1";
    case DType::Q5_K: return "q5_k";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::IQ4_NL: return "iq4_nl";
    case DType::IQ4_XS: return "iq4_xs";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS})
    if (dtype_name(t) == s) return t;
  throw InputError("unknown dtype '" + std::string(name) +
                   "' (valid: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "
                   "iq4_xs)");
}

bool is_runtime_dtype(DType t) { return t == DType::BF16 || t == DType::F32; }

std::string runtime_dtype_error(std::string_view name, std::string_view what) {
  for (std::string_view n : kRuntimeDTypeNames)
    if (n == name) return "";
  return std::string(what) + " must be bf16 or f32, not '" + std::string(name) + "'";
}

DType parse_runtime_dtype(std::string_view name, std::string_view what) {
  const std::string error = runtime_dtype_error(name, what);
  if (!error.empty()) throw InputError(error);
  return parse_dtype(name);
}

bool is_quantized(DType t) { return !(t == DType::F32 || t == DType::F16 || t == DType::BF16); }

BlockF16s block_f16s(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 2};
    case DType::Q3_K: return {108, 1};
    case DType::Q6_K: return {208, 1};
    default: return {0, 1};
  }
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q5_0: return 22;
    case DType::Q4_K: return 144;
    case DType::Q6_K: return 210;
    case DType::Q5_1: return 24;
    case DType::Q5_K: return 176;
    case DType::Q2_K: return 84;
    case DType::Q3_K: return 110;
    case DType::IQ4_NL: return 18;
    case DType::IQ4_XS: return 136;
  }
  return 0;
}

int64_t dtype_block_elems(DType t) {
  if (t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ||
      t == DType::IQ4_XS)
    return kQuantKBlock;
  return is_quantized(t) ? kQuantBlock : 1;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (rounds to >= 65520) -> inf
  if (abs < 0x38800000u) {                                   // result is subnormal or zero
    const float a = std::bit_cast<float>(abs);
    // scale so that one f16 subnormal ulp (2^-24) becomes 1, round to nearest even
    const float scaled = a * 16777216.0f;
    uint32_t q = uint32_t(scaled);
    const float rem = scaled - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return uint16_t(sign | uint16_t(((r >> 23) - 127 + 15) << 10 | ((r >> 13) & 0x3ffu)));
}

namespace {
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
}  // namespace

void q3_k_block_codes(const void* block, uint16_t* d, int8_t scales[16], int8_t codes[256]) {
  const auto* p = static_cast<const uint8_t*>(block);
  const uint8_t* hmask = p;
  const uint8_t* q = p + 32;
  const uint8_t* s = p + 96;  // 12 bytes: low 4 bits of scales 0-15 in bytes 0-7, high 2 bits in bytes 8-11
  *d = load_u16(p + 108);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = int8_t((low | (high << 4)) - 32);
  }
  // Element order (llama.cpp dequantize_row_q3_K): per half of 128, four 2-bit planes (shift 0, 2, 4, 6), each
  // 16 weights from bytes 0-15 then 16 from bytes 16-31; plane k of half h takes its third bit from hmask bit 4h + k.
  int8_t* y = codes;
  for (int h = 0; h < 2; ++h, q += 32)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) *y++ = int8_t(((q[l] >> (2 * k)) & 3) - ((hmask[l] >> (4 * h + k)) & 1 ? 0 : 4));
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  if (n <= 0) return;  // (memcpy's pointers must not be null even for 0 bytes)
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, p, size_t(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(p + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i));
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 34) {
        const float d = f16_to_f32(load_u16(p));
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * float(int8_t(p[2 + j]));
      }
      return;
    case DType::Q4_0:
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 18) {
        const float d = f16_to_f32(load_u16(p));
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = d * float(int(p[2 + j] & 0x0f) - 8);
          dst[b * 32 + j + 16] = d * float(int(p[2 + j] >> 4) - 8);
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 20) {
        const float d = f16_to_f32(load_u16(p));
        const float m = f16_to_f32(load_u16(p + 2));
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = d * float(p[4 + j] & 0x0f) + m;
          dst[b * 32 + j + 16] = d * float(p[4 + j] >> 4) + m;
        }
      }
      return;
    case DType::Q5_0:
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 22) {
        const float d = f16_to_f32(load_u16(p));
        uint32_t qh;
        std::memcpy(&qh, p + 2, 4);
        for (int j = 0; j < 16; ++j) {
          const int h0 = int(((qh >> (j + 0)) << 4) & 0x10), h1 = int((qh >> (j + 12)) & 0x10);
          dst[b * 32 + j] = float(((p[6 + j] & 0x0f) | h0) - 16) * d;
          dst[b * 32 + j + 16] = float(((p[6 + j] >> 4) | h1) - 16) * d;
        }
      }
      return;
    case DType::Q5_1:  // llama.cpp dequantize_row_q5_1
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 24) {
        const float d = f16_to_f32(load_u16(p)), m = f16_to_f32(load_u16(p + 2));
        uint32_t qh;
        std::memcpy(&qh, p + 4, 4);
        for (int j = 0; j < 16; ++j) {
          const int h0 = int(((qh >> (j + 0)) << 4) & 0x10), h1 = int((qh >> (j + 12)) & 0x10);
          dst[b * 32 + j] = float((p[8 + j] & 0x0f) | h0) * d + m;
          dst[b * 32 + j + 16] = float((p[8 + j] >> 4) | h1) * d + m;
        }
      }
      return;
    case DType::Q4_K:  // llama.cpp dequantize_row_q4_K / dequantize_row_q5_K: Q5_K adds qh, a fifth bit a weight
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const int64_t bb = dtype_block_bytes(t);
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += bb) {
        const float d = f16_to_f32(load_u16(p)), dmin = f16_to_f32(load_u16(p + 2));
        const uint8_t* scales = p + 4;
        const uint8_t* qh = p + 16;  // Q5_K only
        const uint8_t* q = p + (five ? 48 : 16);
        float* y = dst + b * kQuantKBlock;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2, u1 <<= 2, u2 <<= 2) {
          int sc, m;
          q4_k_scale_min(is + 0, scales, &sc, &m);
          const float d1 = d * float(sc), m1 = dmin * float(m);
          q4_k_scale_min(is + 1, scales, &sc, &m);
          const float d2 = d * float(sc), m2 = dmin * float(m);
          for (int l = 0; l < 32; ++l) *y++ = d1 * float((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
          for (int l = 0; l < 32; ++l) *y++ = d2 * float((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        }
      }
      return;
    }
    case DType::Q2_K:  // llama.cpp dequantize_row_q2_K
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 84) {
        const uint8_t* sc = p;
        const uint8_t* q = p + 16;
        const float d = f16_to_f32(load_u16(p + 80)), dmin = f16_to_f32(load_u16(p + 82));
        float* y = dst + b * kQuantKBlock;
        for (int h = 0, is = 0; h < 2; ++h, q += 32)
          for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; ++half, ++is) {
              const float dl = d * float(sc[is] & 0xF), ml = dmin * float(sc[is] >> 4);
              for (int l = 0; l < 16; ++l) *y++ = dl * float((q[16 * half + l] >> shift) & 3) - ml;
            }
      }
      return;
    case DType::Q3_K:  // llama.cpp dequantize_row_q3_K
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 110) {
        uint16_t dh;
        int8_t scales[16], codes[256];
        q3_k_block_codes(p, &dh, scales, codes);
        const float d = f16_to_f32(dh);
        float* y = dst + b * kQuantKBlock;
        for (int i = 0; i < 256; ++i) y[i] = d * float(scales[i / 16]) * float(codes[i]);
      }
      return;
    case DType::IQ4_NL:  // llama.cpp dequantize_row_iq4_nl
      for (int64_t b = 0; b < n / kQuantBlock; ++b, p += 18) {
        const float d = f16_to_f32(load_u16(p));
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = d * float(kIq4Values[p[2 + j] & 0xF]);
          dst[b * 32 + j + 16] = d * float(kIq4Values[p[2 + j] >> 4]);
        }
      }
      return;
    case DType::IQ4_XS:  // llama.cpp dequantize_row_iq4_xs
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 136) {
        const float d = f16_to_f32(load_u16(p));
        const uint16_t scales_h = load_u16(p + 2);
        const uint8_t* scales_l = p + 4;
        const uint8_t* q = p + 8;
        float* y = dst + b * kQuantKBlock;
        for (int ib = 0; ib < 8; ++ib, q += 16, y += 32) {
          const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
          const float dl = d * float(ls - 32);
          for (int j = 0; j < 16; ++j) {
            y[j] = dl * float(kIq4Values[q[j] & 0xF]);
            y[j + 16] = dl * float(kIq4Values[q[j] >> 4]);
          }
        }
      }
      return;
    case DType::Q6_K:  // llama.cpp dequantize_row_q6_K
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_to_f32(load_u16(p + 208));
        float* y = dst + b * kQuantKBlock;
        for (int nn = 0; nn < 256; nn += 128, y += 128, ql += 64, qh += 32, sc += 8) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = int((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = int((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * float(sc[is + 0]) * float(q1);
            y[l + 32] = d * float(sc[is + 2]) * float(q2);
            y[l + 64] = d * float(sc[is + 4]) * float(q3);
            y[l + 96] = d * float(sc[is + 6]) * float(q4);
          }
        }
      }
      return;
  }
}

}  // namespace tp
