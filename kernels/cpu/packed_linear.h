// Private to kernels/cpu: linear() for packed (non-dense) weights — the dispatch to each format's kernel,
// and the reference every kernel is tested against.
#pragma once
#include <cstdint>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

// y[m, n_out] = x[m, n_in] · Wᵀ for a packed weight: the format's kernel where this CPU has one, else the
// reference.
void packed_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// The reference: x's activation quantization applied as w.act says (int8: q = round(x / s) clamped to
// [-127, 127], s = max|x| / 127 of the row (or of each act_group columns) or act_scale; fp8: E4M3 of x / s,
// s = max|x| / 448 or act_scale; then x = q · s) — or, with w.act_bf16, x rounded to BF16 — W dequantized
// (dequantize_rows) a tile of rows at a time into F32, dot products in F64 accumulation rounded to F32. Correct
// for every format, slow: the yardstick, and the path of formats without a kernel yet.
void packed_linear_reference(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// x [m, n_in] with w.act's activation quantization applied (quantized, then dequantized), into out. Dynamic
// scales are per row, or per `act_group` columns of a row when act_group > 0.
void fake_quantize_activations(const float* x, int64_t m, int64_t n_in, ActQuant act, float act_scale,
                               int64_t act_group, float* out);

}  // namespace tp::cpu::detail
