// The layouts an MXFP4 / NVFP4 weight's codes and block scales can be held in (PackedWeight::fp4_layout), and
// the conversions between them.
//   Rows    as the checkpoint: row r's codes at data + r · n_in / 2 (two a byte, low nibble first), its block
//           scale bytes at scale_bytes + r · nb (nb = n_in / 16 for NVFP4, n_in / 32 for MXFP4)
//   Rows16  GEMM form for the AVX512-BF16 decode (kernels/cpu/gemm_fp4_rows16.cpp): rows in blocks of 16, so
//           that one 64-byte load decodes into vectors of 16 rows × 2 columns. data: [ceil(n_out / 16)]
//           [n_in / 8][64 bytes] — per block of 16 rows and 8 columns k0 .. k0 + 7, 32 little-endian 16-bit
//           words, word 2i + t holding in its nibble n (bits 4n .. 4n + 3) the code of row i, column
//           k0 + 2n + t; scale_bytes: [ceil(n_out / 16)][nb][16] — the 16 rows' bytes of each block. Rows past
//           n_out (to the next 16) hold code 0 and scale byte 0 (NVFP4) or 127 (MXFP4, 1.0): the resident bytes
//           grow by at most 15 rows. n_in a multiple of 32, weight-only (act None), and no scale byte that the
//           decode's fast conversion does not take (fp4_rows16_scales_ok).
#pragma once
#include <cstdint>

namespace tp {

struct PackedWeight;

enum class Fp4Layout : uint8_t { Rows, Rows16 };

const char* fp4_layout_name(Fp4Layout l);  // "rows", "rows16"

// Whether none of the n scale bytes at sb is one the Rows16 decode cannot take: MXFP4's E8M0 0 (2⁻¹²⁷, a
// subnormal) and 255 (NaN), NVFP4's E4M3 NaN (0x7f, 0xff). E4M3 0 and subnormals are taken.
bool fp4_rows16_scales_ok(const uint8_t* sb, int64_t n, bool mx);

// Row r of a Rows16 weight (data and scale_bytes as above, n_in columns, nb blocks a row) in the Rows layout:
// n_in / 2 code bytes into codes, nb scale bytes into scales.
void fp4_rows16_row(const uint8_t* data, const uint8_t* scale_bytes, int64_t n_in, int64_t nb, int64_t r,
                    uint8_t* codes, uint8_t* scales);

// w (Mxfp4 / Nvfp4, checked) into layout `to`, in place (nothing when it is already there). To Rows16 throws
// tp::Error naming what does not fit (activation quantization, n_in not a multiple of 32, a scale byte
// fp4_rows16_scales_ok refuses); w is left as it was.
void set_fp4_layout(PackedWeight* w, Fp4Layout to);

}  // namespace tp
