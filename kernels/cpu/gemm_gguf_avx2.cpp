// The GGUF block kernels for AVX2 + FMA + F16C (vpmaddubsw + vpmaddwd dot products): gemm_gguf_simd.inc
// compiled for that ISA. Runs on every x86-64 CPU with AVX2 (AMD Zen 1-4, Intel Haswell and later).
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"

#define TP_GGUF_VNNI 0
#define TP_GGUF_NS avx2
#include "kernels/cpu/gemm_gguf_simd.inc"

namespace tp::cpu::detail {
void gguf_rows_avx2(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y) {
  avx2::rows(w, a, r0, r1, y);
}
}  // namespace tp::cpu::detail
