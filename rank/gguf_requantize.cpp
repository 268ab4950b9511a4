// GGUF rows into the block type they are held in (see gguf_requantize.h).
#include "rank/gguf_requantize.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace tp {

void requantize_gguf_row(DType t, const void* src, void* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  switch (t) {
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
