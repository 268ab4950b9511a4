// Round-to-nearest quantization of one linear layer's weight W [n_out, n_in] (y = x · Wᵀ), with the scales
// and zero points computed as compressed-tensors' observers do (llm-compressor's "memoryless_minmax"), and the
// per-group primitives that GPTQ and AWQ (rank/quant_gptq.h, rank/quant_awq.h) reuse.
//
// Kinds and their grids (q the stored integer / code, s the scale):
//   Int, bits b in {3, 4, 8}, q in [qmin, qmax] = [-2^(b-1), 2^(b-1) - 1]:
//     symmetric:  s = max(|min|, |max|) / ((qmax - qmin) / 2), q = clamp(round(w / s)), w' = q · s
//     asymmetric: min' = min(min, 0), max' = max(max, 0), s = (max' - min') / (qmax - qmin),
//                 z = clamp(qmin - round(min' / s)), q = clamp(round(w / s) + z), w' = (q - z) · s
//     over each group of group_size columns of a row (group_size 0: the whole row = per channel).
//   Fp8 (E4M3) per channel: s = max|w| / 448 of the row, code = e4m3(w / s), w' = e4m3 · s.
//   Fp8 blocks (block_rows > 0, group_size > 0: DeepSeek's / Qwen3's 128 × 128): the same over each block of
//     block_rows rows × group_size columns, the last ones partial where they do not divide (compressed-tensors'
//     strategy "block": a ceil'ed scale grid).
//   Mxfp4: per 32 columns an E8M0 scale 2^e, e = floor(log2(max|w|)) - 2 (OCP MX: E2M1's emax is 2),
//     code = e2m1(w / 2^e) saturating at ±6.
//   Nvfp4: a global scale G = 448 · 6 / max|W| and per 16 columns an E4M3 scale
//     s8 = e4m3(max|w| / 6 · G); code = e2m1(w · G / s8), w' = e2m1 · s8 / G. max|W| is the weight's own, or
//     (nvfp4_amax) that of the fused group it belongs to: compressed-tensors gives q|k|v and gate|up one G
//     (llm-compressor's fuse_weight_observers), because vLLM keeps one G per fused linear (the largest).
// A zero scale (an all-zero group) is replaced by 1 so nothing divides by zero.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

enum class QuantKind : uint8_t { Int, Fp8, Mxfp4, Nvfp4 };

struct QuantSpec {
  QuantKind kind = QuantKind::Int;
  int bits = 8;              // Int: 3, 4 or 8; Fp8 8; Mxfp4 / Nvfp4 4
  bool symmetric = true;     // Int only
  int64_t group_size = 0;    // Int: columns a scale (0: per channel); Mxfp4 32, Nvfp4 16; Fp8 0 (per channel)
                             // or a block's columns
  int64_t block_rows = 0;    // Fp8 blocks: rows a scale (with group_size columns); 0: per channel
  int64_t group(int64_t n_in) const { return group_size > 0 ? group_size : n_in; }
};

// Throws InputError naming the problem when `spec` cannot quantize a weight of n_in columns: bits not
// 3/4/8, a group size that does not divide n_in (with the ones that do, up to 256), FP4 blocks not dividing.
void check_quant_spec(const QuantSpec& spec, int64_t n_in, const std::string& what);

// Scale and zero point of one Int group.
struct IntParams {
  float scale = 1.0f;
  int zero = 0;  // q units; 0 when symmetric
};
// The params of values v[0, n) (one group of one row). bf16_scale: the scale rounded to BF16 (as a BF16 output
// stores it) and the zero point computed from the rounded scale, so that the grid quantized to is the one stored.
IntParams int_params(const QuantSpec& spec, const float* v, int64_t n, bool bf16_scale = false);
// q of one value, and its dequantized value.
int int_quant(const QuantSpec& spec, const IntParams& p, float w);
inline float int_dequant(const IntParams& p, int q) { return float(q - p.zero) * p.scale; }

// A quantized weight, in the terms every output format needs (the compressed-tensors writer packs these).
struct QuantizedLinear {
  QuantSpec spec;
  int64_t n_out = 0, n_in = 0;
  std::vector<int8_t> q;             // Int: [n_out, n_in] values in [qmin, qmax]
  std::vector<uint8_t> codes;        // Fp8: E4M3 bytes [n_out, n_in]; Mxfp4 / Nvfp4: E2M1 nibbles one a byte
  std::vector<float> scales;         // Int: [n_out, n_groups]; Fp8: [n_out], blocks [ceil(n_out / block_rows),
                                     // n_groups]
  std::vector<int8_t> zeros;         // Int asymmetric: [n_out, n_groups]; else empty
  std::vector<int32_t> g_idx;        // Int act-order (GPTQ): [n_in] group of each column; empty: c / group
  std::vector<uint8_t> scale_bytes;  // Mxfp4: E8M0 [n_out, n_in / 32]; Nvfp4: E4M3 [n_out, n_in / 16]
  float global_scale = 1.0f;         // Nvfp4: G (w' = e2m1 · s8 / G)

  int64_t n_groups() const;          // Int: scale groups a row; Fp8 blocks: ceil(n_in / group_size)
  // W' [n_out, n_in] F32: what the quantized weight computes with.
  std::vector<float> dequantize() const;
};

// RTN of w [n_out, n_in] (F32, row-major).
// The E8M0 byte (biased exponent) of an MXFP4 block's scale from its largest |value| (compressed-tensors' rule:
// amax rounded to a power of two at E2M1's mantissa precision, times 2^-2); 0 for an all-zero block.
uint8_t mx_exponent_byte(float amax);

// NVFP4's global scale G = 448 · 6 / amax from the max|value| it covers, as compressed-tensors rounds it:
// (1 / amax) · 2688 in F32 (1 for amax 0).
float nvfp4_global_scale(float amax);

// nvfp4_amax (NVFP4 only): the max|W| G comes from when w is one of a fused group (≥ w's own); 0: w's own.
QuantizedLinear quantize_rtn(const QuantSpec& spec, const float* w, int64_t n_out, int64_t n_in,
                             float nvfp4_amax = 0);

// ‖X·W'ᵀ - X·Wᵀ‖² / ‖X·Wᵀ‖² for X [n_tok, n_in]: the relative output error of a quantized layer (the tests'
// and the searches' measure).
double relative_output_error(const float* x, int64_t n_tok, const float* w, const float* w_q, int64_t n_out,
                             int64_t n_in);

}  // namespace tp
