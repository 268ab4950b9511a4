// Finding NaN and ±inf in weights as they load: the first non-finite element of a buffer of F32, BF16 or F16
// values, told by the exponent bits (all ones). One pass over the buffer, on the kernels' threads
// (set_num_threads) when it is large; no floating-point compares, so -ffast-math cannot optimize it away.
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace tp::cpu {

// Index of the first element of src[0, n) that is NaN or ±inf; -1 when every element is finite.
// type: F32, BF16 or F16 (throws InputError for a quantized type: dequantize first).
int64_t first_non_finite(DType type, const void* src, int64_t n);

}  // namespace tp::cpu
