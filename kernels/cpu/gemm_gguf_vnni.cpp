// The GGUF block kernels for AVX-512 VNNI + VBMI (vpdpbusd on 512-bit vectors for the 32-blocks, 256-bit for the
// K-quants; vpermb): gemm_gguf_simd.inc compiled for that ISA. Runs on Intel Ice Lake / Sapphire Rapids and
// later and AMD Zen 4+ (not Cascade Lake: no VBMI);
// gemm_gguf() picks it only where __builtin_cpu_supports says so.
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")
// GCC 12's AVX-512 headers trip -Wuninitialized / -Wmaybe-uninitialized once inlined (as in gemv.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/cpu/gemm_gguf.h"

#define TP_GGUF_VNNI 1
#define TP_GGUF_NS vnni
#include "kernels/cpu/gemm_gguf_simd.inc"

namespace tp::cpu::detail {
void gguf_rows_vnni(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y) {
  vnni::rows(w, a, r0, r1, y);
}
}  // namespace tp::cpu::detail
