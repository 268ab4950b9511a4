// GGUF row layouts (see gguf_layout.h).
#include "common/gguf_layout.h"

#include <algorithm>
#include <cstring>

namespace tp {

const char* gguf_layout_name(GgufLayout l) {
  switch (l) {
    case GgufLayout::File: return "file";
    case GgufLayout::Q8_0Quads: return "q8_0_quads";
    case GgufLayout::Q5_0Quads: return "q5_0_quads";
  }
  return "?";
}

namespace {

// Where, in a Q8_0Quads row of nb blocks, block b's scale and its weights 0..15 (lo) and 16..31 (hi) start.
void quad_offsets(int64_t b, int64_t nb, int64_t* scale, int64_t* lo, int64_t* hi) {
  const int64_t q = b / 4, j = b % 4, k = std::min<int64_t>(4, nb - 4 * q);
  *scale = 136 * q + 2 * j;
  *lo = 136 * q + 2 * k + 16 * j;
  *hi = 136 * q + 2 * k + 16 * k + 16 * j;
}

// 16 bytes from src to dst, each XOR 0x80 (int8 code <-> unsigned code + 128).
void copy_flip16(const uint8_t* src, uint8_t* dst) {
  uint64_t v[2];
  std::memcpy(v, src, 16);
  v[0] ^= 0x8080808080808080ull;
  v[1] ^= 0x8080808080808080ull;
  std::memcpy(dst, v, 16);
}

// Where, in a Q5_0Quads row of nb blocks, block b's scale, the low and high halves of its qh and its 16
// nibble bytes start.
void q5_quad_offsets(int64_t b, int64_t nb, int64_t* scale, int64_t* qh_lo, int64_t* qh_hi, int64_t* qs) {
  const int64_t q = b / 4, j = b % 4, k = std::min<int64_t>(4, nb - 4 * q);
  *scale = 88 * q + 2 * j;
  *qh_lo = 88 * q + 2 * k + 2 * j;
  *qh_hi = 88 * q + 4 * k + 2 * j;
  *qs = 88 * q + 6 * k + 16 * j;
}

}  // namespace

void q8_0_row_to_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = in + 34 * b;
    int64_t sc, lo, hi;
    quad_offsets(b, nb, &sc, &lo, &hi);
    std::memcpy(out + sc, blk, 2);
    copy_flip16(blk + 2, out + lo);
    copy_flip16(blk + 18, out + hi);
  }
}

void q8_0_row_from_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = out + 34 * b;
    int64_t sc, lo, hi;
    quad_offsets(b, nb, &sc, &lo, &hi);
    std::memcpy(blk, in + sc, 2);
    copy_flip16(in + lo, blk + 2);
    copy_flip16(in + hi, blk + 18);
  }
}

void q5_0_row_to_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = in + 22 * b;  // d (F16), qh (u32, little-endian), qs[16]
    int64_t sc, lo, hi, qs;
    q5_quad_offsets(b, nb, &sc, &lo, &hi, &qs);
    std::memcpy(out + sc, blk, 2);
    std::memcpy(out + lo, blk + 2, 2);
    std::memcpy(out + hi, blk + 4, 2);
    std::memcpy(out + qs, blk + 6, 16);
  }
}

void q5_0_row_from_quads(const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = out + 22 * b;
    int64_t sc, lo, hi, qs;
    q5_quad_offsets(b, nb, &sc, &lo, &hi, &qs);
    std::memcpy(blk, in + sc, 2);
    std::memcpy(blk + 2, in + lo, 2);
    std::memcpy(blk + 4, in + hi, 2);
    std::memcpy(blk + 6, in + qs, 16);
  }
}

void gguf_row_to_file_layout(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out) {
  switch (l) {
    case GgufLayout::Q8_0Quads: q8_0_row_from_quads(in, n_in, out); return;
    case GgufLayout::Q5_0Quads: q5_0_row_from_quads(in, n_in, out); return;
    case GgufLayout::File: break;
  }
}

}  // namespace tp
