// Private to kernels/cpu: the small-M GEMV kernels behind linear(), and the CPU feature checks.
// All compute y[m, n_out] = x[m, n_in] · Wᵀ with W [n_out, n_in] row-major (rows n_in elements apart),
// x and y F32 row-major contiguous. BF16 variants take x already rounded to BF16: xb [m, x_stride] with
// x_stride >= round_up(n_in, 32) and zeros in [n_in, x_stride). Rows of W are split across n_threads OpenMP
// threads.
#pragma once
#include <algorithm>
#include <cstdint>

#include <xmmintrin.h>

namespace tp::cpu::detail {

bool cpu_has_avx512f();     // avx512f + avx512bw + avx512vl
bool cpu_has_avx512bf16();  // the above + avx512_bf16
bool cpu_has_avx2();        // avx2 + fma (gemv_avx2.cpp)
bool cpu_is_intel();        // the vendor: some tuning differs between Intel and AMD (gemv.cpp, gemm_gguf.cpp)

inline constexpr int64_t kGemvXAlign = 32;  // BF16 elements: x rows padded to a multiple of this

void gemv_f32_avx512(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y,
                     int n_threads);
void gemv_f32_portable(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y,
                       int n_threads);
void gemv_bf16_avx512(const uint16_t* xb, int64_t x_stride, int64_t m, const uint16_t* w, int64_t n_out,
                      int64_t n_in, float* y, int n_threads);
// AVX2 + FMA (gemv_avx2.cpp). The BF16 variant takes x in F32 [m, n_in] and rounds it to BF16 itself; a row's
// sum has the same bits whatever m and n_threads.
void gemv_f32_avx2(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in, float* y, int n_threads);
void gemv_bf16_avx2(const float* x, int64_t m, const uint16_t* w, int64_t n_out, int64_t n_in, float* y,
                    int n_threads);
void gemv_bf16_portable(const uint16_t* xb, int64_t x_stride, int64_t m, const uint16_t* w, int64_t n_out,
                        int64_t n_in, float* y, int n_threads);

// Asks the kernel to back [p, p + n) with 2 MiB pages (MADV_COLLAPSE; best effort, linear.cpp): weights that a
// decode step streams (Weight's buffers, oneDNN's blocked copies).
void back_with_huge_pages(const void* p, int64_t n);

// Whether a parallel region over `bytes` of weight traffic is worth its fork/join (~ a few µs).
inline bool worth_parallel(int64_t bytes) { return bytes >= (int64_t(1) << 16); }

// Thread t of nt's rows [begin, end) of n_rows, split in whole blocks of `block` rows: ceil(n_blocks / nt)
// blocks a thread, in thread order (the last threads' ranges may be short or empty).
struct RowRange {
  int64_t begin, end;
};
inline RowRange thread_rows(int64_t n_rows, int64_t block, int t, int nt) {
  const int64_t n_blocks = (n_rows + block - 1) / block, per = (n_blocks + nt - 1) / nt;
  const int64_t begin = std::min(n_rows, t * per * block);
  return {begin, std::min(n_rows, begin + per * block)};
}

// Software prefetch of a decode kernel's weight stream: into L2 (prefetcht1) on Intel, into L1 (prefetcht0) on the
// others. An L2 prefetch holds one of L2's many outstanding-miss entries instead of one of L1's few fill buffers,
// which the kernel's own loads need, so more of the stream is in flight. Xeon with AMX (2026-12-03, SmolLM2 decode,
// 1 thread, alternated 4 times): Q8_0 88.9 -> 98.1 tok/s, Q4_0 149 -> 163, Q4_K_M 116 -> 131, BF16 57.3 -> 59.0;
// a plain read does not gain from it (bench/mem_bandwidth), so the roofline stays the prefetcht0 figure. AMD keeps
// prefetcht0: on a Zen 5 (2026-12-04, the same decode alternated 3 times, prefetcht1 for every CPU vs as is) L2 was
// slower, BF16 142.6 -> 140.1 tok/s, Q8_0 259 -> 239, Q4_0 404 -> 383, Q4_K_M 280 -> 272. The Intel paths not
// measured with it (gemm_int4_bf16.cpp for what the VNNI kernel does not take, gemm_a16_avx512.cpp) follow the same
// rule.
extern const bool g_prefetch_weights_to_l2;  // cpu_is_intel(), set at start-up (gemv.cpp)
inline void prefetch_weights(const void* p) {
  if (g_prefetch_weights_to_l2)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// A decode kernel's running software prefetch reads `ahead` bytes past its position, so it never covers the first
// `ahead` bytes of a thread's range: prefetch those (of the `total` the range holds) before the loop.
inline void prefetch_range_start(const uint8_t* p, int64_t ahead, int64_t total) {
  const int64_t n = std::min(ahead, total);
  for (int64_t b = 0; b < n; b += 64) prefetch_weights(p + b);
}

}  // namespace tp::cpu::detail
