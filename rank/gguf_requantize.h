// Rows of GGUF block types no kernel keeps, rewritten at load into the block type they are held in
// (common/packed_weight.h gguf_held_dtype):
//   IQ4_XS -> IQ4_NL: one IQ4_NL block a 32-weight sub-block, d' = d * (ls - 32) rounded to F16 (relative error
//             <= 2^-11 of d'), the same codes (4.5 bits a weight for 4.25).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace tp {

// Converts one row of n weights (n a multiple of dtype_block_elems(t)) of type t at src into
// dtype_row_bytes(gguf_held_dtype(t), n) bytes at dst. t must be IQ4_XS (else tp::Error). The output's block
// scales may be non-finite when the input's are (callers check them as for a kept type).
void requantize_gguf_row(DType t, const void* src, void* dst, int64_t n);

}  // namespace tp
