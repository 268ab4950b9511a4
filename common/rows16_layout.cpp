// 4-bit weight layouts (see rows16_layout.h).
#include "common/rows16_layout.h"

#include <cstring>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

constexpr int64_t kRowsBlock = 16;  // rows a Rows16 block
constexpr int64_t kRows64 = 64;     // rows (and columns) a Rows64 block
constexpr int64_t kChunkCols = 8;   // columns a 64-byte chunk of a block

int64_t row_blocks(int64_t n_out) { return (n_out + kRowsBlock - 1) / kRowsBlock; }

// The 4 Rows bytes of 8 columns (byte j: column 2j low nibble, 2j + 1 high) <-> a row's two Rows16 words (word t
// nibble n: column 2n + t).
void bytes_to_words(const uint8_t* b, uint16_t* w0, uint16_t* w1) {
  uint16_t lo = 0, hi = 0;
  for (int n = 0; n < 4; ++n) {
    lo = uint16_t(lo | (b[n] & 15) << (4 * n));
    hi = uint16_t(hi | (b[n] >> 4) << (4 * n));
  }
  *w0 = lo;
  *w1 = hi;
}

void words_to_bytes(uint16_t w0, uint16_t w1, uint8_t* b) {
  for (int n = 0; n < 4; ++n) b[n] = uint8_t(((w0 >> (4 * n)) & 15) | ((w1 >> (4 * n)) & 15) << 4);
}

uint16_t load16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
void store16(uint16_t v, uint8_t* p) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// A per-row array of n entries a row ([n_out][n], Rows) into Rows16 order ([row blocks][n][16], padded with pad)
// and back.
template <class T>
std::vector<T> to_rows16(const std::vector<T>& a, int64_t n_out, int64_t n, T pad) {
  std::vector<T> o(size_t(row_blocks(n_out) * kRowsBlock * n), pad);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t g = 0; g < n; ++g) o[size_t(((r / kRowsBlock) * n + g) * kRowsBlock + r % kRowsBlock)] = a[size_t(r * n + g)];
  return o;
}

template <class T>
std::vector<T> from_rows16(const std::vector<T>& a, int64_t n_out, int64_t n) {
  std::vector<T> o(size_t(n_out * n));
  for (int64_t r = 0; r < n_out; ++r) rows16_entries(a.data(), n, r, o.data() + r * n);
  return o;
}

// GGUF Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_0 / Q5_1 / Q5_K / Q6_K / IQ4_NL / Q2_K / Q3_K: the formats Rows16 holds (IQ4_NL
// as Q4_0: the same blocks).
bool is_gguf16(WeightFormat f) {
  return f == WeightFormat::GgufQ4_0 || f == WeightFormat::GgufQ4_1 || f == WeightFormat::GgufQ8_0 ||
         f == WeightFormat::GgufQ4_K || f == WeightFormat::GgufQ5_0 || f == WeightFormat::GgufQ5_1 ||
         f == WeightFormat::GgufQ5_K || f == WeightFormat::GgufQ6_K || f == WeightFormat::GgufIq4Nl ||
         f == WeightFormat::GgufQ2_K || f == WeightFormat::GgufQ3_K;
}

// Q6_K in Rows16: a 256-column block's 6-bit codes q (llama.cpp's dequantize_row_q6_K: column c, half n = c / 128,
// group g = c % 128 / 32, l = c % 32: low 4 bits in ql[64n + 32 (g % 2) + l] (high nibble for g ≥ 2), high 2 bits
// in bits 2g, 2g + 1 of qh[32n + l] at 128; int8 scale sc[c / 16] at 192; F16 d at 208) in and out of the row
// block's data (32 chunks of 64 bytes) and 1312 scale bytes: 16 d (F16), then 16 sub-blocks × 16 rows' sc, then
// per 32 columns two 64-byte planes of the high bits (plane p: bit 4 + p of q).
int q6_k_code(const uint8_t* blk, int c) {
  const int n = c / 128, g = c % 128 / 32, l = c % 32;
  const int lo = (blk[64 * n + 32 * (g % 2) + l] >> (g >= 2 ? 4 : 0)) & 15;
  return lo | ((blk[128 + 32 * n + l] >> (2 * g)) & 3) << 4;
}

void q6_k_block_to_rows16(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block) {
  std::memcpy(sb_block + 2 * i, blk + 208, 2);
  for (int s = 0; s < 16; ++s) sb_block[32 + 16 * s + i] = blk[192 + s];
  for (int c = 0; c < 256; ++c) {
    const int q = q6_k_code(blk, c), ch = c / 8, h = (c % 8) / 4, j = c % 4, g = c / 32, cc = (c % 32) / 8;
    uint8_t& code = data_block[ch * 64 + 4 * i + j];
    code = uint8_t(code | (q & 15) << (4 * h));
    for (int p = 0; p < 2; ++p) {
      uint8_t& plane = sb_block[288 + g * 128 + p * 64 + 4 * i + j];
      plane = uint8_t(plane | ((q >> (4 + p)) & 1) << (2 * cc + h));
    }
  }
}

void q6_k_block_from_rows16(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk) {
  std::memset(blk, 0, 208);
  std::memcpy(blk + 208, sb_block + 2 * i, 2);
  for (int s = 0; s < 16; ++s) blk[192 + s] = sb_block[32 + 16 * s + i];
  for (int c = 0; c < 256; ++c) {
    const int ch = c / 8, h = (c % 8) / 4, j = c % 4, g32 = c / 32, cc = (c % 32) / 8;
    int q = (data_block[ch * 64 + 4 * i + j] >> (4 * h)) & 15;
    for (int p = 0; p < 2; ++p) q |= ((sb_block[288 + g32 * 128 + p * 64 + 4 * i + j] >> (2 * cc + h)) & 1) << (4 + p);
    const int n = c / 128, g = c % 128 / 32, l = c % 32;
    blk[64 * n + 32 * (g % 2) + l] = uint8_t(blk[64 * n + 32 * (g % 2) + l] | (q & 15) << (g >= 2 ? 4 : 0));
    blk[128 + 32 * n + l] = uint8_t(blk[128 + 32 * n + l] | (q >> 4) << (2 * g));
  }
}

// The inverse of q4_k_scale_min (common/dtype.h) over all 8 sub-blocks: the 12 scale bytes, all 96 bits.
void q4_k_pack_scales(const int* sc, const int* m, uint8_t* q) {
  for (int i = 0; i < 4; ++i) {
    q[i] = uint8_t((sc[i] & 63) | (sc[i + 4] >> 4) << 6);
    q[i + 4] = uint8_t((m[i] & 63) | (m[i + 4] >> 4) << 6);
    q[i + 8] = uint8_t((sc[i + 4] & 15) | (m[i + 4] & 15) << 4);
  }
}

// Q5_K in Rows16: a 256-column block's 5-bit codes q (llama.cpp's dequantize_row_q5_K: column c, sub-block s = c / 32,
// l = c % 32: low 4 bits in qs[32 (s / 2) + l] at 48 (high nibble for odd s), the fifth bit s of qh[l] at 16; the
// 6-bit scales and mins at 4 as Q4_K's; F16 d, dmin at 0, 2) in and out of the row block's data (32 chunks of 64
// bytes, codes as Q5_0's) and 832 scale bytes: 16 d, 16 dmin (F16), 8 sub-blocks × 16 rows' sc | m << 8 (16-bit),
// then per 32 columns a 64-byte plane of the fifth bits as Q5_0's.
constexpr int kQ5KEntries = 320;  // a row block's d, dmin and sc | m << 8 bytes, before its planes

int q5_k_code(const uint8_t* blk, int c) {
  const int s = c / 32, l = c % 32, b = blk[48 + 32 * (s / 2) + l];
  return (s % 2 ? b >> 4 : b & 15) | ((blk[16 + l] >> s) & 1) << 4;
}

void q5_k_block_to_rows16(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block) {
  std::memcpy(sb_block + 2 * i, blk, 2);
  std::memcpy(sb_block + 32 + 2 * i, blk + 2, 2);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    q4_k_scale_min(s, blk + 4, &sc, &m);
    store16(uint16_t(sc | m << 8), sb_block + 64 + 32 * s + 2 * i);
  }
  for (int c = 0; c < 256; ++c) {
    const int q = q5_k_code(blk, c), ch = c / 8, h = (c % 8) / 4, j = c % 4, g = c / 32, cc = (c % 32) / 8;
    uint8_t& code = data_block[ch * 64 + 4 * i + j];
    code = uint8_t(code | (q & 15) << (4 * h));
    uint8_t& plane = sb_block[kQ5KEntries + g * 64 + 4 * i + j];
    plane = uint8_t(plane | (q >> 4) << (2 * cc + h));
  }
}

void q5_k_block_from_rows16(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk) {
  std::memset(blk, 0, 176);
  std::memcpy(blk, sb_block + 2 * i, 2);
  std::memcpy(blk + 2, sb_block + 32 + 2 * i, 2);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    const uint16_t e = load16(sb_block + 64 + 32 * s + 2 * i);
    sc[s] = e & 0xff, m[s] = e >> 8;
  }
  q4_k_pack_scales(sc, m, blk + 4);
  for (int c = 0; c < 256; ++c) {
    const int ch = c / 8, h = (c % 8) / 4, j = c % 4, g = c / 32, cc = (c % 32) / 8, s = c / 32, l = c % 32;
    const int lo = (data_block[ch * 64 + 4 * i + j] >> (4 * h)) & 15;
    const int hi = (sb_block[kQ5KEntries + g * 64 + 4 * i + j] >> (2 * cc + h)) & 1;
    uint8_t& b = blk[48 + 32 * (s / 2) + l];
    b = uint8_t(b | lo << (s % 2 ? 4 : 0));
    blk[16 + l] = uint8_t(blk[16 + l] | hi << s);
  }
}

// Q2_K in Rows16: a 256-column block's 2-bit codes q (llama.cpp's dequantize_row_q2_K: column c in bits
// 2 ((c % 128) / 32) of qs[32 (c / 128) + c % 32] at 16; scales[s] (scale | min << 4) of the 16-column sub-block s at
// 0; F16 d, dmin at 80, 82) in and out of the row block's data (16 lines of 64 bytes, one a sub-block: byte 4i + j,
// bits 2k, 2k + 1 = row i's column 16 s + 4k + j) and 320 scale bytes: 16 d, 16 dmin (F16), then 16 sub-blocks × 16
// rows' scale bytes as the file's.
int q2_k_code(const uint8_t* blk, int c) { return (blk[16 + 32 * (c / 128) + c % 32] >> (2 * ((c % 128) / 32))) & 3; }

void q2_k_block_to_rows16(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block) {
  std::memcpy(sb_block + 2 * i, blk + 80, 2);
  std::memcpy(sb_block + 32 + 2 * i, blk + 82, 2);
  for (int s = 0; s < 16; ++s) sb_block[64 + 16 * s + i] = blk[s];
  for (int c = 0; c < 256; ++c) {
    uint8_t& code = data_block[(c / 16) * 64 + 4 * i + c % 4];
    code = uint8_t(code | q2_k_code(blk, c) << (2 * ((c % 16) / 4)));
  }
}

void q2_k_block_from_rows16(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk) {
  std::memset(blk, 0, 84);
  std::memcpy(blk + 80, sb_block + 2 * i, 2);
  std::memcpy(blk + 82, sb_block + 32 + 2 * i, 2);
  for (int s = 0; s < 16; ++s) blk[s] = sb_block[64 + 16 * s + i];
  for (int c = 0; c < 256; ++c) {
    const int q = (data_block[(c / 16) * 64 + 4 * i + c % 4] >> (2 * ((c % 16) / 4))) & 3;
    uint8_t& b = blk[16 + 32 * (c / 128) + c % 32];
    b = uint8_t(b | q << (2 * ((c % 128) / 32)));
  }
}

// Q3_K in Rows16: a 256-column block's codes u = q + 4 in [0, 7] (q3_k_block_codes, common/dtype.h), their low 2 bits
// in Q2_K's lines, their third bits in a 32-byte line a sub-block (byte 4 (i % 8) + j, bit 4 (i / 8) + k: row i's
// column 16 s + 4k + j), and 800 scale bytes: 16 d (F16), 16 sub-blocks × 16 rows' int8 scale (sc − 32) at 32 + 16 s +
// i, then the 16 third-bit lines at 288 + 32 s.
constexpr int kQ3KHigh = 288;  // where a row block's third-bit lines start in its scale bytes

void q3_k_block_to_rows16(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block) {
  uint16_t d;
  int8_t scales[16], codes[256];
  q3_k_block_codes(blk, &d, scales, codes);
  store16(d, sb_block + 2 * i);
  for (int s = 0; s < 16; ++s) sb_block[32 + 16 * s + i] = uint8_t(scales[s]);
  for (int c = 0; c < 256; ++c) {
    const int u = codes[c] + 4, k = (c % 16) / 4, j = c % 4;
    uint8_t& code = data_block[(c / 16) * 64 + 4 * i + j];
    code = uint8_t(code | (u & 3) << (2 * k));
    uint8_t& hi = sb_block[kQ3KHigh + 32 * (c / 16) + 4 * (i % 8) + j];
    hi = uint8_t(hi | (u >> 2) << (4 * (i / 8) + k));
  }
}

void q3_k_block_from_rows16(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk) {
  std::memset(blk, 0, 110);
  std::memcpy(blk + 108, sb_block + 2 * i, 2);
  for (int s = 0; s < 16; ++s) {  // 6-bit sc: low 4 bits in byte s % 8 (high nibble from 8 on), high 2 in 8 + s % 4
    const int u = int(int8_t(sb_block[32 + 16 * s + i])) + 32;
    blk[96 + s % 8] = uint8_t(blk[96 + s % 8] | (u & 15) << (s < 8 ? 0 : 4));
    blk[104 + s % 4] = uint8_t(blk[104 + s % 4] | (u >> 4) << (2 * (s / 4)));
  }
  for (int c = 0; c < 256; ++c) {
    const int k = (c % 16) / 4, j = c % 4;
    const int lo = (data_block[(c / 16) * 64 + 4 * i + j] >> (2 * k)) & 3;
    const int hb = (sb_block[kQ3KHigh + 32 * (c / 16) + 4 * (i % 8) + j] >> (4 * (i / 8) + k)) & 1;
    uint8_t& q = blk[32 + 32 * (c / 128) + c % 32];  // llama.cpp's order, as Q2_K's; the third bit in hmask
    q = uint8_t(q | lo << (2 * ((c % 128) / 32)));
    blk[c % 32] = uint8_t(blk[c % 32] | hb << (c / 32));
  }
}

// GGUF Q5_0 / Q5_1 in Rows16 (rows16_layout.h): a block's 32 five-bit codes q (weight j: the low nibble of byte
// kQs + j % 16, high from 16 on; its fifth bit: bit j of the 4 bytes at kQh) in and out of the row block's data
// (codes) and scale_bytes (d; Q5_1: then m; then the fifth-bit plane). data_block: the block's first chunk (4 chunks of
// 64 bytes, 16 rows); sb_block: its 96 (Q5_1: 128) bytes of scale_bytes; i: the row in the row block.
template <bool kMin>
void q5_block_to_rows16(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block) {
  constexpr int kQh = kMin ? 4 : 2, kQs = kQh + 4, kPlane = kMin ? 64 : 32;
  std::memcpy(sb_block + 2 * i, blk, 2);
  if (kMin) std::memcpy(sb_block + 32 + 2 * i, blk + 2, 2);
  const uint32_t qh = uint32_t(blk[kQh] | blk[kQh + 1] << 8 | blk[kQh + 2] << 16) | uint32_t(blk[kQh + 3]) << 24;
  for (int k = 0; k < 32; ++k) {
    const int q = ((k < 16 ? blk[kQs + k] : blk[kQs + k - 16] >> 4) & 15) | int((qh >> k) & 1) << 4;
    const int c = k / 8, h = (k % 8) / 4, j = k % 4;
    uint8_t& code = data_block[c * 64 + 4 * i + j];
    code = uint8_t(code | (q & 15) << (4 * h));
    sb_block[kPlane + 4 * i + j] = uint8_t(sb_block[kPlane + 4 * i + j] | (q >> 4) << (2 * c + h));
  }
}

template <bool kMin>
void q5_block_from_rows16(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk) {
  constexpr int kQh = kMin ? 4 : 2, kQs = kQh + 4, kPlane = kMin ? 64 : 32;
  std::memcpy(blk, sb_block + 2 * i, 2);
  if (kMin) std::memcpy(blk + 2, sb_block + 32 + 2 * i, 2);
  uint32_t qh = 0;
  std::memset(blk + kQs, 0, 16);
  for (int k = 0; k < 32; ++k) {
    const int c = k / 8, h = (k % 8) / 4, j = k % 4;
    const int lo = (data_block[c * 64 + 4 * i + j] >> (4 * h)) & 15;
    const int hi = (sb_block[kPlane + 4 * i + j] >> (2 * c + h)) & 1;
    qh |= uint32_t(hi) << k;
    blk[kQs + k % 16] = uint8_t(blk[kQs + k % 16] | lo << (k < 16 ? 0 : 4));
  }
  for (int b = 0; b < 4; ++b) blk[kQh + b] = uint8_t(qh >> (8 * b));
}

// A file block of Q4_0 / Q4_1 / Q8_0 / Q4_K / IQ4_NL: its columns, bytes, 16-bit entries in the per-row array and code
// bytes in the Rows order (4-bit: two a byte, column 2j low; Q8_0: q + 128 a byte).
struct GgufBlock {
  int64_t cols, bytes, entries, code_bytes;
};

GgufBlock gguf_block(WeightFormat f) {
  switch (f) {
    case WeightFormat::GgufQ4_0:
    case WeightFormat::GgufIq4Nl: return {32, 18, 1, 16};
    case WeightFormat::GgufQ4_1: return {32, 20, 2, 16};
    case WeightFormat::GgufQ8_0: return {32, 34, 1, 32};
    case WeightFormat::GgufQ4_K: return {256, 144, 10, 128};
    default: throw Error("rows16: no per-row entries for " + std::string(weight_format_name(f)));
  }
}

// Q5_0 / Q5_1 / Q5_K / Q6_K / Q3_K (their high bits in planes, rows16_layout.h) and Q2_K (its scale bytes as the
// file's): a block's columns, file bytes, scale bytes and code bytes a block of 16 rows; and one file block into / out
// of the row block's data and scale bytes at row i.
bool is_planar(WeightFormat f) {
  return f == WeightFormat::GgufQ5_0 || f == WeightFormat::GgufQ5_1 || f == WeightFormat::GgufQ5_K ||
         f == WeightFormat::GgufQ6_K || f == WeightFormat::GgufQ2_K || f == WeightFormat::GgufQ3_K;
}

struct PlanarBlock {
  int64_t cols, bytes, sb_bytes, code_bytes;
  void (*to_rows16)(const uint8_t* blk, int64_t i, uint8_t* data_block, uint8_t* sb_block);
  void (*from_rows16)(const uint8_t* data_block, const uint8_t* sb_block, int64_t i, uint8_t* blk);
};

PlanarBlock planar_block(WeightFormat f) {
  if (f == WeightFormat::GgufQ6_K) return {256, 210, 1312, 2048, q6_k_block_to_rows16, q6_k_block_from_rows16};
  if (f == WeightFormat::GgufQ5_K)
    return {256, 176, kQ5KEntries + 512, 2048, q5_k_block_to_rows16, q5_k_block_from_rows16};
  if (f == WeightFormat::GgufQ2_K) return {256, 84, 320, 1024, q2_k_block_to_rows16, q2_k_block_from_rows16};
  if (f == WeightFormat::GgufQ3_K)
    return {256, 110, kQ3KHigh + 512, 1024, q3_k_block_to_rows16, q3_k_block_from_rows16};
  if (f == WeightFormat::GgufQ5_1) return {32, 24, 128, 256, q5_block_to_rows16<true>, q5_block_from_rows16<true>};
  return {32, 22, 96, 256, q5_block_to_rows16<false>, q5_block_from_rows16<false>};
}

// One file block -> its entries (Q4_0: d; Q4_1: d, m; Q8_0: d; Q4_K: d, dmin, then sc | m << 8 of each 32-column
// sub-block) and its codes in the Rows order; and back.
void gguf_block_split(WeightFormat f, const uint8_t* blk, uint16_t* ent, uint8_t* codes) {
  if (f == WeightFormat::GgufQ8_0) {
    ent[0] = load16(blk);
    for (int j = 0; j < 32; ++j) codes[j] = uint8_t(blk[2 + j] ^ 0x80);
  } else if (f == WeightFormat::GgufQ4_K) {  // 4 chunks of 64: byte 16 + 32c + l holds column 64c + l, 64c + 32 + l
    ent[0] = load16(blk);
    ent[1] = load16(blk + 2);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      q4_k_scale_min(s, blk + 4, &sc, &m);
      ent[2 + s] = uint16_t(sc | m << 8);
    }
    auto code = [&](int c) { const int l = c % 64, q = blk[16 + 32 * (c / 64) + l % 32]; return l < 32 ? q & 15 : q >> 4; };
    for (int k = 0; k < 128; ++k) codes[k] = uint8_t(code(2 * k) | code(2 * k + 1) << 4);
  } else {  // Q4_0 / Q4_1: byte 2e + j holds column j (low nibble) and 16 + j (high)
    const int e = f == WeightFormat::GgufQ4_1 ? 2 : 1;
    for (int k = 0; k < e; ++k) ent[k] = load16(blk + 2 * k);
    auto code = [&](int c) { return c < 16 ? blk[2 * e + c] & 15 : blk[2 * e + c - 16] >> 4; };
    for (int j = 0; j < 16; ++j) codes[j] = uint8_t(code(2 * j) | code(2 * j + 1) << 4);
  }
}

void gguf_block_join(WeightFormat f, const uint16_t* ent, const uint8_t* codes, uint8_t* blk) {
  auto code = [&](int c) { return (codes[c / 2] >> (4 * (c % 2))) & 15; };
  if (f == WeightFormat::GgufQ8_0) {
    store16(ent[0], blk);
    for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(codes[j] ^ 0x80);
  } else if (f == WeightFormat::GgufQ4_K) {
    store16(ent[0], blk);
    store16(ent[1], blk + 2);
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) sc[s] = ent[2 + s] & 0xff, m[s] = ent[2 + s] >> 8;
    q4_k_pack_scales(sc, m, blk + 4);
    for (int k = 0; k < 128; ++k) {
      const int c = 64 * (k / 32) + k % 32;
      blk[16 + k] = uint8_t(code(c) | code(c + 32) << 4);
    }
  } else {
    const int e = f == WeightFormat::GgufQ4_1 ? 2 : 1;
    for (int k = 0; k < e; ++k) store16(ent[k], blk + 2 * k);
    for (int j = 0; j < 16; ++j) blk[2 * e + j] = uint8_t(code(j) | code(16 + j) << 4);
  }
}

// Entries a row of the per-row arrays (Int4 groups, FP4 blocks, GGUF 16-bit d / m entries; none for the planar ones).
int64_t row_entries(const PackedWeight& w) {
  if (w.format == WeightFormat::Mxfp4) return w.n_in / 32;
  if (w.format == WeightFormat::Nvfp4) return w.n_in / 16;
  if (is_planar(w.format)) return 0;
  if (is_gguf16(w.format)) return w.n_in / gguf_block(w.format).cols * gguf_block(w.format).entries;
  return w.n_groups();
}

std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& a) {
  std::vector<uint8_t> o(a.size() * 2);
  std::memcpy(o.data(), a.data(), o.size());
  return o;
}

}  // namespace

const char* rows_layout_name(RowsLayout l) {
  return l == RowsLayout::Rows16 ? "rows16" : l == RowsLayout::Rows64 ? "rows64" : "rows";
}

std::string rows64_refusal(const PackedWeight& w) {
  if (w.format != WeightFormat::Int8) return "not an int8 weight";
  if (w.act != ActQuant::Int8Dynamic && w.act != ActQuant::Int8Static) return "activations not quantized to int8";
  if (w.act == ActQuant::Int8Dynamic && w.act_group > 0 && w.act_group < w.n_in) return "activation groups";
  if (w.n_groups() > 1) return "scale groups (not per channel)";
  if (!w.zeros.empty()) return "zero points";
  if (!w.g_idx.empty()) return "g_idx (act-order)";
  if (w.n_out % kRows64 != 0 || w.n_in % kRows64 != 0) return "n_out or n_in is not a multiple of 64";
  return "";
}

namespace {

// Byte offset of (row r, column c) in Rows64 data of n_in columns.
int64_t rows64_at(int64_t n_in, int64_t r, int64_t c) {
  return (r / kRows64) * kRows64 * n_in + (c / kRows64) * kRows64 * kRows64 + (c % kRows64 / 4) * 4 * kRows64 +
         4 * (r % kRows64) + c % 4;
}

// Int8 between Rows and Rows64 (rows64_refusal checked by the caller).
void set_rows64(PackedWeight* w, RowsLayout to) {
  const int64_t n_in = w->n_in;
  AlignedBytes data(w->n_out * n_in);
  for (int64_t r = 0; r < w->n_out; ++r)
    if (to == RowsLayout::Rows64)
      for (int64_t c = 0; c < n_in; c += 4)
        std::memcpy(data.data() + rows64_at(n_in, r, c), w->data.data() + r * n_in + c, 4);
    else
      rows64_codes(w->data.data(), n_in, r, data.data() + r * n_in);
  w->data = std::move(data);
  w->rows_layout = to;
}

}  // namespace

void rows64_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes) {
  for (int64_t c = 0; c < n_in; c += 4) std::memcpy(codes + c, data + rows64_at(n_in, r, c), 4);
}

bool fp4_rows16_scales_ok(const uint8_t* sb, int64_t n, bool mx) {
  for (int64_t k = 0; k < n; ++k)
    if (mx ? sb[k] == 0 || sb[k] == 255 : (sb[k] & 0x7f) == 0x7f) return false;
  return true;
}

std::string rows16_refusal(const PackedWeight& w) {
  const bool mx = w.format == WeightFormat::Mxfp4, fp4 = mx || w.format == WeightFormat::Nvfp4;
  if (is_gguf16(w.format))
    return w.gguf_layout == GgufLayout::File ? "" : std::string("GGUF rows regrouped (") + gguf_layout_name(w.gguf_layout) + ")";
  if (!fp4 && w.format != WeightFormat::Int4)
    return "not an int4, mxfp4, nvfp4, GGUF q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_nl "
           "weight";
  if (w.act != ActQuant::None) return "activation quantization";
  if (w.n_in % 32 != 0) return "n_in is not a multiple of 32";
  if (!fp4 && !w.g_idx.empty()) return "g_idx (act-order)";
  if (!fp4 && w.n_groups() > 1 && w.group_size % 16 != 0) return "groups of a size that is not a multiple of 16";
  if (fp4 && !fp4_rows16_scales_ok(w.scale_bytes.data(), int64_t(w.scale_bytes.size()), mx))
    return mx ? "an E8M0 scale byte 0 or 255" : "an E4M3 scale byte that is NaN";
  return "";
}

void rows16_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes) {
  const int64_t chunks = n_in / kChunkCols;
  const uint8_t* block = data + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
  for (int64_t ch = 0; ch < chunks; ++ch) words_to_bytes(load16(block + ch * 64), load16(block + ch * 64 + 2), codes + ch * 4);
}

void rows16_q8_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes) {
  const int64_t chunks = n_in / 4;
  const uint8_t* block = data + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
  for (int64_t ch = 0; ch < chunks; ++ch) std::memcpy(codes + ch * 4, block + ch * 64, 4);
}

int64_t rows16_gguf_scale_bytes(WeightFormat f, int64_t n_in) {
  if (is_planar(f)) return n_in / planar_block(f).cols * planar_block(f).sb_bytes / kRowsBlock;
  return n_in / gguf_block(f).cols * gguf_block(f).entries * 2;
}

void rows16_gguf_file_row(const PackedWeight& w, int64_t r, uint8_t* out) {
  if (is_planar(w.format)) {
    const PlanarBlock p = planar_block(w.format);
    const int64_t nb = w.n_in / p.cols, rb = r / kRowsBlock;
    for (int64_t b = 0; b < nb; ++b)  // a block of 16 rows: code_bytes, sb_bytes scale bytes
      p.from_rows16(w.data.data() + (rb * nb + b) * p.code_bytes, w.scale_bytes.data() + (rb * nb + b) * p.sb_bytes,
                    r % kRowsBlock, out + b * p.bytes);
    return;
  }
  const bool q8 = w.format == WeightFormat::GgufQ8_0;
  const GgufBlock g = gguf_block(w.format);
  const int64_t nb = w.n_in / g.cols;
  std::vector<uint8_t> codes(size_t(nb * g.code_bytes));
  std::vector<uint16_t> ent(size_t(nb * g.entries));
  if (q8)
    rows16_q8_codes(w.data.data(), w.n_in, r, codes.data());
  else
    rows16_codes(w.data.data(), w.n_in, r, codes.data());
  rows16_entries(reinterpret_cast<const uint16_t*>(w.scale_bytes.data()), nb * g.entries, r, ent.data());
  for (int64_t b = 0; b < nb; ++b)
    gguf_block_join(w.format, ent.data() + b * g.entries, codes.data() + b * g.code_bytes, out + b * g.bytes);
}

void set_rows_layout(PackedWeight* w, RowsLayout to) {
  const bool mx = w->format == WeightFormat::Mxfp4, fp4 = mx || w->format == WeightFormat::Nvfp4;
  const bool gguf = is_gguf16(w->format), q8 = w->format == WeightFormat::GgufQ8_0;
  if (w->format == WeightFormat::Int8) {
    if (w->rows_layout == to) return;
    if (to == RowsLayout::Rows16 || w->rows_layout == RowsLayout::Rows16)
      throw Error("set_rows_layout: an int8 weight is held in rows or rows64, not rows16");
    const std::string why = to == RowsLayout::Rows64 ? rows64_refusal(*w) : "";
    if (!why.empty())
      throw Error("set_rows_layout: int8 weight [" + std::to_string(w->n_out) + ", " + std::to_string(w->n_in) +
                  "] to rows64: " + why);
    set_rows64(w, to);
    return;
  }
  if (!fp4 && !gguf && w->format != WeightFormat::Int4)
    throw Error("set_rows_layout: a " + std::string(weight_format_name(w->format)) + " weight has no rows layout");
  if (to == RowsLayout::Rows64)
    throw Error("set_rows_layout: a " + std::string(weight_format_name(w->format)) + " weight has no rows64 layout");
  if (w->rows_layout == to) return;
  // code bytes a row (Q2_K: 2 bits a code); chunks (64 bytes of a row block) a row: 8 columns of 4-bit codes, 4 of
  // Q8_0's bytes
  const int64_t n_in = w->n_in, chunks = q8 ? n_in / 4 : n_in / kChunkCols;
  const bool two_bit = w->format == WeightFormat::GgufQ2_K || w->format == WeightFormat::GgufQ3_K;  // low bits' lines
  const int64_t rbytes = q8 ? n_in : two_bit ? n_in / 4 : n_in / 2;
  const int64_t nrb = row_blocks(w->n_out);
  const int64_t n = row_entries(*w);  // entries a row of the per-row arrays
  AlignedBytes data;
  if (to == RowsLayout::Rows16) {
    const std::string why = rows16_refusal(*w);
    if (!why.empty())
      throw Error("set_rows_layout: " + std::string(weight_format_name(w->format)) + " weight [" +
                  std::to_string(w->n_out) + ", " + std::to_string(n_in) + "] to rows16: " + why);
    data = AlignedBytes(nrb * kRowsBlock * rbytes);  // zero-filled: rows past n_out code (byte) 0
    if (is_planar(w->format)) {  // codes and bit planes a block of 16 rows
      const PlanarBlock p = planar_block(w->format);
      const int64_t nb = n_in / p.cols;
      std::vector<uint8_t> sb(size_t(nrb * nb * p.sb_bytes));  // zero-filled: padding rows d = 0
      for (int64_t r = 0; r < w->n_out; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t at = (r / kRowsBlock) * nb + b;
          p.to_rows16(w->data.data() + r * w->row_bytes() + b * p.bytes, r % kRowsBlock,
                      data.data() + at * p.code_bytes, sb.data() + at * p.sb_bytes);
        }
      w->scale_bytes = std::move(sb);
      w->data = std::move(data);
      w->rows_layout = to;
      return;
    }
    std::vector<uint8_t> gguf_codes;     // GGUF: a row's codes in the Rows order
    std::vector<uint16_t> entries;       // GGUF: every row's d (and m) entries, [n_out][n]
    if (gguf) {
      gguf_codes.resize(size_t(rbytes));
      entries.resize(size_t(w->n_out * n));
    }
    for (int64_t r = 0; r < w->n_out; ++r) {
      const uint8_t* row = w->data.data() + r * (gguf ? w->row_bytes() : rbytes);
      if (gguf) {  // the file's blocks: their codes in the Rows order (Q8_0: q + 128), their scales into the entries
        const GgufBlock g = gguf_block(w->format);
        for (int64_t b = 0; b < n_in / g.cols; ++b)
          gguf_block_split(w->format, row + b * g.bytes, entries.data() + r * n + b * g.entries,
                           gguf_codes.data() + b * g.code_bytes);
        row = gguf_codes.data();
      }
      uint8_t* block = data.data() + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
      if (q8) {  // 4 columns' bytes a chunk, as they are
        for (int64_t ch = 0; ch < chunks; ++ch) std::memcpy(block + ch * 64, row + ch * 4, 4);
        continue;
      }
      for (int64_t ch = 0; ch < chunks; ++ch) {
        uint16_t w0, w1;
        bytes_to_words(row + ch * 4, &w0, &w1);
        store16(w0, block + ch * 64);
        store16(w1, block + ch * 64 + 2);
      }
    }
    if (gguf) {
      w->scale_bytes = bytes_of(to_rows16<uint16_t>(entries, w->n_out, n, 0));
    } else if (fp4) {
      w->scale_bytes = to_rows16<uint8_t>(w->scale_bytes, w->n_out, n, mx ? 127 : 0);
    } else {
      w->scales = to_rows16<float>(w->scales, w->n_out, n, 0.0f);
      if (!w->zeros.empty()) w->zeros = to_rows16<int8_t>(w->zeros, w->n_out, n, 0);
    }
  } else if (gguf) {  // back to the file's blocks
    const int64_t fbytes = dtype_row_bytes(gguf_block_dtype(w->format), n_in);
    data = AlignedBytes(w->n_out * fbytes);
    for (int64_t r = 0; r < w->n_out; ++r) rows16_gguf_file_row(*w, r, data.data() + r * fbytes);
    w->scale_bytes.clear();
  } else {
    data = AlignedBytes(w->n_out * rbytes);
    for (int64_t r = 0; r < w->n_out; ++r) rows16_codes(w->data.data(), n_in, r, data.data() + r * rbytes);
    if (fp4) {
      w->scale_bytes = from_rows16(w->scale_bytes, w->n_out, n);
    } else {
      w->scales = from_rows16(w->scales, w->n_out, n);
      if (!w->zeros.empty()) w->zeros = from_rows16(w->zeros, w->n_out, n);
    }
  }
  w->data = std::move(data);
  w->rows_layout = to;
}

}  // namespace tp
