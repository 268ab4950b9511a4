// The byte layouts a GGUF weight's rows can be held in (PackedWeight::gguf_layout), and the conversions
// between them, one row at a time. Every layout holds the same bytes a row as the file (no padding, so the
// resident and streamed bytes stay the file's); only their order differs.
//   File        the GGUF blocks as stored (common/dtype.h)
//   Q8_0Quads   Q8_0 rows regrouped for the AVX-512 VNNI kernel (kernels/cpu/gemm_gguf_simd.inc), which
//               then reads whole 64-byte vectors with no shuffles, one sequential stream a row. A row of nb
//               blocks (n_in = 32·nb) is its quads of 4 blocks in turn; quad q (blocks 4q .. 4q+k−1, k =
//               min(4, nb − 4q)) starts at byte 136q and holds: the k F16 scales (2k bytes), then 16k bytes
//               = weights 0..15 of each of its blocks in turn, then 16k bytes = weights 16..31 of each; every
//               code stored as the unsigned byte q + 128 (the int8 code XOR 0x80).
//   Q5_0Quads   Q5_0 rows regrouped likewise, so the AVX-512 VNNI kernel gets 128 codes from one 64-byte load
//               and their fifth bits as two 64-bit masks. Quad q (blocks 4q .. 4q+k−1, k = min(4, nb − 4q))
//               starts at byte 88q and holds: the k F16 scales (2k bytes); the fifth bits of weights 0..15 of
//               each block in turn (2k bytes: 16-bit word j = the low half of block 4q+j's qh); those of
//               weights 16..31 (2k bytes: the high halves); then the k blocks' 16 nibble bytes in turn (16k
//               bytes, as in the file: low nibble weight i, high nibble weight 16 + i).
//   Q4_0Groups, Q8_0Groups, Q5_0Groups
//               rows regrouped 16 blocks a step so that each int32 lane of the AVX-512 VNNI kernel's vpdpbusd
//               sums one block (lane j: block 16G + j; no per-block lane sums, one float fma per 16 blocks).
//               Group G (blocks 16G .. 16G+k−1, k = min(16, nb − 16G)) starts at byte 16·B·G (B: the block's
//               bytes, 18 / 34 / 22) and holds the k F16 scales (2k bytes), then
//                 Q4_0: 4 code vectors of 4k bytes: vector v, byte 4j+i = code byte 4v+i of block j (low
//                       nibble weight 4v+i, high nibble weight 16+4v+i);
//                 Q8_0: 8 code vectors of 4k bytes: vector t, byte 4j+i = weight 4t+i of block j, stored as the
//                       unsigned byte q + 128;
//                 Q5_0: 8 fifth-bit masks of 4k bits each, packed from bit 0 of 4k bytes (mask t, bit 4j+i =
//                       the fifth bit of weight 4t+i of block j, i.e. bit 4t+i of its qh), then the 4 code
//                       vectors of 4k bytes as Q4_0's.
#pragma once
#include <cstdint>

namespace tp {

enum class GgufLayout : uint8_t { File, Q8_0Quads, Q5_0Quads, Q4_0Groups, Q8_0Groups, Q5_0Groups };

const char* gguf_layout_name(GgufLayout l);  // "file", "q8_0_quads", "q5_0_quads", "q4_0_groups", ...

// One Q8_0 row of n_in columns (a multiple of 32) from the file layout into Q8_0Quads and back. `in` and
// `out` are 34 · n_in / 32 bytes each and must not overlap.
void q8_0_row_to_quads(const uint8_t* in, int64_t n_in, uint8_t* out);
void q8_0_row_from_quads(const uint8_t* in, int64_t n_in, uint8_t* out);
// One Q5_0 row likewise (22 · n_in / 32 bytes each).
void q5_0_row_to_quads(const uint8_t* in, int64_t n_in, uint8_t* out);
void q5_0_row_from_quads(const uint8_t* in, int64_t n_in, uint8_t* out);
// One row of the matching format (Q4_0 / Q8_0 / Q5_0; n_in a multiple of 32) from the file layout into layout
// l (a *Groups one) and back; the same number of bytes, not overlapping.
void gguf_row_to_groups(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out);
void gguf_row_from_groups(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out);
// One row held in layout l (not File) back into the file layout: the matching *_row_from_quads / _groups.
void gguf_row_to_file_layout(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out);
// One file-layout row into layout l (not File: nothing is written for File).
void gguf_row_from_file_layout(GgufLayout l, const uint8_t* in, int64_t n_in, uint8_t* out);

}  // namespace tp
