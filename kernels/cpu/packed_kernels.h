// Private to kernels/cpu: the packed-weight kernels behind packed_linear() (packed_linear.h), one source file
// per family, each with an AVX-512 path, an AVX2 + FMA path and a portable one (runtime dispatch):
//   gemm_int_a16.cpp   Int8 / Int4 weights (groups, zero points, g_idx), F32 activations: weights
//                      dequantized in registers ((q - zero) as F32, FMA with x, × scale once a group);
//                      AVX2 decode of Int8 / Int4: gemm_a16_avx2_levels.cpp (x as 3 int8 levels, vpmaddubsw);
//                      AVX2 decode of FP8 and prefill of Int8, Int4 and FP8: gemm_a16_avx2.cpp;
//                      Int8 / Int4 on AVX-512 VNNI: gemm_a16_vnni.cpp (x as 3 int8 levels, vpdpbusd); Int4 on
//                      AVX512-BF16 (what that does not take): gemm_int4_bf16.cpp (nibbles to BF16 by vpermw, x as 2
//                      BF16 parts)
//   gemm_int_w8a8.cpp  Int8 / Int4 weights with int8 activations (W8A8, W4A8): x quantized per token / per
//                      group / with the static scale, int8 × int8 dot products in int32 (AVX2 maddubs with the
//                      sign trick, AVX-512 VNNI vpdpbusd), × weight scale × activation scale once a group;
//                      without VNNI: gemm_int_w8a8_avx2.cpp (decode blocks, int16 vpmaddwd prefill tiles)
//   gemm_fp8.cpp       E4M3 weights (tensor / channel / block scales) converted to F32 in registers (per
//                      tensor / channel on AVX512-BF16: gemm_fp8_bf16.cpp, E4M3 to BF16 in registers); FP8
//                      activations (W8A8-FP8) are emulated: x is rounded to its E4M3 values (still F32) once a
//                      call, then the same kernel (what an FP8 tensor core computes, up to summation order);
//                      decode on Intel AVX-512: gemm_fp8_avx512.cpp (E4M3 bytes' F32 bits made in place, F32 FMAs)
//   gemm_fp4.cpp       MXFP4 / NVFP4 weights: E2M1 nibbles through an 8-entry table in a register, × the
//                      block's E8M0 or E4M3 scale (× the NVFP4 global scale); decode on AVX2: gemm_fp4_avx2.cpp
//                      (codes to BF16 bytes by vpshufb, F32 FMAs); on AVX-512 VNNI gemm_a16_vnni.cpp;
//                      on AVX512-BF16 gemm_fp4_bf16.cpp (rows as the checkpoint)
// Int4 and FP4 weights cpu::Weight put in 16-row blocks (common/rows16_layout.h Rows16) decode in GEMM form:
// gemm_rows16.cpp (rows16.h; on AVX2 gemm_rows16_a16_avx2.cpp, gemm_rows16_fp4_avx2.cpp); the row-major decode
// kernels above decline them.
// Each computes y[m, n_out] = x[m, n_in] · Wᵀ (x, y F32 row-major contiguous), splitting W's rows over
// n_threads OpenMP threads, and returns false when it has no kernel for this weight (its caller then uses
// packed_linear_reference): a group size that is not a multiple of the vector width, for instance.
// BF16 activations (w.act_bf16, the BF16 runtime's weight-only formats): packed_linear rounds x to BF16 before any
// kernel runs; the AVX512-BF16 kernels below then hold x as one BF16 part instead of two (half the vdpbf16ps:
// Zen 5, 2026-12-04, W4A16 decode from cache +30%, FP4 +20%, FP8 +40%, their prefills ~2x), the others compute
// on the rounded values as on any F32 x.
#pragma once
#include <cstdint>
#include <functional>

#include "common/packed_weight.h"

namespace tp::cpu::detail {

enum class PackedIsa : uint8_t { Portable, Avx2, Avx512 };

// The best this CPU runs: Avx512 (avx512f + bw + vl + f16c), Avx2 (avx2 + fma + f16c), else Portable.
PackedIsa packed_best_isa();
// Whether this CPU has AVX-512 VNNI (the int8 dot product instruction of the W8A8 kernel's AVX-512 path).
bool cpu_has_avx512vnni();

// W4A16 on AVX-512 BF16 (gemm_int4_bf16.cpp): Int4 weights without g_idx, groups a multiple of 32 columns,
// against x as two BF16 parts (16 significant bits; vdpbf16ps, F32 sums); int_a16_linear's AVX-512 path where
// the CPU has AVX512-BF16: first on AMD (prefer_bf16_a16), elsewhere for what a16_vnni_linear (below) does not
// take (no VNNI, groups of 32, n_in not a multiple of 64).
// Returns false (nothing written) for weights it does not take or without AVX512-BF16.
bool int4_bf16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// MXFP4 / NVFP4 on AVX-512 BF16 (gemm_fp4_bf16.cpp), any m (meant for decode: fp4_bf16_prefill takes m ≥
// kA16Bf16MinM): n_in a multiple of 64, the e2m1 values exact in BF16 against x's two BF16 parts (as
// int4_bf16_linear), F32 sums, × the block scales (F32: E8M0 exact, E4M3 exact) per 4-column lane, NVFP4's
// global scale after. Returns false (nothing written) for weights it does not take (the Rows16 layout too: that
// is rows16_linear's) or without AVX512-BF16.
bool fp4_bf16_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// Whether the 4-bit decode goes to the AVX512-BF16 kernels above before a16_vnni_linear: on AMD, where vdpbf16ps
// issues as often as vpdpbusd (Zen 5, 2026-12-04: W4A16 g64 decode from cache 32-39 GB/s against the VNNI
// kernel's 26-32); not on Intel (the AMX Xeon issues vdpbf16ps once every 2 cycles). Zen 4 has not been measured
// with both. Where it holds, cpu::Weight also puts Int4 / FP4 weights in 16-row blocks at load for the GEMM-form
// decode (rows16.h), which then runs instead of the row-major AVX512-BF16 kernels. TPSERVE_A16_KERNEL=bf16|vnni
// overrides the rule (to measure both on a new CPU; read once); auto or unset: the rule. Another value, or bf16
// without AVX512-BF16: InputError naming the variable.
bool prefer_bf16_a16();
// The rule itself, for its test: env (the variable's value or nullptr), the CPU's AVX512-BF16, Intel or not.
bool prefer_bf16_a16_rule(const char* env, bool has_bf16, bool intel);

// W8A16 / W4A16 / FP4 on AVX-512 VNNI (gemm_a16_vnni.cpp): Int8 / Int4 weights without g_idx, groups multiples of 64
// columns, and MXFP4 / NVFP4 ones (2 · e2m1 an integer, the block scale per lane in F32), n_in a multiple of 64,
// against x as three int8 levels a row (x = s · (q1 + q2 · 2⁻⁷ + q3 · 2⁻¹⁴) within max|x| · 2⁻²¹, s a
// power of two), vpdpbusd sums exact in int32, × the group scale in F32; int_a16_linear's AVX-512 path below
// kA16Bf16MinM where the CPU has VNNI, ahead of int4_bf16_linear and a16_avx512_decode (vdpbf16ps issues once every
// 2 cycles on the AMX Xeon, vpdpbusd twice a cycle: W4A16 decode ran compute-bound there), and fp4_linear's — on
// AMD only for Int8 and for what the AVX512-BF16 kernels do not take (prefer_bf16_a16). Returns false (nothing
// written) for weights it does not take.
bool a16_vnni_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// FP8 E4M3 weights on AVX-512 BF16 (gemm_fp8_bf16.cpp): per-tensor / per-channel scales, F32 activations (as two
// BF16 parts) or FP8 ones per token / static (E4M3(x / s), exact in BF16); fp8_linear's AVX-512 path where the
// CPU has AVX512-BF16. Returns false (nothing written) for weights it does not take.
// From m ≥ kFp8OnednnMinM (prefill) W is decoded to BF16 256 rows at a time and multiplied by oneDNN's BF16
// matmul (AMX tiles where the CPU has them) instead of the tiles: the same exact products, summed in F32 in
// oneDNN's order (so a row's bits there differ from the tiles' in the last places). On a Xeon with AMX
// (2026-12-03, gemm_gguf_bench, 1 thread, m = 512) the tiles ran fp8_dynamic at 26-29 GMAC/s, 0.07-0.11x BF16.
inline constexpr int64_t kFp8OnednnMinM = 64;
bool fp8_bf16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// FP8 activations of those kernels (gemm_fp8_bf16.cpp; AVX-512 BF16): max |x| over n values, and one row's
// q = E4M3(x / s) as BF16 (exact), n values (the reference's rounding, fake_quantize_activations).
float fp8_amax(const float* x, int64_t n);
void fp8_act_row_bf16(const float* x, int64_t n, float s, uint16_t* out);

// FP8 E4M3 decode on Intel AVX-512 (gemm_fp8_avx512.cpp): per-tensor / per-channel / block scales, F32 activations or FP8
// ones per token / static, every m < kFp8OnednnMinM: each weight byte's F32 bits made in place by shifts and a mask
// (value · 2⁻¹²⁰, fp8_pow2.h), F32 FMAs against x (F32, or its E4M3 values) · 2^k. fp8_linear's path ahead of
// fp8_bf16_linear on Intel, where vdpbf16ps issues once every 2 cycles (FP8 decode ran at 10.7 / 14.2 GB/s from cache
// with it). Block scales too (folded into x a block of rows at a time). x_quantized: x holds the activations'
// quantized values already (fake_quantize_activations: W8A8-FP8 with per-group scales), w.act is not applied again.
// Returns false (nothing written) for weights or m it does not take.
bool fp8_avx512_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads,
                       bool x_quantized = false);

// Prefill through oneDNN's BF16 matmul for weights whose rows decode exactly to BF16 parts (gemm_bf16_slabs.cpp;
// AVX512-BF16 and oneDNN's BF16 matmul needed). xk [m, np · ps]: np BF16 parts of each row of x side by side,
// each zero-padded from n_in to ps (a multiple of 32); decode(w, r, out, stride) writes row r's w_parts parts of
// n_in BF16 values, part p at out + p · stride; each is repeated np / w_parts times side by side (x's parts must
// pair with them: W [hi, hi, lo, lo] against x [hi, lo, hi, lo]). y [m, n_out] = Σ over parts xk · Wᵀ, then with
// row_scales × w's row scale (scales[0] when it has one) × xs[i] (when given).
using Bf16RowDecode = void (*)(const PackedWeight& w, int64_t r, uint16_t* out, int64_t stride);
void bf16_slab_gemm(const uint16_t* xk, int64_t m, int64_t ps, int np, const PackedWeight& w, Bf16RowDecode decode,
                    const float* xs, float* y, int n_threads, int w_parts = 1, bool row_scales = true);
// F32 x [m, n_in] -> `parts` BF16 parts a row (2: hi = bf16(x), lo = bf16(x − hi); 1: hi alone, for x exact in
// BF16), zero-padded to ps, the parts written reps times (row i at out + parts · reps · ps · i: hi, lo, hi, lo, …);
// rows over n_threads.
void split_bf16_parts(const float* x, int64_t m, int64_t n_in, int64_t ps, uint16_t* out, int n_threads, int reps = 1,
                      int parts = 2);
// W8A16 / W4A16 (Int8 / Int4, zero points or not) for m ≥ kA16Bf16MinM through bf16_slab_gemm. Per channel: x's
// two BF16 parts against the codes − zero (exact in BF16), the row scale after. Scale groups (group_size or
// g_idx): the weight (q − zero) · scale itself as two BF16 parts hi + lo, exact while the scale's significant bits
// + the codes' (Int4 4, Int8 8) are ≤ 16 — BF16 and F16 scales for Int4, BF16 ones for Int8 (what checkpoints
// ship) — against x's two parts twice: 4 products a weight, every one exact in F32, so only the order of the sums
// differs from the tiles. Other scales, weights or m: false (nothing written; the F32 paths below run). On a Xeon
// with AMX (2026-12-03) the F32-sgemm prefill ran W8A16 at 54-75 GMAC/s and W4A16 g64 at ~51, 0.18-0.23x the BF16
// model's. BF16 activations (w.act_bf16): x one part, and a grouped weight one part too — (q − zero) · scale rounded
// to BF16 (what transformers' BF16 run and vLLM's A16 kernels multiply by; relative error ≤ 2⁻⁹ a weight, against
// the 4-bit code's ~2⁻⁴), any finite scale: 1 product a weight instead of 4 (Zen 5, m = 512: W4A16 g64 0.40x → see
// bench/results/zen5-kernels-20261204.md).
inline constexpr int64_t kA16Bf16MinM = 64;
bool a16_bf16_prefill(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// MXFP4 / NVFP4 for m ≥ kA16Bf16MinM through bf16_slab_gemm: e2m1 · block scale is exact in BF16 (≤ 6 significant
// bits), x's two parts against it, NVFP4's global scale after — 2 exact products a weight, as W8A16 per channel.
// Scale bytes that would give subnormal or NaN products: false (nothing written; the A16 tiles run). Both prefills
// decline weights in the Rows16 layout (rows16_linear's at every m).
bool fp4_bf16_prefill(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// x / s without a division for scales in [kQuotientMinScale, kQuotientMaxScale] (1 / s then normal and
// correctly rounded): q = RN(x · RN(1/s)) is within 1 ulp of x / s, so RN(q + RN(x − q·s) · RN(1/s)) is RN(x / s)
// exactly (Markstein's theorem; the residual is exact by FMA) — the same bits as the division, at 3 vector ops
// instead of one vdivps (~10-16 cycles a 512-bit vector: 0.27 ms of a 512 × 1536 call, more than the int8 GEMM's
// half, on the AMX Xeon: bench/results/xeon-amx-kernels-20261203.md §8). A quotient that overflows (q = ±inf:
// static scales only) keeps q, as the division gives ±inf; tiny quotients round to 0 either way.
inline constexpr float kQuotientMinScale = 1e-37f, kQuotientMaxScale = 1e37f;

// The W8A8 kernels' activation quantization of one row segment: q[c] = clamp(nearbyint(x[c] / s), ±127) (0 for
// s = 0), at `isa` (AVX-512, AVX2 or the scalar rule) — the same bits on each.
void quantize_s8(const float* x, int64_t n, float s, int8_t* q, PackedIsa isa);

bool int_a16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa);
bool int_w8a8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa);
bool fp8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa);
// Int4 / FP4 weights in layout Rows16 (common/rows16_layout.h), in both: on AVX-512 rows16_linear at every m (the
// prefill's too); on AVX2 rows16_a16_avx2 / rows16_fp4_avx2 below the prefill's m, a16_avx2_gemm / fp4_avx2_gemm
// from there; another isa returns false (the reference reads the layout).
bool fp4_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa);

// acc[m, n_out] = xq[m, n_in] · wᵀ in exact int32, w int8 [n_out, n_in] row-major, through oneDNN's int8
// matmul (gemm_int_w8a8_onednn.cpp; VNNI brgemm where the CPU has it). The W8A8 kernel's path for m ≥
// kW8a8OnednnMinM. Returns false where oneDNN has no int8 matmul or the CPU has no VNNI / AMX int8 (nothing
// written): without them oneDNN's AVX2 kernels sum u8·s8 pairs in int16 with saturation (vpmaddubsw), which
// measured NMSE 0.02 against the exact sums on a Zen 3 core — not the exact int32 this contract promises.
// rows64: w is held in Rows64 (common/rows16_layout.h), oneDNN's own AMX int8 order, read as it is; else row-major
// ("ba" to oneDNN), which its AMX kernels copy into that order a call.
inline constexpr int64_t kW8a8OnednnMinM = 16;
bool onednn_s8_gemm(const int8_t* xq, int64_t m, const int8_t* w, int64_t n_out, int64_t n_in, int32_t* acc,
                    int n_threads, bool rows64 = false);
// Whether oneDNN runs an int8 matmul with Rows64 weights on this CPU by one of its JIT kernels (probed once; not its
// reference implementation).
bool onednn_s8_rows64_supported();

// W8A8 Int8 weights in Rows64 against m rows of x quantized by int_w8a8_linear (xq [m, n_in], one scale xs and Σ q_x
// xsum a row): y [m, n_out] exactly as the oneDNN path's (gemm_int_w8a8_rows64.cpp). Returns false (nothing written)
// for another layout or without AVX-512 VNNI.
bool rows64_s8_gemv(const PackedWeight& w, int64_t m, const int8_t* xq, const float* xs, const int32_t* xsum, float* y,
                    int n_threads);
// At load (Weight's constructor): a W8A8 weight Rows64 takes is put in it where the CPU has AMX int8 and oneDNN
// reads that layout (rows64_refusal; the same bytes); otherwise left as it is.
void prepare_w8a8_weight(PackedWeight* w);

// A16 decode on AVX2 (gemm_a16_avx2.cpp): Fp8E4M3 weights with tensor / channel / block scales (n_in and a block's
// columns multiples of 32),
// F32 x, m < kA16Avx2MaxM: E4M3 bytes to F32 bits by shifts and a mask in registers, F32 FMAs; 4 weight rows a pass
// at m = 1, a batch's rows of x 4 at a time against each decoded row (a row of a batch has the bits it has alone);
// the AVX2 path of fp8_linear for those (Int4 / Int8: a16_avx2_levels below). Returns false (nothing written) for
// weights or m it does not take.
inline constexpr int64_t kA16Avx2MaxM = 32;  // = kA16Avx2GemmMinM: the F32 prefill from there
bool a16_avx2_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// MXFP4 / NVFP4 decode on AVX2 (gemm_fp4_avx2.cpp): Rows layout, n_in a multiple of 32, F32 x, m < kFp4Avx2MaxM:
// each E2M1 code to its value's BF16 bytes by two vpshufb tables, widened to F32 (exact), F32 products and sums,
// × the block scale (F32, exact) a block; a row of a batch has the bits it has alone. fp4_linear's AVX2 path ahead of
// the A16 tiles. Returns false (nothing written) for weights or m it does not take, or without AVX2 + F16C.
inline constexpr int64_t kFp4Avx2MaxM = 64;
bool fp4_avx2_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// The same weights for m ≥ kFp4Avx2MaxM (prefill, gemm_fp4_avx2.cpp; W in Rows or Rows16): W decoded once a call to F32 (value × block
// scale × global scale, in the decode's column order, x permuted alike) and dense_f32_linear. Returns false (nothing
// written) for weights or m it does not take, or without AVX2 + F16C or oneDNN F32.
bool fp4_avx2_gemm(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// MXFP4 / NVFP4 in Rows16 on AVX2 without AVX-512 (gemm_rows16_fp4_avx2.cpp): x as int8 levels per scale block —
// three for F32 x (within 2⁻²⁰ of the block's largest value, the 1e-10 NMSE of the F32 kernels), two with act_bf16
// (2⁻¹³: not that bound) — vpmaddubsw against the codes mapped to 2 v + 12, exact int32 sums a block; every m (fp4_linear sends m ≥ kFp4Avx2MaxM to fp4_avx2_gemm first), every row of x with the same
// operations whatever m and the threads. Returns false (nothing written) for other weights or without AVX2.
bool rows16_fp4_avx2(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// W4A16 / W8A16 decode on AVX2 without VNNI (gemm_a16_avx2_levels.cpp): Int4 and Int8 weights without g_idx in the
// Rows layout (n_in and groups multiples of 32, or per channel; zero points), m < kA16Avx2LevelsMaxM: x as
// gemm_a16_vnni.cpp's three int8 levels (exact to max|x| · 2⁻²¹ a value; Int8 2⁻²⁰, its top level within ±64),
// vpmaddubsw against the codes, exact int32 sums a segment; a row of a
// batch has the bits it has alone (decode batches up to 63 rows; they go to a16_avx2_gemm from 64, as on AVX-512
// to the BF16 prefill from kA16Bf16MinM). The AVX2 path of int_a16_linear for those, before a16_avx2_decode.
// Returns false (nothing written) for weights or m it does not take, or without AVX2.
inline constexpr int64_t kA16Avx2LevelsMaxM = 64;
bool a16_avx2_levels(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// One row of x (n_in a multiple of 32) as that kernel's Int4 levels (max|x| / s in (63.5, 127]), in column order:
// q [3 · n_in] = q1, q2, q3 rows; returns s · 2⁻¹⁴ (0: a zero row, NaN: a row with a NaN or an infinity, its
// levels then 0). AVX2 (the caller checks).
float a16_x_levels_in_order(const float* x, int64_t n_in, int8_t* q);
// W4A16 in Rows16 on AVX2 without AVX-512 (gemm_rows16_a16_avx2.cpp: the 16-row form of a16_avx2_levels): Int4
// without g_idx, groups a multiple of 32 columns or per channel, n_in a multiple of 32, m < kA16Avx2LevelsMaxM;
// every row of x with the same operations whatever m and the threads. With act_bf16, x rounded to BF16 and held as
// two int8 levels per 32 columns (rows16_avx2.h rows16_x_levels: within 2⁻¹³ of their largest value, not the 1e-10
// NMSE of the F32 kernels). Returns false (nothing written) otherwise.
bool rows16_a16_avx2(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// The same weights for m ≥ kA16Avx2GemmMinM (prefill): W decoded once a call to F32 (value × scale) and oneDNN's F32
// matmul (dense_f32_linear below, linear()'s thread count). Int4 / Int8 on AVX-512 too from m ≥ kA16Avx512GemmMinM: on Zen 4 1.5x /
// 2.3x the AVX512-BF16 and 16-lane tiles at m = 512 and 1.2x / 1.1x at 256 / 128, but 0.85x (Int4, m = 128) and 0.35x
// (Int8, m = 32) below, where the per-call F32 copy was not paid back (bench/results/a16-avx512-zen4-*; measured when
// each call also took fresh pages and oneDNN's reordered copy, which dense_f32_linear no longer makes — the
// thresholds are not re-measured). Returns false (nothing written) for weights or m it does not take, or without
// oneDNN F32.
inline constexpr int64_t kA16Avx2GemmMinM = 32;
inline constexpr int64_t kA16Avx512GemmMinM = 256;
bool a16_avx2_gemm(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);
// The dense part of those (gemm_a16_avx2.cpp): dequant(r0, r1, out) writes rows [r0, r1) of W as F32 into out [n_out,
// n_in] (once a call, rows over n_threads), permute (nullptr: none) puts a row of x in the column order dequant
// wrote W in; then oneDNN's F32 matmul reads that per-thread scratch as it is (onednn_matmul_f32).
using PermuteRow = void (*)(const float* x, int64_t n_in, float* xp);
void dense_f32_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads,
                      const std::function<void(int64_t, int64_t, float*)>& dequant, PermuteRow permute);

// W8A16 decode on AVX-512 (gemm_a16_avx512.cpp: a16_avx512_decode): Int8 weights without g_idx (n_in and groups
// multiples of 32), F32 x, m < kA16Avx512MaxM: gemm_a16_avx2.cpp's 4-row blocks at 16 lanes. Returns false (nothing
// written) for weights or m it does not take, or without AVX-512.
inline constexpr int64_t kA16Avx512MaxM = 4;
bool a16_avx512_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// W8A8 / W4A8 on AVX2 without VNNI (gemm_int_w8a8_avx2.cpp): y [m, n_out] from x quantized to int8 (xq [m, n_in],
// scales xs [m, n_seg], Σ qx xsum [m, n_seg] — read only with zero points) over segments of seg columns (wg:
// columns a weight scale group). Exact int32 sums a segment, folded as the portable loop folds them (the same bits
// for a row of x whatever m). m < kW8a8Avx2TileM: blocks of 4 weight rows against each row of x (vpmaddubsw with
// the sign trick); from kW8a8Avx2TileM on: panels of 16 weight rows interleaved 4 columns at a time against 4 (or 3)
// x rows, the same products. Returns false (nothing written) where it does not take the shape: segments that are
// not a multiple of 4 columns.
inline constexpr int64_t kW8a8Avx2TileM = 6;  // Zen 3: m = 4 ran 10-17% slower on the panels, m = 6 alike
bool w8a8_avx2_rows(const PackedWeight& w, int64_t m, const int8_t* xq, const float* xs, const int32_t* xsum,
                    int64_t seg, int64_t n_seg, int64_t wg, float* y, int n_threads);
// max |x| over n values and q = clamp(round-half-even(x / s), ±127) (0 where s = 0), bit for bit the scalar rule.
float amax_avx2(const float* x, int64_t n);
void quantize_avx2(const float* x, int64_t n, float s, int8_t* q);

// packed_linear() with the ISA chosen (tests, benchmarks): the kernel of w's family at `isa` (which must not
// be above packed_best_isa()), else the reference. Returns whether a kernel ran.
bool packed_linear_isa(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa);

}  // namespace tp::cpu::detail
