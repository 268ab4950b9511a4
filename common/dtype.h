// Element types of weights and activations, and the scalar conversions between them.
// Block-quantized types (GGUF, bit layouts as llama.cpp's ggml-common.h): 32 weights a block.
//   Q8_0: f16 d, 32 x int8 q           x = d * q            (34 bytes)
//   Q4_0: f16 d, 16 bytes of nibbles   x = d * (q - 8)      (18 bytes)
//   Q4_1: f16 d, f16 m, 16 bytes       x = d * q + m        (20 bytes)
//   Q5_0: f16 d, u32 qh (5th bits), 16 bytes of nibbles     x = d * (q - 16)   (22 bytes)
//   Q5_1: f16 d, f16 m, u32 qh, 16 bytes of nibbles         x = d * q + m      (24 bytes)
// Nibble order within a block: byte j holds weight j (low nibble) and weight j + 16 (high nibble); Q5_0's
// bit j of qh is the 5th bit of weight j.
// K-quants: 256-weight super-blocks.
//   Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32, 128 bytes of nibbles;
//         x = d * sc_j * q - dmin * m_j                     (144 bytes)
//   Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 x int8 scales (one per 16 weights), f16 d;
//         x = d * sc_j * (q - 32)                           (210 bytes)
//   Q5_K: f16 d, f16 dmin, 12 bytes of (scale, min) pairs as Q4_K's, 32 bytes of 5th bits, 128 bytes of nibbles;
//         x = d * sc_j * q - dmin * m_j                     (176 bytes)
//   Q2_K: 16 bytes of 4-bit (scale, min) pairs for 16 sub-blocks of 16, 64 bytes of 2-bit q, f16 d, f16 dmin;
//         x = d * sc_j * q - dmin * m_j                     (84 bytes)
//   Q3_K: 32 bytes of high bits, 64 bytes of 2-bit low bits, 12 bytes of 6-bit scales (16 sub-blocks of 16), f16 d;
//         x = d * (sc_j - 32) * (q - 4)   (q's third bit set: q - 4 in [0, 3]; clear: in [-4, -1])   (110 bytes)
//   IQ4_XS: f16 d, u16 high 2 bits and 4 bytes of low 4 bits of 8 scales (sub-blocks of 32), 128 bytes of nibbles;
//         x = d * (ls_j - 32) * kIq4Values[q]               (136 bytes)
// Non-linear 32-weight blocks: IQ4_NL: f16 d, 16 bytes of nibbles (Q4_0's order); x = d * kIq4Values[q] (18 bytes).
// The one type no kernel keeps, IQ4_XS, is read and held at load as IQ4_NL (rank/gguf_requantize.h).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tp {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K, Q5_1, Q5_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS };

inline constexpr int64_t kQuantBlock = 32;    // weights per block of Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL
inline constexpr int64_t kQuantKBlock = 256;  // weights per super-block of Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS
// IQ4_NL / IQ4_XS's 16 code values (llama.cpp's kvalues_iq4nl).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

std::string_view dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
// "iq4_nl", "iq4_xs" (case-insensitive); throws InputError.
DType parse_dtype(std::string_view name);
bool is_quantized(DType t);
// The dtypes a model's weights can be held in at run time (model.dtype, --dtype): bf16 and f32. The one
// statement of that rule: every flag, config key and loader checks through these.
inline constexpr const char* kRuntimeDTypeNames[] = {"bf16", "f32"};
bool is_runtime_dtype(DType t);
// "<what> must be bf16 or f32, not '<name>'" when `name` is not one of them, else "".
std::string runtime_dtype_error(std::string_view name, std::string_view what);
// Parses a runtime dtype name; throws InputError with runtime_dtype_error's message.
DType parse_runtime_dtype(std::string_view name, std::string_view what);
// Bytes of one block (quantized) or one element (float types).
int64_t dtype_block_bytes(DType t);
// Elements in one block: 32 for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL, 256 for the K-quants and IQ4_XS,
// 1 otherwise.
int64_t dtype_block_elems(DType t);
// Bytes of a row of n elements; n must be a multiple of dtype_block_elems(t) (caller checks).
inline int64_t dtype_row_bytes(DType t, int64_t n) { return n / dtype_block_elems(t) * dtype_block_bytes(t); }

// Where a quantized type's F16 scales sit in its block: n of them (d, then the min's scale dmin / m) from byte at —
// Q4_1 / Q5_1 / Q4_K / Q5_K {0, 2}, Q2_K {80, 2}, Q3_K {108, 1}, Q6_K {208, 1}, the others {0, 1}.
struct BlockF16s {
  int at, n;
};
BlockF16s block_f16s(DType t);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow -> inf

// llama.cpp's get_scale_min_k4: the 6-bit scale sc and min m of sub-block j (0..7) of a Q4_K super-block, from its
// 12 scale bytes q.
inline void q4_k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// One Q3_K super-block (110 bytes at `block`) as integers: d's F16 bits, the 16 sub-block scales sc_j - 32 (in
// [-32, 31]) and the 256 codes q - 4 (in [-4, 3]), so that x_i = d * scales[i / 16] * codes[i].
void q3_k_block_codes(const void* block, uint16_t* d, int8_t scales[16], int8_t codes[256]);

// Dequantizes n elements (a multiple of the block size for quantized types) of type t at src into dst,
// as llama.cpp's dequantize_row_<type> does: the same operations in the same order (bit-equal up to the
// compiler's FMA contraction of d * q - m). n = 0 reads and writes nothing (src and dst may then be null).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace tp
