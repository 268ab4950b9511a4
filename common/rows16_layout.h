// The layouts a 4-bit (or GGUF Q8_0) weight's codes and per-row scale arrays can be held in
// (PackedWeight::rows_layout), and the conversions between them.
//   Rows    as the checkpoint: row r's codes at data + r · n_in / 2 (two a byte, column 2j in byte j's low nibble,
//           2j + 1 in its high one), its per-row arrays — Int4 scales and zeros [n_out][n_groups], MXFP4 / NVFP4
//           scale_bytes [n_out][nb] (nb = n_in / 32 or n_in / 16) — at entry r · n of each. GGUF Q4_0 / Q4_1 / Q8_0:
//           the file's blocks (common/dtype.h; gguf_layout File), codes and F16 scales together in data
//   Rows16  GEMM form for the AVX512-BF16 decode (kernels/cpu/gemm_rows16.cpp): rows in blocks of 16, so that one
//           64-byte load decodes into vectors of 16 rows × 2 columns. data: [ceil(n_out / 16)][n_in / 8][64 bytes]
//           — per block of 16 rows and 8 columns k0 .. k0 + 7, 32 little-endian 16-bit words, word 2i + t holding
//           in its nibble n (bits 4n .. 4n + 3) the code of row i, column k0 + 2n + t; each per-row array:
//           [ceil(n_out / 16)][n][16] — the 16 rows' entries of each group / block. Rows past n_out (to the next
//           16) hold code 0, scale 0 (Int4 F32 scales, NVFP4 E4M3 bytes) or 127 (MXFP4: 1.0) and zero point 0:
//           the resident bytes grow by at most 15 rows.
//           GGUF Q4_0 / Q4_1 (x = d (q − 8), x = d q + m; 32-column blocks): data as above (n_in / 2 bytes a row,
//           the block's weight j and 16 + j at columns 32b + j and 32b + 16 + j); the F16 d (and Q4_1's m) of each
//           row and block as a per-row array of 16-bit entries in scale_bytes (little-endian): Q4_0 entry b = d of
//           block b, Q4_1 entries 2b, 2b + 1 = its d, m — so [ceil(n_out / 16)][nb][16 d (, 16 m)]; padding rows d
//           = m = 0. The same bytes a row as the file's blocks (18 / 20 per 32 columns).
//           GGUF Q8_0 (x = d q): data [ceil(n_out / 16)][n_in / 4][64 bytes] — per block of 16 rows and 4 columns
//           k0 .. k0 + 3, byte 4i + j = row i's column k0 + j as the unsigned byte q + 128 (one 64-byte load: 16
//           rows × 4 columns, an int32 lane a row for vpdpbusd: kernels/cpu/gemm_rows16_int8.cpp); d as Q4_0's
//           (entries [ceil(n_out / 16)][nb][16]); padding rows byte 0, d = 0. 34 bytes per 32 columns, as the file.
//           GGUF Q4_K (256-column blocks of 8 sub-blocks: x = d sc q − dmin m): codes as Q4_0's, in column order;
//           10 entries a block: d, dmin (F16), then sc | m << 8 of each sub-block (the 6-bit scale and min
//           unpacked) — [ceil(n_out / 16)][nb · 10][16]; 148 bytes per 256 columns (the file: 144).
//           GGUF Q5_0 (x = d (q − 16), q five bits; for the int8 kernel, kernels/cpu/gemm_rows16_int8.cpp): data
//           [ceil(n_out / 16)][n_in / 8][64 bytes] — per block of 16 rows and 8 columns k0 .. k0 + 7, byte 4i + j
//           holds the low 4 bits of row i's q at column k0 + j (low nibble) and k0 + 4 + j (high nibble);
//           scale_bytes [ceil(n_out / 16)][nb][96 bytes]: the 16 rows' F16 d (32 bytes), then the fifth bits
//           (64 bytes: byte 4i + j, bit 2c + h = that of row i, column 32b + 8c + 4h + j). 22 bytes per 32
//           columns, as the file; padding rows 0.
//           GGUF Q5_1 (x = d q + m; kernels/cpu/gemm_rows16_avx2.cpp): as Q5_0's with the 16 rows' F16 m after
//           their d — scale_bytes [ceil(n_out / 16)][nb][128 bytes]: d (32), m (32), the fifth bits (64). 24 bytes
//           per 32 columns, as the file.
//           GGUF IQ4_NL (x = d kIq4Values[q]): as Q4_0's (the same blocks; 18 bytes per 32 columns).
//           GGUF Q5_K (256-column blocks of 8 sub-blocks: x = d sc q − dmin m, q five bits; the AVX2 kernel,
//           kernels/cpu/gemm_rows16_kquant_avx2.cpp): data as Q5_0's (the low 4 bits of q); scale_bytes
//           [ceil(n_out / 16)][nb][832 bytes]: Q4_K's 320 bytes of entries (d, dmin, sc | m << 8 of each sub-block,
//           16 rows each), then per 32 columns a 64-byte plane of the fifth bits as Q5_0's (byte 4i + j, bit 2c + h:
//           that of row i, column 32g + 8c + 4h + j). 180 bytes per 256 columns (the file: 176).
//           GGUF Q2_K (256-column blocks of 16 sub-blocks: x = d sc q − dmin m, q two bits, sc and m four; the AVX2
//           kernel): data [ceil(n_out / 16)][n_in / 16][64 bytes] — per block of 16 rows and 16 columns k0 .. k0 + 15
//           (a sub-block), byte 4i + j, bits 2k, 2k + 1 = the code of row i, column k0 + 4k + j; scale_bytes
//           [ceil(n_out / 16)][nb][320 bytes]: the 16 rows' F16 d (32 bytes), dmin (32), then per sub-block s the 16
//           rows' byte sc | m << 4 as the file's (at 64 + 16 s + i). 84 bytes per 256 columns, as the file.
//           GGUF Q3_K (x = d (sc − 32) (q − 4) a 16-column sub-block, q three bits, sc six; the AVX2 kernel): data as
//           Q2_K's, holding the low 2 bits of u = q (in [0, 7]); scale_bytes [ceil(n_out / 16)][nb][800 bytes]: the 16
//           rows' F16 d (32 bytes), their int8 sc − 32 (16 sub-blocks × 16 rows, byte 32 + 16 s + i), then per
//           sub-block s a 32-byte line of the third bits at 288 + 32 s (byte 4 (i % 8) + j, bit 4 (i / 8) + k: that of
//           row i, column 16 s + 4k + j). 114 bytes per 256 columns (the file: 110).
//           GGUF Q6_K (256-column blocks, x = d sc (q − 32), q six bits, sc int8 a 16 columns; the int8 kernel and
//           AVX2's, kernels/cpu/gemm_rows16_kquant_avx2.cpp):
//           data as Q5_0's (the low 4 bits of q); scale_bytes [ceil(n_out / 16)][nb][1312 bytes]: the 16 rows' F16
//           d (32 bytes), their sc (16 sub-blocks × 16 rows, byte 16 s + i), then for each 32 columns two 64-byte
//           planes of q's bits 4 and 5 (plane p, byte 4i + j, bit 2c + h: bit 4 + p of row i's q at column
//           32g + 8c + 4h + j). 210 bytes per 256 columns, as the file.
// Rows16 takes weight-only (act None) weights with n_in a multiple of 32: Int4 without g_idx, per channel or in
// groups of a multiple of 16 columns (the GEMM form reads 8-column chunks; 16: an act-order slice's held groups,
// common/act_order.h); MXFP4 / NVFP4 without a scale byte the decode's fast conversion does not
// take (fp4_rows16_scales_ok); GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_NL in the
// file's blocks
// (gguf_layout File).
#pragma once
#include <cstdint>
#include <string>

namespace tp {

struct PackedWeight;
enum class WeightFormat : uint8_t;

enum class RowsLayout : uint8_t { Rows, Rows16, Rows64 };

const char* rows_layout_name(RowsLayout l);  // "rows", "rows16", "rows64"

// Rows64: W8A8 Int8 weights (per-channel scales, int8 activations) in oneDNN's AMX int8 weight order, so that its
// prefill GEMM reads them as they are (no copy a call; kernels/cpu/gemm_int_w8a8_rows64.cpp). Wᵀ [n_in, n_out] in
// oneDNN's tag BA16a64b4a: data [n_out / 64][n_in / 64][16][64][4] — per block of 64 rows and 64 columns, for each
// 4 columns k0 .. k0 + 3 (k0 = 64 kb + 4 t) 256 bytes, byte 4i + j = row i's signed code at column k0 + j. One
// 64-byte load holds 16 rows × 4 columns (an int32 lane a row, as GGUF Q8_0's Rows16 chunks but signed). The same
// bytes as Rows (no padding: n_out and n_in multiples of 64); scales [n_out] as Rows.
// Why w cannot be held in Rows64 ("" when it can): not Int8, activations not int8 per token / static, groups,
// zero points, g_idx, n_out or n_in not a multiple of 64.
std::string rows64_refusal(const PackedWeight& w);
// Row r's n_in signed codes, in column order, out of Rows64 data (n_in columns).
void rows64_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes);

// Whether none of the n scale bytes at sb is one the Rows16 decode cannot take: MXFP4's E8M0 0 (2⁻¹²⁷, a
// subnormal) and 255 (NaN), NVFP4's E4M3 NaN (0x7f, 0xff). E4M3 0 and subnormals are taken.
bool fp4_rows16_scales_ok(const uint8_t* sb, int64_t n, bool mx);

// Why w cannot be held in Rows16 ("" when it can): its format, activation quantization, n_in, groups, g_idx or
// scale bytes. Reads w's fields, whichever layout it is in.
std::string rows16_refusal(const PackedWeight& w);

// Row r's n_in / 2 code bytes, in the Rows order, out of Rows16 data (n_in columns).
void rows16_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes);

// Row r's n_in code bytes (q + 128), in column order, out of a GGUF Q8_0 weight's Rows16 data.
void rows16_q8_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes);

// A GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_NL row's bytes of scale entries
// (Q5_0, Q5_1, Q5_K, Q6_K, Q3_K: and high bits) in Rows16 (scale_bytes holds this per held row).
int64_t rows16_gguf_scale_bytes(WeightFormat f, int64_t n_in);

// Row r of a GGUF weight held in Rows16, as the file's blocks (dtype_row_bytes of its type) into out.
void rows16_gguf_file_row(const PackedWeight& w, int64_t r, uint8_t* out);

// Row r's n entries of a per-row array held in Rows16 order ([rows / 16][n][16]), into out.
template <class T>
void rows16_entries(const T* a, int64_t n, int64_t r, T* out) {
  const T* p = a + (r / 16) * n * 16 + r % 16;
  for (int64_t g = 0; g < n; ++g) out[g] = p[g * 16];
}

// w (Int4, Mxfp4, Nvfp4, GGUF Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_NL; Int8 between Rows
// and Rows64; checked) into layout `to`, in place (nothing when it is already there). To Rows16 / Rows64 throws
// tp::Error with rows16_refusal's / rows64_refusal's reason when w cannot be held so; w is then left as it was.
void set_rows_layout(PackedWeight* w, RowsLayout to);

}  // namespace tp
