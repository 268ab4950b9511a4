// A linear layer's weight as it is stored — one rank's slice W [n_out, n_in] (y = x · Wᵀ) in its format, with
// its scales — the value the loaders produce (rank/weight_loader.h) and the kernels read as it is
// (kernels/cpu/linear.h). Nothing dequantizes a whole weight at load (DESIGN §3).
//
// Formats and what each holds (`data`: rows contiguous, row r at data + r * row_bytes()):
//   F32, BF16        dense values                                   scales: none
//   GgufQ8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K
//                    GGUF blocks (their scales inside; layouts in common/dtype.h), n_in a multiple of the block
//                    (32; 256 for the K types)
//   Int8             int8 q, w = (q - zero) · scale                  scales [n_out, n_groups] f32
//   Int4             int4 q two a byte (column 2j low nibble, 2j+1 high), stored u = q + 8, w = (q - zero) · scale
//                    zeros (asymmetric): int8 [n_out, n_groups] in q units; empty: symmetric (zero 0)
//                    group of column c: g_idx[c] when g_idx is given (act-order), else c / group_size;
//                    with g_idx a row holds g_idx_groups groups (a row-parallel slice of an act-order weight
//                    keeps the groups its columns use, which may be more than n_in / group_size)
//   Fp8E4M3          E4M3 bytes, w = fp8 · scale: per tensor (scales [1]), per channel ([n_out]) or per
//                    block_out × group_size block ([ceil(n_out / block_out), ceil(n_in / group_size)])
//   Mxfp4            E2M1 values two a byte (low nibble first), E8M0 scale bytes [n_out, n_in / 32] in
//                    `scale_bytes` (w = e2m1 · 2^(e - 127))
//   Nvfp4            E2M1 values two a byte, E4M3 scale bytes [n_out, n_in / 16] in `scale_bytes`,
//                    w = e2m1 · e4m3 · global_scale
// Activations (act): None — x is used as given (A16: computed in F32, or BF16 for BF16 weights); Int8Dynamic —
// x quantized to int8 per token (row of x), scale max|x| / 127, or per act_group columns of the row when
// act_group > 0; Int8Static — one scale act_scale; Fp8Dynamic / Fp8Static likewise for E4M3 (max 448).
// Int8 and Int4 weights (W8A8, W4A8) and Fp8E4M3 weights take activation quantization. W8A8 schemes use them; the kernels may also quantize activations on
// their own where a format's fastest kernel does (GGUF blocks: llama.cpp's Q8 activations), said per kernel.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/rows16_layout.h"
#include "common/gguf_layout.h"

namespace tp {

enum class WeightFormat : uint8_t {
  F32, BF16,
  GgufQ8_0, GgufQ4_0, GgufQ4_1, GgufQ5_0, GgufQ4_K, GgufQ6_K,
  Int8, Int4,
  Fp8E4M3,
  Mxfp4, Nvfp4,
  GgufIq4Nl,  // GGUF IQ4_NL: Q4_0's blocks, each 4-bit code the int8 kIq4Values[q] (common/dtype.h) under d
  GgufQ5_1,   // GGUF Q5_1: x = d q + m, q five bits (Q4_1 with Q5_0's fifth bits)
  GgufQ5_K,   // GGUF Q5_K: x = d sc q − dmin m a 32-column sub-block, q five bits (Q4_K with a fifth bit a weight)
  GgufQ2_K,   // GGUF Q2_K: x = d sc q − dmin m a 16-column sub-block, q two bits, sc and m four
  GgufQ3_K,   // GGUF Q3_K: x = d (sc − 32) (q − 4) a 16-column sub-block, q three bits, sc six
};

enum class ActQuant : uint8_t { None, Int8Dynamic, Int8Static, Fp8Dynamic, Fp8Static };

std::string_view weight_format_name(WeightFormat f);  // "f32", "bf16", "q8_0", ..., "int4", "fp8_e4m3", "nvfp4"
std::string_view act_quant_name(ActQuant a);           // "none", "int8_dynamic", ...

// GGUF block formats and their block dtypes (common/dtype.h): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_NL.
bool is_gguf_format(WeightFormat f);
DType gguf_block_dtype(WeightFormat f);    // throws tp::Error for a format that is not a GGUF block format
bool is_gguf_block_dtype(DType t);         // a DType a GGUF weight is kept in: one of those eleven
// The dtype a GGUF weight stored as t is held in at run time (model.quantized: keep): t itself when a kernel keeps
// it, IQ4_NL for IQ4_XS (rank/gguf_requantize.h); float types are returned as they are.
DType gguf_held_dtype(DType t);
WeightFormat gguf_weight_format(DType t);  // throws tp::Error unless is_gguf_block_dtype(t)

// Bits a weight takes on average, scales included (for reports and the planner): F32 32, BF16 16, Q8_0 8.5, ...
double weight_format_bits(WeightFormat f, int64_t group_size);

// Columns a row-parallel slice must start and end on (a whole block or scale group): 1 for dense, 32 / 256
// for GGUF blocks, group_size for grouped int, 32 / 16 for MX/NV FP4, group_size for FP8 block scales.
int64_t weight_column_align(WeightFormat f, int64_t group_size);

// A 64-byte aligned byte buffer (AVX-512 loads), movable, not copyable.
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(int64_t n);  // zero-filled; throws tp::Error when it cannot allocate
  AlignedBytes(AlignedBytes&& o) noexcept : p_(std::move(o.p_)), n_(o.n_) { o.n_ = 0; }
  AlignedBytes& operator=(AlignedBytes&& o) noexcept {
    p_ = std::move(o.p_);
    n_ = o.n_;
    o.n_ = 0;
    return *this;
  }
  uint8_t* data() { return p_.get(); }
  const uint8_t* data() const { return p_.get(); }
  int64_t size() const { return n_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> p_;
  int64_t n_ = 0;
};

struct PackedWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t n_out = 0, n_in = 0;
  int64_t group_size = 0;           // Int8/Int4: columns a scale group (n_in: per channel); Fp8 block: block_in
  int64_t block_out = 0;            // Fp8 block scales: rows a block; 0: not block scales
  AlignedBytes data;                // [n_out, row_bytes()]
  std::vector<float> scales;        // see the table above
  std::vector<int8_t> zeros;        // Int8/Int4 asymmetric zero points [n_out, n_groups]; empty: symmetric
  std::vector<int32_t> g_idx;       // Int8/Int4 act-order: [n_in] scale group of each column; empty: c / group_size
  std::vector<uint8_t> scale_bytes; // Mxfp4 E8M0 / Nvfp4 E4M3 block scales, [n_out, n_in / block]; GGUF Q4_0 /
                                    // Q4_1 / Q8_0 / Q4_K in Rows16: their scale entries (common/rows16_layout.h)
  float global_scale = 1.0f;        // Nvfp4
  ActQuant act = ActQuant::None;
  float act_scale = 0.0f;           // Int8Static / Fp8Static: the activations' scale
  int64_t act_group = 0;            // Int8Dynamic / Fp8Dynamic: columns a scale (0: the whole row)
  bool act_bf16 = false;            // x rounded to BF16 before the product (act None only): the BF16 runtime's
                                    // activations, as a dense BF16 weight's GEMV / GEMM takes them (vLLM's A16
                                    // kernels too; the AVX512-BF16 prefill of grouped Int weights then rounds the
                                    // dequantized weights to BF16 as well: kernels/cpu/packed_kernels.h); GGUF
                                    // Q4_0 / Q4_1 / Q4_K in Rows16 too, set by hand (the BF16 GEMM form's x; by
                                    // default they run on the int8 form, x quantized as llama.cpp does); false: x in F32
  int64_t g_idx_groups = 0;         // with g_idx: scale groups a row (0: ceil(n_in / group_size))
  GgufLayout gguf_layout = GgufLayout::File;  // GGUF: the order of each row's bytes (common/gguf_layout.h;
                                              // the CPU kernels may regroup Q8_0 / Q5_0 rows at load, same bytes)
  RowsLayout rows_layout = RowsLayout::Rows;  // Int4 / Mxfp4 / Nvfp4 / GGUF Q4_0 / Q4_1 / Q8_0 / Q4_K: where
                                              // codes and per-row scales lie
                                              // (common/rows16_layout.h; the CPU kernels may put them in 16-row
                                              // blocks at load; W8A8 Int8 in Rows64, oneDNN's AMX order). The table above is Rows; with Rows16, data,
                                              // scales, zeros and scale_bytes hold ceil(n_out / 16) · 16 rows

  int64_t row_bytes() const;        // bytes of one row of `data` (Rows16: the same bytes a row, in its block;
                                    // GGUF Q4_0 / Q4_1 / Q8_0 / Q4_K there: the codes, n_in / 2 or n_in,
                                    // their scales in scale_bytes)
  int64_t n_groups() const;         // scale groups a row (Int8/Int4/Fp8 block); 1 otherwise
  int64_t group_of(int64_t col) const { return g_idx.empty() ? col / group_size : g_idx[size_t(col)]; }
  // Bytes held: data, scales, zeros, g_idx and scale bytes (what a rank reports as resident).
  int64_t n_bytes() const;
};

// Throws tp::Error naming what does not fit: shape vs format (block multiples), the sizes of data, scales,
// zeros, g_idx and scale_bytes, g_idx values in [0, n_groups).
void check_packed_weight(const PackedWeight& w);

// Rows [r0, r1) of w as F32 [r1 - r0, n_in]: the reference every kernel is tested against (slow; tests, the
// converter, and formats without a kernel yet).
void dequantize_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out);

// A dense weight: F32 or BF16 rows of `src` (F32), converted.
PackedWeight pack_dense(WeightFormat f, int64_t n_out, int64_t n_in, const float* src);

// A copy of w, every field, its bytes in a buffer of their own (PackedWeight itself is move-only).
PackedWeight copy_packed_weight(const PackedWeight& w);

}  // namespace tp
