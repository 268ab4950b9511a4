// Private to kernels/cpu: BF16 GEMM on AMX tiles reading oneDNN's blocked weight copy, for the batched decode
// step's M (16..kAmxGemmMaxM rows), where oneDNN's matmul waited on its weights from DRAM: on the AMX Xeon
// (2 threads, m = 64, 576 × 1536) oneDNN ran at 0.89 TFLOP/s with W streaming from DRAM and 1.56 with W in cache.
// This kernel prefetches the next 32 output columns' weights while it multiplies the current ones.
#pragma once
#include <cstdint>

namespace tp::cpu::detail {

// The largest m gemm_bf16_amx takes (rows of one call); linear() leaves larger m (prefill chunks) to oneDNN: at
// m = 256 the two were even (gemv_bench --sweep, 2 threads: 1.04-1.23x for 1536 × 576, 0.94-1.04x for 576 × 1536).
constexpr int64_t kAmxGemmMaxM = 128;

// Whether gemm_bf16_amx runs here (AMX tile + bf16 granted by the kernel) and is switched on (set_amx_gemm).
bool amx_gemm_enabled();
// Tests and benchmarks: turn the kernel off (oneDNN's matmul then runs) or back on; a call running meanwhile
// takes either path.
void set_amx_gemm(bool on);

// y[m, n_out] (F32, rows n_out apart) = x[m, n_in] · W, where x is F32 (rounded to BF16 here, as onednn_linear
// rounds it) and wb is W [n_in, n_out] in oneDNN's BA16a64b2a layout: blocks of 32 inputs × 64 outputs, block
// (n_out / 64 major, n_in / 32 minor), inside a block [16 input pairs][64 outputs][2 inputs] BF16 (4 KiB).
// Needs n_in % 32 == 0, n_out % 64 == 0, 1 <= m <= kAmxGemmMaxM and amx_gemm_enabled(). F32 sums of BF16
// products, 32 inputs a tile product, inputs ascending; oneDNN's order is not always this one (1.6 % of outputs
// differ from its bits in tests/kernels/test_linear.cpp LinearAmxGemm; both within the reference tolerance).
void gemm_bf16_amx(const float* x, int64_t m, int64_t n_in, const uint16_t* wb, int64_t n_out, float* y, int n_threads);

}  // namespace tp::cpu::detail
