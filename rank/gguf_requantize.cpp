// GGUF rows into the block type they are held in (see gguf_requantize.h).
#include "rank/gguf_requantize.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

// One Q6_K super-block (210 bytes: ql[128], qh[64], int8 scales[16], f16 d) from d's F16 bits, 16 sub-block scales
// and 256 codes in [-32, 31]: x_i = d * scales[i / 16] * codes[i] (llama.cpp's dequantize_row_q6_K layout).
void pack_q6_k_block(uint16_t d, const int8_t scales[16], const int8_t codes[256], uint8_t* out) {
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
    const int8_t* c = codes + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int u1 = c[l] + 32, u2 = c[l + 32] + 32, u3 = c[l + 64] + 32, u4 = c[l + 96] + 32;
      ql[l] = uint8_t((u1 & 0xF) | ((u3 & 0xF) << 4));
      ql[l + 32] = uint8_t((u2 & 0xF) | ((u4 & 0xF) << 4));
      qh[l] = uint8_t((u1 >> 4) | ((u2 >> 4) << 2) | ((u3 >> 4) << 4) | ((u4 >> 4) << 6));
    }
  }
  std::memcpy(out + 192, scales, 16);
  std::memcpy(out + 208, &d, 2);
}

}  // namespace

void requantize_gguf_row(DType t, const void* src, void* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::Q3_K:
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 110, out += 210) {
        uint16_t d;
        int8_t scales[16], codes[256];
        q3_k_block_codes(p, &d, scales, codes);
        pack_q6_k_block(d, scales, codes, out);
      }
      return;
    case DType::IQ4_XS:  // each 32-weight sub-block an IQ4_NL block: d' = F16(d (ls − 32)), the same 16 nibble bytes
      for (int64_t b = 0; b < n / kQuantKBlock; ++b, p += 136) {
        uint16_t dh, scales_h;
        std::memcpy(&dh, p, 2);
        std::memcpy(&scales_h, p + 2, 2);
        const float d = f16_to_f32(dh);
        for (int ib = 0; ib < 8; ++ib, out += 18) {
          const int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
          const uint16_t d1 = f32_to_f16(d * float(ls - 32));
          std::memcpy(out, &d1, 2);
          std::memcpy(out + 2, p + 8 + 16 * ib, 16);
        }
      }
      return;
    default:
      throw Error("requantize_gguf_row: " + std::string(dtype_name(t)) + " is kept as it is, not requantized");
  }
}

}  // namespace tp
