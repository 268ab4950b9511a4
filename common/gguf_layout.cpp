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
    case GgufLayout::Q4_0Groups: return "q4_0_groups";
    case GgufLayout::Q8_0Groups: return "q8_0_groups";
    case GgufLayout::Q5_0Groups: return "q5_0_groups";
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

namespace {

// The block bytes of a *Groups layout's format.
int64_t group_block_bytes(GgufLayout l) { return l == GgufLayout::Q4_0Groups ? 18 : l == GgufLayout::Q8_0Groups ? 34 : 22; }

// Block b of a file row <-> its place in the groups row (to_groups: file -> groups; else back).
void group_block(GgufLayout l, const uint8_t* in, int64_t nb, int64_t b, uint8_t* out, bool to_groups) {
  const int64_t B = group_block_bytes(l), G = b / 16, j = b % 16, k = std::min<int64_t>(16, nb - 16 * G);
  uint8_t* grp = nullptr;
  const uint8_t* cgrp = nullptr;
  if (to_groups)
    grp = out + 16 * B * G;
  else
    cgrp = in + 16 * B * G;
  const uint8_t* fblk = to_groups ? in + B * b : nullptr;
  uint8_t* oblk = to_groups ? nullptr : out + B * b;
  // scale
  if (to_groups)
    std::memcpy(grp + 2 * j, fblk, 2);
  else
    std::memcpy(oblk, cgrp + 2 * j, 2);
  if (l == GgufLayout::Q8_0Groups) {
    for (int t = 0; t < 8; ++t)
      for (int i = 0; i < 4; ++i) {
        if (to_groups)
          grp[2 * k + 4 * k * t + 4 * j + i] = uint8_t(fblk[2 + 4 * t + i] ^ 0x80);
        else
          oblk[2 + 4 * t + i] = uint8_t(cgrp[2 * k + 4 * k * t + 4 * j + i] ^ 0x80);
      }
    return;
  }
  const int64_t qs_file = l == GgufLayout::Q4_0Groups ? 2 : 6, codes = l == GgufLayout::Q4_0Groups ? 2 * k : 6 * k;
  for (int v = 0; v < 4; ++v) {
    if (to_groups)
      std::memcpy(grp + codes + 4 * k * v + 4 * j, fblk + qs_file + 4 * v, 4);
    else
      std::memcpy(oblk + qs_file + 4 * v, cgrp + codes + 4 * k * v + 4 * j, 4);
  }
  if (l == GgufLayout::Q5_0Groups) {
    uint32_t qh = 0;
    if (to_groups) std::memcpy(&qh, fblk + 2, 4);
    for (int t = 0; t < 8; ++t)
      for (int i = 0; i < 4; ++i) {
        const int64_t bit = 4 * k * t + 4 * j + i;
        uint8_t* byte = to_groups ? grp + 2 * k + bit / 8 : nullptr;
        if (to_groups) {
          if ((qh >> (4 * t + i)) & 1u) *byte = uint8_t(*byte | (1u << (bit % 8)));
        } else if ((cgrp[2 * k + bit / 8] >> (bit % 8)) & 1u) {
          qh |= 1u << (4 * t + i);
        }
      }
    if (!to_groups) std::memcpy(oblk + 2, &qh, 4);
  }
}

}  // namespace

void gguf_row_to_groups(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  if (l == GgufLayout::Q5_0Groups)  // the fifth-bit masks are OR-ed in
    for (int64_t G = 0; 16 * G < nb; ++G) {
      const int64_t k = std::min<int64_t>(16, nb - 16 * G);
      std::memset(out + 16 * 22 * G + 2 * k, 0, size_t(4 * k));
    }
  for (int64_t b = 0; b < nb; ++b) group_block(l, in, nb, b, out, true);
}

void gguf_row_from_groups(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out) {
  const int64_t nb = n_in / 32;
  for (int64_t b = 0; b < nb; ++b) group_block(l, in, nb, b, out, false);
}

namespace {

// One row between the file layout and l, either way (to_file: from l to the file's; File: nothing to do).
void convert_row(GgufLayout l, bool to_file, const uint8_t* in, int64_t n_in, uint8_t* out) {
  switch (l) {
    case GgufLayout::Q8_0Quads: (to_file ? q8_0_row_from_quads : q8_0_row_to_quads)(in, n_in, out); return;
    case GgufLayout::Q5_0Quads: (to_file ? q5_0_row_from_quads : q5_0_row_to_quads)(in, n_in, out); return;
    case GgufLayout::Q4_0Groups:
    case GgufLayout::Q8_0Groups:
    case GgufLayout::Q5_0Groups: (to_file ? gguf_row_from_groups : gguf_row_to_groups)(l, in, n_in, out); return;
    case GgufLayout::File: break;
  }
}

}  // namespace

void gguf_row_to_file_layout(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out) {
  convert_row(l, true, in, n_in, out);
}

void gguf_row_from_file_layout(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out) {
  convert_row(l, false, in, n_in, out);
}

}  // namespace tp
