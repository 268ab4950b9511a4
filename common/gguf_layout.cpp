// GGUF row layouts (see gguf_layout.h).
#include "common/gguf_layout.h"

#include <algorithm>
#include <cstring>

namespace tp {

const char* gguf_layout_name(GgufLayout l) {
  switch (l) {
    case GgufLayout::File: return "file";
    case GgufLayout::Q8_0Quads: return "q8_0_quads";
  }
  return "?";
}

namespace {

// Byte offset, in a Q8_0Quads row, of weight e (0..31) of block b; nb blocks a row.
int64_t quad_code_offset(int64_t b, int e, int64_t nb) {
  const int64_t q = b / 4, j = b % 4, k = std::min<int64_t>(4, nb - 4 * q);
  return 128 * q + (e < 16 ? 16 * j + e : 16 * k + 16 * j + (e - 16));
}

}  // namespace

void q8_0_row_to_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = in + 34 * b;
    std::memcpy(out + 32 * nb + 2 * b, blk, 2);
    for (int e = 0; e < 32; ++e) out[quad_code_offset(b, e, nb)] = uint8_t(blk[2 + e] ^ 0x80u);
  }
}

void q8_0_row_from_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = out + 34 * b;
    std::memcpy(blk, in + 32 * nb + 2 * b, 2);
    for (int e = 0; e < 32; ++e) blk[2 + e] = uint8_t(in[quad_code_offset(b, e, nb)] ^ 0x80u);
  }
}

}  // namespace tp
