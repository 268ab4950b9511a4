// 4-bit weight layouts (common/rows16_layout.h): Rows16's bytes (FP4, Int4, GGUF Q4_0 / Q4_1) where its comment puts them, read
// back by an index computed here from that comment; to Rows16 and back gives the checkpoint's bytes; dequantize_rows
// reads both layouts alike; the refusals (set_rows_layout, check_packed_weight).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/gguf_layout.h"
#include "common/rows16_layout.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

PackedWeight random_fp4(WeightFormat f, int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = f;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * n_in / 2);
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  const bool mx = f == WeightFormat::Mxfp4;
  w.scale_bytes.resize(size_t(n_out * (n_in / (mx ? 32 : 16))));
  for (uint8_t& b : w.scale_bytes) b = mx ? uint8_t(110 + rng() % 30) : uint8_t(rng() % 0x7f);  // no edge bytes
  w.global_scale = 0.75f;
  check_packed_weight(w);
  return w;
}

// An Int4 weight [n_out, n_in] in groups of `group` columns (0: per channel), with zero points or not.
PackedWeight random_int4(int64_t n_out, int64_t n_in, int64_t group, bool zeros, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = WeightFormat::Int4;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = group > 0 ? group : n_in;
  w.data = AlignedBytes(n_out * n_in / 2);
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  w.scales.resize(size_t(n_out * w.n_groups()));
  for (float& v : w.scales) v = float(rng() % 1000 + 1) * 1e-4f;
  if (zeros) {
    w.zeros.resize(w.scales.size());
    for (int8_t& z : w.zeros) z = int8_t(int(rng() % 16) - 8);
  }
  check_packed_weight(w);
  return w;
}

// A GGUF block-format weight [n_out, n_in] in the file's blocks: random codes, finite F16 d (and m / dmin) of either
// sign.
PackedWeight random_gguf4(WeightFormat f, int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = f;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * w.row_bytes());
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  const DType t = gguf_block_dtype(f);
  const int64_t bb = dtype_block_bytes(t);
  const auto [at, n_f16] = block_f16s(t);           // d (and m / dmin)
  for (int64_t b = 0; b < w.data.size() / bb; ++b)  // finite F16 scales: exponent field below 31
    for (int k = 0; k < n_f16; ++k) w.data.data()[b * bb + at + 2 * k + 1] &= 0xbb;
  check_packed_weight(w);
  return w;
}

std::vector<float> dequant(const PackedWeight& w, int64_t r0, int64_t r1) {
  std::vector<float> d(size_t((r1 - r0) * w.n_in));
  dequantize_rows(w, r0, r1, d.data());
  return d;
}

TEST(RowsLayout, Rows16HoldsEachCodeAndScaleWhereDocumentedAndComesBack) {
  struct Shape {
    WeightFormat f;
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{WeightFormat::Nvfp4, 35, 96}, Shape{WeightFormat::Mxfp4, 16, 64},
                        Shape{WeightFormat::Mxfp4, 1, 32}, Shape{WeightFormat::Nvfp4, 19, 576}}) {
    const std::string name = std::string(weight_format_name(s.f)) + " [" + std::to_string(s.n_out) + ", " +
                             std::to_string(s.n_in) + "]";
    const bool mx = s.f == WeightFormat::Mxfp4;
    const PackedWeight given = random_fp4(s.f, s.n_out, s.n_in, uint32_t(s.n_out * s.n_in));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    EXPECT_EQ(w.rows_layout, RowsLayout::Rows16);
    check_packed_weight(w);
    const int64_t held = (s.n_out + 15) / 16 * 16, nb = s.n_in / (mx ? 32 : 16), chunks = s.n_in / 8;
    ASSERT_EQ(w.data.size(), held * s.n_in / 2) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held * nb) << name;
    EXPECT_EQ(w.n_bytes(), given.n_bytes() + (held - s.n_out) * (s.n_in / 2 + nb)) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t k = 0; k < s.n_in; ++k) {  // word 2i + t of chunk k / 8, nibble n: column k0 + 2n + t
        const int64_t n = (k % 8) / 2, t = k % 2;
        const uint8_t* word = w.data.data() + (rb * chunks + k / 8) * 64 + 2 * (2 * i + t);
        const int code = ((word[0] | word[1] << 8) >> (4 * n)) & 15;
        const int want = r < s.n_out ? (given.data.data()[r * s.n_in / 2 + k / 2] >> (4 * (k % 2))) & 15 : 0;
        ASSERT_EQ(code, want) << name << " row " << r << " column " << k;
      }
      for (int64_t b = 0; b < nb; ++b)
        ASSERT_EQ(w.scale_bytes[size_t((rb * nb + b) * 16 + i)],
                  r < s.n_out ? given.scale_bytes[size_t(r * nb + b)] : (mx ? 127 : 0))
            << name << " row " << r << " block " << b;
    }
    EXPECT_EQ(dequant(w, 0, s.n_out), dequant(given, 0, s.n_out)) << name;
    if (s.n_out > 3) {
      EXPECT_EQ(dequant(w, 2, s.n_out - 1), dequant(given, 2, s.n_out - 1)) << name;
    }
    set_rows_layout(&w, RowsLayout::Rows);
    EXPECT_EQ(w.rows_layout, RowsLayout::Rows);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), given.data.size()) << name;
    EXPECT_EQ(0, std::memcmp(w.data.data(), given.data.data(), size_t(given.data.size()))) << name;
    EXPECT_EQ(w.scale_bytes, given.scale_bytes) << name;
  }
  EXPECT_STREQ(rows_layout_name(RowsLayout::Rows16), "rows16");
  EXPECT_STREQ(rows_layout_name(RowsLayout::Rows), "rows");
}

// Int4 in Rows16: the codes as FP4's; scales and zero points [row blocks][groups][16] (padding 0); dequantize_rows
// reads it as the checkpoint's; back to Rows gives the checkpoint's bytes, scales and zeros.
TEST(RowsLayout, Int4ScalesAndZerosGoToTheirBlocksAndComeBack) {
  struct Shape {
    int64_t n_out, n_in, group;
    bool zeros;
  };
  for (const Shape s : {Shape{35, 128, 64, true}, Shape{16, 96, 32, false}, Shape{19, 576, 0, true}, Shape{3, 96, 64, true}}) {
    const std::string name = "int4 [" + std::to_string(s.n_out) + ", " + std::to_string(s.n_in) + "] g" +
                             std::to_string(s.group) + (s.zeros ? " zeros" : "");
    const PackedWeight given = random_int4(s.n_out, s.n_in, s.group, s.zeros, uint32_t(s.n_out + s.n_in));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    check_packed_weight(w);
    const int64_t held = (s.n_out + 15) / 16 * 16, ng = given.n_groups(), chunks = s.n_in / 8;
    ASSERT_EQ(int64_t(w.scales.size()), held * ng) << name;
    ASSERT_EQ(w.zeros.size(), s.zeros ? size_t(held * ng) : size_t(0)) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t g = 0; g < ng; ++g) {
        const size_t at = size_t((rb * ng + g) * 16 + i), from = size_t(r * ng + g);
        ASSERT_EQ(w.scales[at], r < s.n_out ? given.scales[from] : 0.0f) << name << " row " << r << " group " << g;
        if (s.zeros) {
          ASSERT_EQ(w.zeros[at], r < s.n_out ? given.zeros[from] : 0) << name << " row " << r;
        }
      }
      for (int64_t k = 0; k < s.n_in; ++k) {
        const uint8_t* word = w.data.data() + (rb * chunks + k / 8) * 64 + 2 * (2 * i + k % 2);
        const int code = ((word[0] | word[1] << 8) >> (4 * ((k % 8) / 2))) & 15;
        const int want = r < s.n_out ? (given.data.data()[r * s.n_in / 2 + k / 2] >> (4 * (k % 2))) & 15 : 0;
        ASSERT_EQ(code, want) << name << " row " << r << " column " << k;
      }
    }
    EXPECT_EQ(dequant(w, 0, s.n_out), dequant(given, 0, s.n_out)) << name;
    EXPECT_EQ(dequant(w, 1, s.n_out), dequant(given, 1, s.n_out)) << name;
    set_rows_layout(&w, RowsLayout::Rows);
    check_packed_weight(w);
    EXPECT_EQ(0, std::memcmp(w.data.data(), given.data.data(), size_t(given.data.size()))) << name;
    EXPECT_EQ(w.scales, given.scales) << name;
    EXPECT_EQ(w.zeros, given.zeros) << name;
  }
}

// A GGUF weight w held in Rows16 from `given` (its file's blocks): dequantize_rows reads both alike, and w back in
// Rows holds the file's bytes again and no scale bytes.
void expect_back_to_file(PackedWeight* w, const PackedWeight& given, const std::string& name) {
  EXPECT_EQ(dequant(*w, 0, given.n_out), dequant(given, 0, given.n_out)) << name;
  set_rows_layout(w, RowsLayout::Rows);
  check_packed_weight(*w);
  EXPECT_TRUE(w->scale_bytes.empty()) << name;
  ASSERT_EQ(w->data.size(), given.data.size()) << name;
  EXPECT_EQ(0, std::memcmp(w->data.data(), given.data.data(), size_t(given.data.size()))) << name;
}

// GGUF Q4_0 / Q4_1 in Rows16: block b's weight j and 16 + j at columns 32b + j and 32b + 16 + j of the code words
// (as FP4's); Q8_0: byte 4i + j of chunk c = row i's column 4c + j as q + 128; the F16 d (and m) as 16-bit entries
// [row blocks][blocks][16 d (, 16 m)] in scale_bytes (padding 0); dequantize_rows reads it as the file's blocks;
// back to Rows gives the file's bytes.
TEST(RowsLayout, GgufQ4BlocksGoToTheirWordsAndScalesAndComeBack) {
  struct Shape {
    WeightFormat f;
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{WeightFormat::GgufQ4_0, 35, 96}, Shape{WeightFormat::GgufQ4_1, 16, 64},
                        Shape{WeightFormat::GgufQ4_0, 1, 32}, Shape{WeightFormat::GgufQ4_1, 19, 576},
                        Shape{WeightFormat::GgufQ8_0, 21, 96}, Shape{WeightFormat::GgufQ8_0, 16, 512},
                        Shape{WeightFormat::GgufQ4_K, 19, 256}, Shape{WeightFormat::GgufQ4_K, 3, 1536}}) {
    const std::string name = std::string(weight_format_name(s.f)) + " [" + std::to_string(s.n_out) + ", " +
                             std::to_string(s.n_in) + "]";
    const bool q4_1 = s.f == WeightFormat::GgufQ4_1, q8 = s.f == WeightFormat::GgufQ8_0, k4 = s.f == WeightFormat::GgufQ4_K;
    // entries a file block (Q4_K: d, dmin, 8 unpacked sc | m; a block of 256), its bytes, blocks a row
    const int64_t e = k4 ? 10 : q4_1 ? 2 : 1, bb = k4 ? 144 : q8 ? 34 : q4_1 ? 20 : 18;
    const int64_t nb = s.n_in / (k4 ? 256 : 32), chunks = s.n_in / (q8 ? 4 : 8);
    const PackedWeight given = random_gguf4(s.f, s.n_out, s.n_in, uint32_t(s.n_out * s.n_in + e));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    EXPECT_EQ(w.rows_layout, RowsLayout::Rows16);
    check_packed_weight(w);
    const int64_t held = (s.n_out + 15) / 16 * 16;
    ASSERT_EQ(w.data.size(), held * s.n_in / (q8 ? 1 : 2)) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held * nb * e * 2) << name;
    // the file's bytes a block (Q4_K: 148, its 8 scales and mins unpacked to a byte each), on held rows
    EXPECT_EQ(w.n_bytes(), held * nb * (k4 ? 148 : bb)) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      const uint8_t* row = given.data.data() + r * nb * bb;
      for (int64_t k = 0; k < s.n_in && q8; ++k) {  // Q8_0: the file's int8 at block k / 32, byte 2 + k % 32
        const int code = w.data.data()[(rb * chunks + k / 4) * 64 + 4 * i + k % 4];
        ASSERT_EQ(code, r < s.n_out ? (row[(k / 32) * bb + 2 + k % 32] + 128) % 256 : 0) << name << " row " << r << " column " << k;
      }
      for (int64_t k = 0; k < s.n_in && !q8; ++k) {
        // the file: Q4_0 / Q4_1 block k / 32, byte 2e + k % 16, high nibble from 16 on; Q4_K block k / 256, chunk
        // c = k % 256 / 64, byte 16 + 32c + k % 32, high nibble from 32 on in the chunk
        const uint8_t* word = w.data.data() + (rb * chunks + k / 8) * 64 + 2 * (2 * i + k % 2);
        const int code = ((word[0] | word[1] << 8) >> (4 * ((k % 8) / 2))) & 15;
        const int64_t at = k4 ? (k / 256) * bb + 16 + 32 * (k % 256 / 64) + k % 32 : (k / 32) * bb + 2 * e + k % 16;
        const bool high = k4 ? k % 64 >= 32 : k % 32 >= 16;
        const int want = r < s.n_out ? (row[at] >> (high ? 4 : 0)) & 15 : 0;
        ASSERT_EQ(code, want) << name << " row " << r << " column " << k;
      }
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t j = 0; j < (k4 ? 2 : e); ++j) {  // entry b · e + j of row r: d, then Q4_1's m / Q4_K's dmin
          const uint8_t* at = w.scale_bytes.data() + (((rb * nb + b) * e + j) * 16 + i) * 2;
          const uint8_t* from = row + b * bb + 2 * j;
          ASSERT_EQ(at[0] | at[1] << 8, r < s.n_out ? from[0] | from[1] << 8 : 0) << name << " row " << r << " block " << b;
        }
    }
    EXPECT_EQ(dequant(w, s.n_out / 2, s.n_out), dequant(given, s.n_out / 2, s.n_out)) << name;
    expect_back_to_file(&w, given, name);
  }
}

// GGUF Q5_0 / Q5_1 in Rows16: the low 4 bits of row i's q at column k in byte 4i + k % 4 of chunk k / 8 (high nibble
// from k % 8 = 4 on), its fifth bit at bit 2 (k % 32 / 8) + k % 8 / 4 of byte P + 4i + k % 4 of the block's 96 (Q5_1:
// 128) scale bytes (P = 32; Q5_1: 64), d at their byte 2i (Q5_1: m at 32 + 2i); dequantize_rows reads it as the file's
// blocks; back to Rows gives the file's bytes.
TEST(RowsLayout, GgufQ5CodesAndFifthBitsGoWhereDocumentedAndComeBack) {
  for (const WeightFormat f : {WeightFormat::GgufQ5_0, WeightFormat::GgufQ5_1})
    for (const int64_t n_out : {35, 16, 1}) {
      const bool q51 = f == WeightFormat::GgufQ5_1;
      const int64_t bb = q51 ? 24 : 22, sbb = q51 ? 128 : 96, qh = q51 ? 4 : 2, plane = q51 ? 64 : 32;
      const int64_t n_in = n_out == 1 ? 32 : 576, nb = n_in / 32, held = (n_out + 15) / 16 * 16;
      const std::string name =
          std::string(weight_format_name(f)) + " [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]";
      const PackedWeight given = random_gguf4(f, n_out, n_in, uint32_t(n_out + 5));
      PackedWeight w = copy_packed_weight(given);
      set_rows_layout(&w, RowsLayout::Rows16);
      check_packed_weight(w);
      ASSERT_EQ(w.data.size(), held * n_in / 2) << name;
      ASSERT_EQ(int64_t(w.scale_bytes.size()), held / 16 * nb * sbb) << name;
      EXPECT_EQ(w.n_bytes(), held * nb * bb) << name;
      for (int64_t r = 0; r < held; ++r) {
        const int64_t rb = r / 16, i = r % 16;
        for (int64_t k = 0; k < n_in; ++k) {
          int want = 0;  // the file: qh (4 bytes at 2; Q5_1: 4) bit k % 32, nibble in byte qh + 4 + k % 16
          const uint8_t* blk = given.data.data() + r * nb * bb + (k / 32) * bb;
          if (r < n_out) {
            const int j = int(k % 32);
            const uint8_t* qs = blk + qh + 4;
            want = ((j < 16 ? qs[j] : qs[j - 16] >> 4) & 15) | ((blk[qh + j / 8] >> (j % 8)) & 1) << 4;
          }
          const int lo = (w.data.data()[(rb * (n_in / 8) + k / 8) * 64 + 4 * i + k % 4] >> (4 * (k % 8 / 4))) & 15;
          const uint8_t* sb = w.scale_bytes.data() + (rb * nb + k / 32) * sbb;
          const int hi = (sb[plane + 4 * i + k % 4] >> (2 * (k % 32 / 8) + k % 8 / 4)) & 1;
          ASSERT_EQ(lo | hi << 4, want) << name << " row " << r << " column " << k;
          if (k % 32 == 0) {
            ASSERT_EQ(sb[2 * i] | sb[2 * i + 1] << 8, r < n_out ? blk[0] | blk[1] << 8 : 0) << name << " row " << r;
            if (q51) {
              ASSERT_EQ(sb[32 + 2 * i] | sb[32 + 2 * i + 1] << 8, r < n_out ? blk[2] | blk[3] << 8 : 0)
                  << name << " row " << r << ": m";
            }
          }
        }
      }
      expect_back_to_file(&w, given, name);
    }
}

// GGUF Q6_K in Rows16: the low 4 bits of row i's q at column k as Q5_0's; of the block's 1312 scale bytes d at 2i,
// sc of sub-block s at 32 + 16 s + i, bit 4 + p of q at bit 2 (k % 32 / 8) + k % 8 / 4 of byte
// 288 + 128 (k % 256 / 32) + 64 p + 4i + k % 4; dequantize_rows reads it as the file's blocks; back to Rows gives the
// file's bytes.
TEST(RowsLayout, GgufQ6_KCodesScalesAndHighBitsGoWhereDocumentedAndComeBack) {
  for (const int64_t n_out : {19, 16, 1}) {
    const int64_t n_in = n_out == 1 ? 256 : 768, nb = n_in / 256, held = (n_out + 15) / 16 * 16;
    const std::string name = "q6_k [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]";
    const PackedWeight given = random_gguf4(WeightFormat::GgufQ6_K, n_out, n_in, uint32_t(n_out + 6));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), held * n_in / 2) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held / 16 * nb * 1312) << name;
    EXPECT_EQ(w.n_bytes(), held * nb * 210) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t k = 0; k < n_in; ++k) {
        const uint8_t* blk = given.data.data() + r * nb * 210 + (k / 256) * 210;
        const uint8_t* sb = w.scale_bytes.data() + (rb * nb + k / 256) * 1312;
        const int c = int(k % 256), hh = c / 128, g = c % 128 / 32, l = c % 32;  // llama.cpp's order
        const int want = r < n_out ? ((blk[64 * hh + 32 * (g % 2) + l] >> (g >= 2 ? 4 : 0)) & 15) |
                                         ((blk[128 + 32 * hh + l] >> (2 * g)) & 3) << 4
                                   : 0;
        int q = (w.data.data()[(rb * (n_in / 8) + k / 8) * 64 + 4 * i + k % 4] >> (4 * (k % 8 / 4))) & 15;
        for (int p = 0; p < 2; ++p)
          q |= ((sb[288 + 128 * (c / 32) + 64 * p + 4 * i + k % 4] >> (2 * (k % 32 / 8) + k % 8 / 4)) & 1) << (4 + p);
        ASSERT_EQ(q, want) << name << " row " << r << " column " << k;
        if (k % 16 == 0) {
          ASSERT_EQ(int8_t(sb[32 + 16 * (c / 16) + i]), r < n_out ? int8_t(blk[192 + c / 16]) : 0) << name << " row " << r;
        }
        if (c == 0) {
          ASSERT_EQ(sb[2 * i] | sb[2 * i + 1] << 8, r < n_out ? blk[208] | blk[209] << 8 : 0) << name << " row " << r;
        }
      }
    }
    expect_back_to_file(&w, given, name);
  }
}

// GGUF Q5_K in Rows16: the low 4 bits of row i's q at column k as Q5_0's; of the block's 832 scale bytes d at 2i, dmin
// at 32 + 2i, sub-block s's scale | min << 8 (6 bits each, unpacked) at 64 + 32 s + 2i, the fifth bit at bit
// 2 (k % 32 / 8) + k % 8 / 4 of byte 320 + 64 (k % 256 / 32) + 4i + k % 4; dequantize_rows reads it as the file's
// blocks; back to Rows gives the file's bytes.
TEST(RowsLayout, GgufQ5_KCodesScalesAndFifthBitsGoWhereDocumentedAndComeBack) {
  for (const int64_t n_out : {19, 16, 1}) {
    const int64_t n_in = n_out == 1 ? 256 : 768, nb = n_in / 256, held = (n_out + 15) / 16 * 16;
    const std::string name = "q5_k [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]";
    const PackedWeight given = random_gguf4(WeightFormat::GgufQ5_K, n_out, n_in, uint32_t(n_out + 5));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), held * n_in / 2) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held / 16 * nb * 832) << name;
    EXPECT_EQ(w.n_bytes(), held * nb * 180) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t k = 0; k < n_in; ++k) {
        const uint8_t* blk = given.data.data() + r * nb * 176 + (k / 256) * 176;
        const uint8_t* sb = w.scale_bytes.data() + (rb * nb + k / 256) * 832;
        const int c = int(k % 256), s = c / 32, l = c % 32;  // llama.cpp's order
        const int want =
            r < n_out ? ((blk[48 + 32 * (s / 2) + l] >> (s % 2 ? 4 : 0)) & 15) | ((blk[16 + l] >> s) & 1) << 4 : 0;
        int q = (w.data.data()[(rb * (n_in / 8) + k / 8) * 64 + 4 * i + k % 4] >> (4 * (k % 8 / 4))) & 15;
        q |= ((sb[320 + 64 * s + 4 * i + k % 4] >> (2 * (k % 32 / 8) + k % 8 / 4)) & 1) << 4;
        ASSERT_EQ(q, want) << name << " row " << r << " column " << k;
        if (l == 0) {
          int sc = 0, mn = 0;
          if (r < n_out) q4_k_scale_min(s, blk + 4, &sc, &mn);
          ASSERT_EQ(sb[64 + 32 * s + 2 * i] | sb[64 + 32 * s + 2 * i + 1] << 8, sc | mn << 8) << name << " row " << r;
        }
        if (c == 0) {
          for (int e = 0; e < 2; ++e) {
            ASSERT_EQ(sb[32 * e + 2 * i] | sb[32 * e + 2 * i + 1] << 8,
                      r < n_out ? blk[2 * e] | blk[2 * e + 1] << 8 : 0)
                << name << " row " << r << (e ? " dmin" : " d");
          }
        }
      }
    }
    expect_back_to_file(&w, given, name);
  }
}

// GGUF Q2_K in Rows16: row i's 2-bit code at column k in bits 2 (k % 16 / 4) of byte 4i + k % 4 of line k / 16; of the
// block's 320 scale bytes d at 2i, dmin at 32 + 2i, sub-block s's byte (scale | min << 4) at 64 + 16 s + i;
// dequantize_rows reads it as the file's blocks; back to Rows gives the file's bytes.
TEST(RowsLayout, GgufQ2_KCodesAndScalesGoWhereDocumentedAndComeBack) {
  for (const int64_t n_out : {19, 16, 1}) {
    const int64_t n_in = n_out == 1 ? 256 : 768, nb = n_in / 256, held = (n_out + 15) / 16 * 16;
    const std::string name = "q2_k [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]";
    const PackedWeight given = random_gguf4(WeightFormat::GgufQ2_K, n_out, n_in, uint32_t(n_out + 2));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), held * n_in / 4) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held / 16 * nb * 320) << name;
    EXPECT_EQ(w.n_bytes(), held * nb * 84) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t k = 0; k < n_in; ++k) {
        const uint8_t* blk = given.data.data() + r * nb * 84 + (k / 256) * 84;
        const uint8_t* sb = w.scale_bytes.data() + (rb * nb + k / 256) * 320;
        const int c = int(k % 256);  // llama.cpp's order
        const int want = r < n_out ? (blk[16 + 32 * (c / 128) + c % 32] >> (2 * ((c % 128) / 32))) & 3 : 0;
        const int q = (w.data.data()[(rb * (n_in / 16) + k / 16) * 64 + 4 * i + k % 4] >> (2 * (k % 16 / 4))) & 3;
        ASSERT_EQ(q, want) << name << " row " << r << " column " << k;
        if (c % 16 == 0) {
          ASSERT_EQ(sb[64 + 16 * (c / 16) + i], r < n_out ? blk[c / 16] : 0) << name << " row " << r;
        }
        if (c == 0) {
          for (int e = 0; e < 2; ++e) {
            ASSERT_EQ(sb[32 * e + 2 * i] | sb[32 * e + 2 * i + 1] << 8,
                      r < n_out ? blk[80 + 2 * e] | blk[81 + 2 * e] << 8 : 0)
                << name << " row " << r << (e ? " dmin" : " d");
          }
        }
      }
    }
    expect_back_to_file(&w, given, name);
  }
}

// GGUF Q3_K in Rows16: the low 2 bits of row i's u = q + 4 at column k as Q2_K's codes; of the block's 800 scale bytes
// d at 2i, the int8 sc − 32 of sub-block s at 32 + 16 s + i, the third bit at bit 4 (i / 8) + k % 16 / 4 of byte 288 +
// 32 s + 4 (i % 8) + k % 4; dequantize_rows reads it as the file's blocks; back to Rows gives the file's bytes.
TEST(RowsLayout, GgufQ3_KCodesScalesAndThirdBitsGoWhereDocumentedAndComeBack) {
  for (const int64_t n_out : {19, 16, 1}) {
    const int64_t n_in = n_out == 1 ? 256 : 768, nb = n_in / 256, held = (n_out + 15) / 16 * 16;
    const std::string name = "q3_k [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]";
    const PackedWeight given = random_gguf4(WeightFormat::GgufQ3_K, n_out, n_in, uint32_t(n_out + 3));
    PackedWeight w = copy_packed_weight(given);
    set_rows_layout(&w, RowsLayout::Rows16);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), held * n_in / 4) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held / 16 * nb * 800) << name;
    EXPECT_EQ(w.n_bytes(), held * nb * 114) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = given.data.data() + r * nb * 110 + b * 110;
        const uint8_t* sb = w.scale_bytes.data() + (rb * nb + b) * 800;
        uint16_t d = 0;
        int8_t sc[16] = {}, codes[256] = {};
        if (r < n_out) q3_k_block_codes(blk, &d, sc, codes);  // padding rows: d 0, every u and sc 0
        ASSERT_EQ(sb[2 * i] | sb[2 * i + 1] << 8, d) << name << " row " << r;
        for (int s = 0; s < 16; ++s)
          ASSERT_EQ(int8_t(sb[32 + 16 * s + i]), r < n_out ? sc[s] : 0) << name << " row " << r;
        for (int c = 0; c < 256; ++c) {
          const int64_t k = b * 256 + c, s = c / 16;
          int u = (w.data.data()[(rb * (n_in / 16) + k / 16) * 64 + 4 * i + k % 4] >> (2 * (k % 16 / 4))) & 3;
          u |= ((sb[288 + 32 * s + 4 * (i % 8) + k % 4] >> (4 * (i / 8) + k % 16 / 4)) & 1) << 2;
          ASSERT_EQ(u, r < n_out ? codes[c] + 4 : 0) << name << " row " << r << " column " << k;
        }
      }
    }
    expect_back_to_file(&w, given, name);
  }
}

// What Rows16 cannot hold is refused, naming why, and the weight is left as it was; check_packed_weight refuses a
// Rows16 weight that does not fit it.
// A W8A8 Int8 weight [n_out, n_in], per channel, int8 activations per token: random codes and scales.
PackedWeight random_w8a8(int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = WeightFormat::Int8;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = n_in;
  w.act = ActQuant::Int8Dynamic;
  w.data = AlignedBytes(n_out * n_in);
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  w.scales.resize(size_t(n_out));
  for (float& v : w.scales) v = float(rng() % 1000 + 1) * 1e-4f;
  check_packed_weight(w);
  return w;
}

// Rows64 (oneDNN's BA16a64b4a of Wᵀ): row r's code at column c at byte (r / 64) · 64 n_in + (c / 64) · 4096 +
// (c % 64 / 4) · 256 + 4 (r % 64) + c % 4, as the header says; scales unchanged; back to Rows the same bytes; the
// reference's rows (dequantize_rows) the same in either layout.
TEST(RowsLayout, Rows64HoldsEachInt8CodeWhereDocumentedAndComesBack) {
  const int64_t n_out = 192, n_in = 128;
  const PackedWeight rows = random_w8a8(n_out, n_in, 1);
  PackedWeight held = copy_packed_weight(rows);
  set_rows_layout(&held, RowsLayout::Rows64);
  EXPECT_EQ(held.rows_layout, RowsLayout::Rows64);
  EXPECT_STREQ(rows_layout_name(held.rows_layout), "rows64");
  check_packed_weight(held);
  ASSERT_EQ(held.data.size(), rows.data.size());
  EXPECT_EQ(held.scales, rows.scales);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t c = 0; c < n_in; ++c)
      ASSERT_EQ(held.data.data()[(r / 64) * 64 * n_in + (c / 64) * 4096 + (c % 64 / 4) * 256 + 4 * (r % 64) + c % 4],
                rows.data.data()[r * n_in + c])
          << "row " << r << " column " << c;
  std::vector<float> a(size_t(n_out * n_in)), b(a.size());
  dequantize_rows(rows, 0, n_out, a.data());
  dequantize_rows(held, 0, n_out, b.data());
  EXPECT_EQ(a, b);
  set_rows_layout(&held, RowsLayout::Rows);
  EXPECT_EQ(held.rows_layout, RowsLayout::Rows);
  EXPECT_EQ(0, std::memcmp(held.data.data(), rows.data.data(), size_t(rows.data.size())));
}

TEST(RowsLayout, RefusesWhatRows64CannotHold) {
  auto refused = [](PackedWeight w, const std::string& needle) {
    const PackedWeight before = copy_packed_weight(w);
    try {
      set_rows_layout(&w, RowsLayout::Rows64);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(w.rows_layout, before.rows_layout);
    EXPECT_EQ(0, std::memcmp(w.data.data(), before.data.data(), size_t(w.data.size())));
  };
  refused(random_w8a8(96, 64, 2), "int8 weight [96, 64] to rows64: n_out or n_in is not a multiple of 64");
  refused(random_w8a8(64, 96, 3), "n_out or n_in is not a multiple of 64");
  PackedWeight a16 = random_w8a8(64, 64, 4);
  a16.act = ActQuant::None;
  refused(std::move(a16), "activations not quantized to int8");
  PackedWeight groups = random_w8a8(64, 128, 5);
  groups.group_size = 64;
  groups.scales.resize(128);
  refused(std::move(groups), "scale groups (not per channel)");
  PackedWeight zeros = random_w8a8(64, 64, 6);
  zeros.zeros.assign(64, 3);
  refused(std::move(zeros), "zero points");
  PackedWeight act_groups = random_w8a8(64, 128, 7);
  act_groups.act_group = 64;
  refused(std::move(act_groups), "activation groups");
  refused(random_int4(64, 64, 0, false, 8), "int4 weight has no rows64 layout");
  PackedWeight w = random_w8a8(64, 64, 9);
  EXPECT_THROW(set_rows_layout(&w, RowsLayout::Rows16), Error);
  PackedWeight bad = random_w8a8(96, 64, 10);
  bad.rows_layout = RowsLayout::Rows64;  // tagged so without being holdable
  try {
    check_packed_weight(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows64 cannot hold it: n_out or n_in is not a multiple of 64"),
              std::string::npos)
        << e.what();
  }
}

TEST(RowsLayout, RefusesWhatRows16CannotHold) {
  auto refused = [](PackedWeight w, const std::string& needle) {
    const PackedWeight before = copy_packed_weight(w);
    try {
      set_rows_layout(&w, RowsLayout::Rows16);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(w.rows_layout, RowsLayout::Rows);
    EXPECT_EQ(w.scale_bytes, before.scale_bytes);
    EXPECT_EQ(0, std::memcmp(w.data.data(), before.data.data(), size_t(w.data.size())));
  };
  refused(random_fp4(WeightFormat::Nvfp4, 4, 48, 1), "n_in is not a multiple of 32");
  for (const uint8_t b : {uint8_t(0x7f), uint8_t(0xff)}) {
    PackedWeight w = random_fp4(WeightFormat::Nvfp4, 4, 64, 2);
    w.scale_bytes[5] = b;
    refused(std::move(w), "an E4M3 scale byte that is NaN");
  }
  for (const uint8_t b : {uint8_t(0), uint8_t(255)}) {
    PackedWeight w = random_fp4(WeightFormat::Mxfp4, 4, 64, 3);
    w.scale_bytes[2] = b;
    refused(std::move(w), "an E8M0 scale byte 0 or 255");
  }
  PackedWeight int8;
  int8.format = WeightFormat::Int8;
  EXPECT_THROW(set_rows_layout(&int8, RowsLayout::Rows16), Error);
  refused(random_int4(4, 64, 8, false, 5), "groups of a size that is not a multiple of 16");
  PackedWeight act_order = random_int4(4, 64, 32, false, 6);
  for (int64_t k = 0; k < 64; ++k) act_order.g_idx.push_back(int32_t((63 - k) / 32));
  refused(std::move(act_order), "g_idx (act-order)");
  PackedWeight w4a8 = random_int4(4, 64, 32, false, 7);
  w4a8.act = ActQuant::Int8Dynamic;
  refused(std::move(w4a8), "activation quantization");

  auto check_refuses = [](const PackedWeight& w, const std::string& needle) {
    try {
      check_packed_weight(w);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PackedWeight w = random_fp4(WeightFormat::Nvfp4, 5, 64, 4);
  PackedWeight unpadded = copy_packed_weight(w);
  unpadded.rows_layout = RowsLayout::Rows16;  // Rows' sizes: 5 rows, not 16
  check_refuses(unpadded, "data holds 160 bytes, expected 512");
  set_rows_layout(&w, RowsLayout::Rows16);
  PackedWeight nan = copy_packed_weight(w);
  nan.scale_bytes[7] = 0x7f;
  check_refuses(nan, "rows16 cannot hold it: an E4M3 scale byte that is NaN");
  PackedWeight bf16;
  bf16.format = WeightFormat::BF16;
  bf16.n_out = 1;
  bf16.n_in = 32;
  bf16.data = AlignedBytes(64);
  bf16.rows_layout = RowsLayout::Rows16;
  check_refuses(
      bf16,
      "rows16 cannot hold it: not an int4, mxfp4, nvfp4, GGUF q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, "
      "q5_k, q6_k or iq4_nl weight");
  PackedWeight q4_0_quads = random_gguf4(WeightFormat::GgufQ4_0, 3, 64, 8);
  q4_0_quads.gguf_layout = GgufLayout::Q4_0Groups;  // the same bytes regrouped: not the file's blocks
  refused(std::move(q4_0_quads), "GGUF rows regrouped (q4_0_groups)");
  PackedWeight gguf_bf16_x = random_gguf4(WeightFormat::GgufQ4_1, 3, 64, 9);
  gguf_bf16_x.act_bf16 = true;  // BF16 x: only the GEMM-form kernel's (Rows16)
  check_refuses(gguf_bf16_x, "GGUF's in layout rows16 only");
  set_rows_layout(&gguf_bf16_x, RowsLayout::Rows16);
  check_packed_weight(gguf_bf16_x);
  PackedWeight short_scales = copy_packed_weight(gguf_bf16_x);
  short_scales.scale_bytes.resize(short_scales.scale_bytes.size() - 2);
  check_refuses(short_scales, "126 scale bytes, expected 128");
}

}  // namespace
}  // namespace tp
