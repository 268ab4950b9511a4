// What one rank loads of a model's weights: its slice of each linear layer's weight, in the format the file
// stores it (dense F32/BF16 converted to the runtime dtype; packed formats kept as they are: GGUF Q8_0, Q4_0,
// Q4_1, Q5_0, Q4_K and Q6_K blocks copied as they are unless WeightLoadOptions::keep_quantized is false), and
// the small vectors (norms). Every weight is refused at load when it holds NaN or inf, naming the tensor and
// the element (for kept GGUF blocks: a scale / min that is not finite, naming the tensor, row and block; the
// codes of a block with finite scales are finite by construction). Only the bytes of the slice are read from
// the mapping.
//
// A linear slice is given as row ranges of one or more tensors [total_rows, n_in] stacked (fused Q|K|V,
// gate|up; column-parallel: each rank's rows), restricted to the columns `cols` (row-parallel: each rank's
// input range). A column slice of a packed tensor kept packed must start and end on its blocks / scale groups
// (weight_column_align), else FormatError naming the tensor, its blocks and the TP degrees that do slice it on
// them (SmolLM2's 576-column tensors cannot be Q4_K at all — GGUF needs rows of whole 256-blocks; its
// 1536-column ffn_down in Q4_K slices at tp 1 and 3). Dequantized slices may start anywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/linear.h"
#include "parallel/tp_layout.h"
#include "rank/model_file.h"

namespace tp {

// Rows `rows` of tensor `name` [total_rows, n_in].
struct RowSlice {
  std::string name;
  int64_t total_rows;
  Range rows;
};

struct WeightLoadOptions {
  DType runtime = DType::BF16;  // dense weights' dtype at run time: F32 or BF16; with BF16 the weight-only
                                // compressed-tensors formats take x rounded to BF16 too (PackedWeight::act_bf16)
  // GGUF block-quantized tensors: true keeps their blocks (run by kernels/cpu/gemm_gguf), false dequantizes
  // them to `runtime` (config model.quantized: keep | dequantize).
  bool keep_quantized = true;
};

// "keep" / "dequantize" (config model.quantized, --quantized) -> keep_quantized; throws InputError otherwise.
inline constexpr const char* kQuantizedModeNames[] = {"keep", "dequantize"};
bool parse_quantized_mode(const std::string& name, const std::string& what);

// The stacked slice [sum of the parts' rows, cols.size()]: one weight per run of consecutive parts held in
// the same format (usually one for all; a GGUF mix such as Q4_K_M keeps attn_v in Q6_K beside Q4_K attn_q and
// attn_k: two), in part order. Throws FormatError (missing or mis-shaped tensor, a column slice off the
// blocks, NaN / inf).
std::vector<cpu::Weight> load_linear(const ModelFile& f, const WeightLoadOptions& o, int64_t n_in, Range cols,
                                     const std::vector<RowSlice>& parts);

// A vector tensor [n] (a norm) as F32; NaN / inf refused.
std::vector<float> load_vector(const ModelFile& f, const std::string& name, int64_t n);

// The rows [rows.begin, rows.end) of a table read through the mapping in the file's type (the token
// embedding): refused when one holds NaN / inf.
void check_embedding_rows(const ModelFile& f, const TensorView& t, int64_t hidden, Range rows);

}  // namespace tp
