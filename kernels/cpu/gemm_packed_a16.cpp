// Dequantize-in-register GEMV/GEMM for packed weights with F32 activations (packed_kernels.h): Int8 / Int4
// (W8A16, W4A16 with groups, zero points, g_idx), Fp8E4M3 (A16, and W8A8-FP8 with emulated activations) and
// MXFP4 / NVFP4. The kernel body is packed_a16.inc, compiled three times: portable, AVX2 + FMA, AVX-512;
// decode and prefill on AVX2: gemm_a16_avx2_levels.cpp (Int4 / Int8, m < 64) and gemm_a16_avx2.cpp first, where
// they take the weight (a16 below).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// GCC 12's AVX-512 intrinsics use a self-initialized "undefined" vector that trips -Wuninitialized once
// inlined; the warning is about the header (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "common/error.h"
#include "common/fp_formats.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/packed_linear.h"

namespace tp::cpu::detail {

namespace portable {
#define TP_VEC_WIDTH 1
#include "kernels/cpu/packed_a16.inc"
#undef TP_VEC_WIDTH
}  // namespace portable

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
#define TP_VEC_WIDTH 8
#include "kernels/cpu/packed_a16.inc"
#undef TP_VEC_WIDTH
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace avx512 {
#define TP_VEC_WIDTH 16
#include "kernels/cpu/packed_a16.inc"
#undef TP_VEC_WIDTH
}  // namespace avx512
#pragma GCC pop_options

namespace {

// The A16 kernel at `isa`; on AVX2 first the levels decode (Int4 / Int8, gemm_a16_avx2_levels.cpp), then
// gemm_a16_avx2.cpp's decode / prefill where they take w and m (they refuse
// FP4, g_idx, n_in or FP8 blocks of columns not a multiple of 32); on AVX-512 first gemm_a16_avx512.cpp's Int8
// decode, and FP8 with block scales through the AVX2 decode and prefill too (the AVX-512 FP8 kernels decline
// blocks; on Zen 3 the AVX2 decode ran SmolLM2's fp8-block tg 98 tok/s where these tiles at AVX2 width ran 60; on
// the AMX Xeon these 16-lane tiles prefilled it at 120 tok/s, a16_avx2_gemm's F32 matmul at 699).
bool a16(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  const bool fp8_blocks = w.format == WeightFormat::Fp8E4M3 && w.block_out > 0;
  switch (isa) {
    case PackedIsa::Avx512:
      return a16_avx512_decode(x, m, w, y, n_threads) ||
             (fp8_blocks && (a16_avx2_decode(x, m, w, y, n_threads) || a16_avx2_gemm(x, m, w, y, n_threads))) ||
             avx512::linear_a16(x, m, w, y, n_threads);
    case PackedIsa::Avx2:
      return a16_avx2_levels(x, m, w, y, n_threads) || a16_avx2_decode(x, m, w, y, n_threads) ||
             a16_avx2_gemm(x, m, w, y, n_threads) ||
             avx2::linear_a16(x, m, w, y, n_threads);
    case PackedIsa::Portable: return portable::linear_a16(x, m, w, y, n_threads);
  }
  return false;
}

}  // namespace

PackedIsa packed_best_isa() {
  // F16C (vcvtph2ps, the FP8 fast path) comes with every AVX2 CPU made; checked all the same.
  static const bool f16c = __builtin_cpu_supports("f16c");
  static const PackedIsa isa = cpu_has_avx512f() && f16c ? PackedIsa::Avx512
                               : cpu_has_avx2() && f16c  ? PackedIsa::Avx2
                                                         : PackedIsa::Portable;
  return isa;
}

bool prefer_bf16_a16_rule(const char* env, bool has_bf16, bool intel) {
  const std::string v = env ? env : "";
  if (v.empty() || v == "auto") return has_bf16 && !intel;
  if (v == "vnni") return false;
  if (v != "bf16") throw InputError("TPSERVE_A16_KERNEL: '" + v + "' is not one of auto, bf16, vnni");
  if (!has_bf16) throw InputError("TPSERVE_A16_KERNEL: this CPU lacks AVX512-BF16 (bf16)");
  return true;
}

bool prefer_bf16_a16() {
  static const bool prefer = prefer_bf16_a16_rule(std::getenv("TPSERVE_A16_KERNEL"), cpu_has_avx512bf16(), cpu_is_intel());
  return prefer;
}

bool int_a16_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  if ((w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4) || w.act != ActQuant::None) return false;
  if (w.rows_layout == RowsLayout::Rows16) {  // the kernels that read it (else the reference, which reads any layout)
    if (isa == PackedIsa::Avx512) return rows16_linear(x, m, w, y, n_threads);
    return isa == PackedIsa::Avx2 && (rows16_a16_avx2(x, m, w, y, n_threads) || a16_avx2_gemm(x, m, w, y, n_threads));
  }
  // AVX-512: from m ≥ kA16Bf16MinM through oneDNN's BF16 matmul where the weight decodes exactly
  // (a16_bf16_prefill); other prefill (m ≥ kA16Avx512GemmMinM) as on AVX2, W to F32 once and oneDNN's sgemm; else
  // Int4 on AVX512-BF16 where prefer_bf16_a16(), Int8 / Int4 on VNNI (x as int8 levels), else Int4 on AVX512-BF16.
  if (isa == PackedIsa::Avx512 && (a16_bf16_prefill(x, m, w, y, n_threads) ||
                                   (m >= kA16Avx512GemmMinM && a16_avx2_gemm(x, m, w, y, n_threads)) ||
                                   (prefer_bf16_a16() && int4_bf16_linear(x, m, w, y, n_threads)) ||
                                   a16_vnni_linear(x, m, w, y, n_threads) || int4_bf16_linear(x, m, w, y, n_threads)))
    return true;
  return a16(x, m, w, y, n_threads, isa);
}

bool fp8_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  if (w.format != WeightFormat::Fp8E4M3) return false;
  if (isa == PackedIsa::Avx512 && (fp8_avx512_decode(x, m, w, y, n_threads) || fp8_bf16_linear(x, m, w, y, n_threads)))
    return true;
  if (w.act == ActQuant::None) return a16(x, m, w, y, n_threads, isa);
  // W8A8-FP8 (and int8 activations on FP8 weights): x rounded to its quantized values once, then A16.
  thread_local std::vector<float> xq;
  if (int64_t(xq.size()) < m * w.n_in) xq.resize(size_t(m * w.n_in));
  fake_quantize_activations(x, m, w.n_in, w.act, w.act_scale, w.act_group, xq.data());
  if (isa == PackedIsa::Avx512 && fp8_avx512_decode(xq.data(), m, w, y, n_threads, /*x_quantized=*/true)) return true;
  return a16(xq.data(), m, w, y, n_threads, isa);
}

bool fp4_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  if ((w.format != WeightFormat::Mxfp4 && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None) return false;
  if (w.rows_layout == RowsLayout::Rows16) {  // the kernels that read it (else the reference, which reads any layout)
    if (isa == PackedIsa::Avx512) return rows16_linear(x, m, w, y, n_threads);
    return isa == PackedIsa::Avx2 && (fp4_avx2_gemm(x, m, w, y, n_threads) || rows16_fp4_avx2(x, m, w, y, n_threads));
  }
  if (isa == PackedIsa::Avx512 && (fp4_bf16_prefill(x, m, w, y, n_threads) ||
                                   (prefer_bf16_a16() && fp4_bf16_decode(x, m, w, y, n_threads)) ||
                                   a16_vnni_linear(x, m, w, y, n_threads)))
    return true;
  if (isa == PackedIsa::Avx2 && (fp4_avx2_decode(x, m, w, y, n_threads) || fp4_avx2_gemm(x, m, w, y, n_threads)))
    return true;
  return a16(x, m, w, y, n_threads, isa);
}

}  // namespace tp::cpu::detail
