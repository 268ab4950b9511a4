// Private to kernels/cpu: y = x · Wᵀ for GGUF block weights at prefill sizes, by dequantizing W to BF16 and
// running oneDNN's BF16 matmul (the path of the BF16 model, onednn_matmul.h) instead of the int8 VNNI tiles
// of gemm_gguf.h. llama.cpp's CUDA backend does the same above a batch size (dequantize to F16 + cuBLAS).
//
// Where: CPUs with AVX-512 BF16 (Zen 4, Cooper Lake, Sapphire Rapids and later) where oneDNN has a BF16
// matmul, when enabled (set_gguf_bf16_enabled; off by default, see there); gemm_gguf(kernel = Best) then takes
// this path where gguf_bf16_preferred (m ≥ gguf_bf16_min_m() = 64) and the int8 tiles below it (decode,
// m = 1, keeps its bits). Elsewhere gguf_bf16_min_m() is INT64_MAX and nothing changes.
//
// How: the rows of W are dequantized (dequantize_rows: every GGUF format and row layout) a slab of
// `slab_rows` output rows at a time into a per-thread BF16 scratch [slab_rows, n_in], and each slab is
// multiplied by all m rows of x (x rounded to BF16 once a call) while it is in cache. Cost over the int8
// tiles: one pass over W a call (n_out · n_in dequantized elements), amortized over m rows.
//
// Numerics — not those of the int8 tiles: the dequantized weight d·q (exact in F32) is rounded to BF16
// (relative error ≤ 2^-9 per element; Q8_0's d·q has up to 8 + 11 significant bits, so it is rounded; the
// 4-bit formats' d·q fit 8 bits only when d's mantissa is short), x is rounded to BF16 (≤ 2^-9) instead of
// the int8 block quantization llama.cpp's CPU backend uses (≤ d_x/2 per element, 2^-8 of the block's max),
// and products are summed in F32 by oneDNN in its own order. Versus the F32 reference (W dequantized, x
// unquantized, F64 sums) NMSE 4e-6 .. 3.3e-5 measured (tests/kernels/test_gemm_gguf_bf16.cpp bounds it at 1e-4).
// Batch invariance holds within this path only (a row of x gives the same bits whatever the other rows,
// as far as oneDNN's BF16 matmul keeps one order per output for every m; tested for the shapes we run); a
// row computed in a call of m < gguf_bf16_min_m() (the int8 tiles) differs from the same row in a larger
// call by the two methods' rounding.
#pragma once
#include <cstdint>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

// Whether this CPU has the path (avx512f/bw/vl + avx512_bf16, and oneDNN's BF16 matmul).
bool gguf_bf16_available();

// Process-wide, off by default (cpu::set_gguf_prefill_bf16 in linear.h): whether Best may take this path.
// Off, because it breaks DESIGN §5's batched == alone for GGUF models kept quantized: a row's numerics then
// depend on the size of the call it is in (a decode row batched into a step of ≥ 64 rows gets BF16 numerics,
// alone it gets the int8 tile's), and EngineReal.*BatchedEqualsAlone* diverge at non-ties (gaps 0.05-0.28).
void set_gguf_bf16_enabled(bool on);
bool gguf_bf16_enabled();

// Smallest m gemm_gguf(kernel = Best) sends here; INT64_MAX where the path is not available or not enabled.
int64_t gguf_bf16_min_m();

// Whether gemm_gguf(kernel = Best) takes this path for w at m rows: m ≥ gguf_bf16_min_m(), and w not in the
// Q8_0Groups layout (whole 16-block groups: there the int8 tile already runs at the BF16 matmul's rate, and
// undoing the regrouping makes the dequantization 8x slower; measured in
// bench/results/gguf-prefill-bf16-zen4-*.md).
bool gguf_bf16_preferred(const PackedWeight& w, int64_t m);

// Rows [r0, r1) of GGUF weight w dequantized and rounded to BF16 (round to nearest even) into out
// [r1 - r0, w.n_in].
void dequantize_gguf_bf16(const PackedWeight& w, int64_t r0, int64_t r1, uint16_t* out);

// y[m, n_out] = x[m, n_in] · Wᵀ, W a GGUF block format. slab_rows: output rows of W dequantized at a time
// (0: the default, kGgufBf16SlabRows; ≥ n_out: the whole of W at once). Throws tp::Error where the path is
// not available.
constexpr int64_t kGgufBf16SlabRows = 256;
void gemm_gguf_bf16(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, int64_t slab_rows = 0);

}  // namespace tp::cpu::detail
