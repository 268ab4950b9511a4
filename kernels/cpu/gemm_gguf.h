// Private to kernels/cpu: y = x · Wᵀ for GGUF block weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_NL) read as they are stored, with int8 × int8 dot products.
//
// Activations are quantized on the fly, per row of x, to the type llama.cpp's CPU backend pairs with each
// weight type (its `vec_dot_type`), so that our results compare like with like with llama.cpp:
//   Q8_0, Q4_0, Q5_0, IQ4_NL  x as Q8_0: per 32-block, d = max|x| / 127 (kept rounded to F16, as llama.cpp
//                             stores it), q = round-half-even(x · 127 / max|x|) in [-127, 127]
//   Q4_1, Q5_1 weights        x as Q8_1: the same q and d, plus s = F16(d · Σq) for the min term
//   Q2_K .. Q6_K (K-quants)   x as Q8_K: per 256-block, iscale = -127 / (the value of largest magnitude),
//                             q = round-half-even(iscale · x) ≤ 127, d = 1 / iscale (F32), Σq per 16
// Each output is then Σ_blocks d_w · d_x · Σ(q_w · q_x) (+ the block's offset / min term), the integer sums
// exact (no saturation: every product pair fits int16, see gemm_gguf_simd.inc), the float sum in F32.
// Versus the F32 reference (W dequantized, x unquantized, F64 sums) the error is the activations' rounding:
// within Σ|w|·d_x/2 per output; NMSE ≈ 1e-5 on smooth activations, up to ~1e-3 with outliers in the block
// (tests/kernels/test_gemm_gguf.cpp states the bounds).
//
// Kernels: AVX-512 VNNI + VBMI (Q5_0 and Q8_0 in the file layout: two blocks a 512-bit vpdpbusd, the
// offsets exact in the integer sums; Q4_0, Q4_1 (its min term in a second accumulator), Q8_0Quads and Q5_0Quads
// (common/gguf_layout.h): four blocks a pair of vpdpbusd; Q4_0 / Q8_0 / Q5_0 *Groups (Q8_0Groups made at load by prepare_gguf_weight where a row is
// whole 16-block groups): 16 blocks, one a lane, 8 chained vpdpbusd; K-quants: vpmaddubsw + vpdpwssd on 512-bit vectors
// with the sub-block scales as int16), AVX2 (vpmaddubsw + vpmaddwd: the same integers), portable C++. Threads (OpenMP) split the output rows. Decode (m = 1) takes 4 weight rows a tile
// (2 for the K-quants): one activation load feeds several rows and the accumulator chains run side by side;
// for 1 < m < 16 each block of weights read is used for up to 4 rows of x while it is in registers. Prefill on
// AVX-512 VNNI (m ≥ 16; gemm_gguf_prefill.inc; the 32-block formats — the K-quants keep the tiles above): x is
// taken in blocks of up to 128 rows (its activation arrays ≤ 256 KiB, L2-resident); per block, each 4 weight
// rows of Q4_0 / Q4_1 / Q5_0 / Q8_0 (file layout) and Q8_0Quads / Q5_0Quads are decoded once into an L1 panel
// (the codes and scale vectors the decode tiles make in registers) and every 4 rows of x of the block pass
// over it in a 4 × 4 register tile (Q4_1: 4 × 2), x's bytes and scales loaded once a step for the 4 weight
// rows (the decode tiles: 2 rows × 4, x streamed from L2 / L3 again for every pair of rows); the *Groups
// layouts run their decode tile as 4 weight rows × 2 rows of x over the same blocks of x. The AVX2
// kernel of the 32-blocks (gemm_gguf_avx2_blocks.inc) works on chunks of 8 weight rows, one F32 chain per
// output (the block's whole integer sum, then one fma) kept as a lane of a vector of 8 rows; from m = 2 on it
// unpacks the chunk's codes once into an L1 panel and passes every row of x over it (batched decode, prefill).
// IQ4_NL (Q4_0's blocks, the codes' values kIq4Values[q]), Q5_1, Q5_K, Q2_K and Q3_K have no file-layout SIMD kernel:
// on every CPU with AVX2 they are held in Rows16 and run rows16_avx2_linear (gemm_rows16_avx2.cpp; Q5_K, Q2_K and Q3_K
// rows16_avx2_k_linear, gemm_rows16_kquant_avx2.cpp; IQ4_NL on AVX-512 VNNI rows16_int8_linear,
// gemm_rows16_int8.cpp); in the file layout (CPUs without AVX2, and tests) the Avx2 and Avx512Vnni kernels run them by
// the portable one.
// Batch invariance: on every kernel, each output (row of W, row of x) gets the same float operations in the
// same order whatever m and the tiling are, so row i of a batch has the bits of row i computed alone (DESIGN
// §5: batched == alone; tests/kernels/test_gemm_gguf.cpp GemmGgufBatch and, for m ≥ 16,
// test_gemm_gguf_prefill.cpp assert it). Keep it so: a different order at m = 1 once made
// EngineReal.BatchedEqualsAlone* diverge (the next layer's 8-bit activation rounding turns a last-bit
// difference into another token).
#pragma once
#include <cstdint>
#include <vector>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

// DequantBf16: not an int8 tile — W dequantized to BF16 and oneDNN's BF16 matmul (gemm_gguf_bf16.h; other
// numerics). Best: DequantBf16 where gguf_bf16_preferred(w, m) (when enabled, off by default: prefill, m ≥ 64
// on CPUs with AVX-512 BF16), else the best int8 tile (gguf_best_tile()).
enum class GgufKernel : uint8_t { Best, Avx512Vnni, Avx2, Portable, DequantBf16 };
const char* gguf_kernel_name(GgufKernel k);
// Whether this CPU runs the kernel (Best and Portable: always; Avx2: avx2 + fma + f16c; Avx512Vnni: the
// above + avx512f/bw/vl + avx512_vnni + avx512_vbmi; DequantBf16: gguf_bf16_available()).
bool gguf_kernel_available(GgufKernel k);
// The best int8 tile this CPU runs (Avx512Vnni, else Avx2, else Portable).
GgufKernel gguf_best_tile();

// Q5_K, Q2_K and Q3_K: of the Rows16-only formats (below), those rows16_avx2_k_linear runs (Q8_K activations).
inline bool gguf_rows16_k_only(WeightFormat f) {
  return f == WeightFormat::GgufQ5_K || f == WeightFormat::GgufQ2_K || f == WeightFormat::GgufQ3_K;
}

// IQ4_NL, Q5_1 and gguf_rows16_k_only's: no file-layout SIMD kernel; their SIMD kernels are the Rows16 ones on AVX2
// (rows16_avx2_linear; rows16_avx2_k_linear) and IQ4_NL's on AVX-512 VNNI (rows16_int8_linear), the file layout runs
// by the portable kernel whichever kernel is asked for (see above).
inline bool gguf_rows16_only(WeightFormat f) {
  return f == WeightFormat::GgufIq4Nl || f == WeightFormat::GgufQ5_1 || gguf_rows16_k_only(f);
}

// The activation type llama.cpp pairs with a GGUF weight format (see above).
enum class GgufActType : uint8_t { Q8_0, Q8_1, Q8_K };
GgufActType gguf_act_type(WeightFormat f);

// m rows of x [m, n_in] quantized as `type`. n_in a multiple of the block (32; 256 for Q8_K).
struct GgufActs {
  GgufActType type = GgufActType::Q8_0;
  int64_t m = 0, n_in = 0;
  std::vector<int8_t> q;      // [m, n_in]
  std::vector<float> d;       // [m, n_in / block]: the scale (Q8_0/Q8_1: the F16-rounded value)
  std::vector<float> s;       // Q8_0: d · Σq of each 32-block; Q8_1: F16(d_unrounded · Σq) (llama.cpp's s)
  std::vector<int16_t> bsums; // Q8_K: [m, n_in / 16] Σq of each 16
  std::vector<int32_t> qsum;   // Q8_0 / Q8_1: [m, n_in / 32] Σq of each 32-block
  // The AVX-512 VNNI kernels' view of Q8_0 / Q8_1 acts by pairs of blocks (GgufPrep::Pairs; n_pairs =
  // ceil(blocks / 2), lanes 0-7 for block 2p and 8-15 for 2p+1, zero past the row's last block):
  std::vector<float> pair_d;        // [m, n_pairs, 16]: d of the lane's block
  std::vector<int32_t> pair_bias;   // [m, n_pairs, 16]: lanes 0 and 8: −k · Σq of the block (k: the weights' offset)
  // Q4_0 / Q4_1 on AVX-512 VNNI take 4 blocks a step (GgufPrep::Quads; n_quads = ceil(blocks / 4), zero past the
  // row's last block): x regrouped as the nibbles come out of 64 code bytes, lanes 4j..4j+3 for block 4q+j.
  std::vector<int8_t> quad_x;       // [m, n_quads, 128]: x[0..15] of the 4 blocks, then x[16..31] of the 4
  std::vector<float> quad_d;        // [m, n_quads, 16]: d of the lane's block
  std::vector<int32_t> quad_bias;   // [m, n_quads, 16]: lane 4j: −k · Σq of block 4q+j (k: the weights' offset), other lanes 0
  std::vector<float> quad_s;        // [m, n_quads, 16]: lane 4j: s of block 4q+j (Q4_1's min term), other lanes 0
  // The *Groups layouts (common/gguf_layout.h) on AVX-512 VNNI take 16 blocks a step (GgufPrep::Groups;
  // n_groups = ceil(blocks / 16), zero past the row's last block): lane j of every vector is block 16G + j.
  std::vector<int8_t> grp_x;        // [m, n_groups, 8, 64]: vector t, bytes 4j..4j+3 = x[4t .. 4t+3] of block 16G+j
  std::vector<float> grp_d;         // [m, n_groups, 16]: d of block 16G+j
  std::vector<int32_t> grp_bias;    // [m, n_groups, 16]: −k · Σq of block 16G+j (k: the weights' offset 8 / 128 / 16)
  // Q4_K on AVX-512 VNNI (GgufPrep::K4): x of each 256-block in the order the code nibbles come out of
  // two 64-byte loads: for h = 0, 1: x[128h + 0..31], x[128h + 64..95] (the low nibbles), then
  // x[128h + 32..63], x[128h + 96..127] (the high nibbles).
  std::vector<int8_t> k4_x;         // [m, n_in]
  // (A shift, not a division: the kernels ask for it per chunk of rows. n_in ≥ 0 and a multiple of the block.)
  int64_t n_blocks() const { return n_in >> (type == GgufActType::Q8_K ? 8 : 5); }
};
void quantize_gguf_acts(const float* x, int64_t m, int64_t n_in, GgufActType type, GgufActs* out);

// The element loops of the activation quantizers for one row on AVX-512 (gemm_gguf_vnni.cpp; the bits of
// the scalar loops in gemm_gguf.cpp: the same products, vcvtps2dq's round half to even). n a multiple of the
// block. Q8_0 / Q8_1: per 32-block, amax[b] = max|x| and sum[b] = Σq with q = round(x · (127 / amax)).
// Q8_K: per 256-block, vmax[b] = the first value of largest magnitude, q = min(127, round(x · (−127 / vmax)))
// (zeros where vmax = 0), bsums per 16.
void quantize_q8_32_elems_avx512(const float* x, int64_t n, int8_t* q, float* amax, int* sum);
void quantize_q8_k_elems_avx512(const float* x, int64_t n, int8_t* q, float* vmax, int16_t* bsums);

// The arrays the AVX-512 VNNI kernel reads besides q / d / s / qsum / bsums (GgufActs above): Pairs for Q8_0 /
// Q5_0 rows in the file layout (k = 128 Q8_0, 16 Q5_0), Quads for Q4_0 / Q4_1 and the *Quads layouts (k = 8
// Q4_0, none for Q4_1, which gets quad_s instead, 128 Q8_0Quads: codes held as q + 128, 16 Q5_0Quads), Groups for the *Groups layouts (k = 8 / 128 / 16), K4 for Q4_K; None on the other kernels.
enum class GgufPrep : uint8_t { None, Pairs, Quads, Groups, K4 };
GgufPrep gguf_prep(GgufKernel k, const PackedWeight& w);
// Sizes a for m rows of n_in inputs quantized as `type` plus prep's arrays for weights of format f (contents
// undefined until fill_gguf_acts has filled every row).
void size_gguf_acts(int64_t m, int64_t n_in, GgufActType type, WeightFormat f, GgufPrep prep, GgufActs* a);
// Quantizes rows [g0, g1) of x [m, n_in] into a (sized by size_gguf_acts) and fills their prep arrays. Rows are
// independent: disjoint row ranges may be filled by different threads.
void fill_gguf_acts(const float* x, int64_t g0, int64_t g1, WeightFormat f, GgufPrep prep, GgufActs* a);

// Regroups w's rows, in place, into the layout the AVX-512 VNNI kernel reads fastest (common/gguf_layout.h),
// when that kernel runs here and w is in the file layout: Q8_0 rows of whole 16-block groups (n_in a multiple
// of 512) into Q8_0Groups, Q5_0 into Q5_0Quads; anything else (Q4_0 too: Q4_0Groups decodes slower) is left
// as it is. The same
// bytes, so the resident size does not change; dequantize_rows and every kernel read every layout. Called by
// cpu::Weight's constructor (at load). Q8_0Quads is never chosen: 2x slower decode from DRAM on Zen 4.
void prepare_gguf_weight(PackedWeight* w);

// y[m, n_out] = x[m, n_in] · Wᵀ, W a GGUF block format. Throws tp::Error for another format or a kernel this
// CPU lacks. Weights held in 16-row blocks (rows_layout Rows16: cpu::Weight puts Q4_0 / Q4_1 / Q4_K / Q5_0 / Q8_0 /
// Q6_K so at load where the GEMM-form kernels are this CPU's, kernels/cpu/rows16.h) run those kernels at every m
// with kernel Best; another kernel asked for gets a copy in the file's blocks (tests, benchmarks).
void gemm_gguf(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads,
               GgufKernel kernel = GgufKernel::Best);

// One ISA's rows [r0, r1) of y for all m rows of the quantized activations (gemm_gguf_avx2.cpp /
// gemm_gguf_vnni.cpp; the portable one in gemm_gguf.cpp). y [m, n_out].
using GgufRowsFn = void (*)(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y);
void gguf_rows_avx2(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y);
void gguf_rows_vnni(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y);
void gguf_rows_portable(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y);

}  // namespace tp::cpu::detail
