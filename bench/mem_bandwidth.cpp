// DRAM read bandwidth, for the decode roofline of bench/run_decode_bench.sh: N threads (OpenMP) each sum
// their share of a 512 MiB buffer (far beyond every cache) with 256-bit AVX2 loads, R passes after one warm-up;
// GB/s = bytes read / seconds of the best pass (10^9 bytes). Prints one line per thread count.
// The buffer sits on 2 MiB pages where the kernel gives them (MADV_HUGEPAGE before the first touch), and each
// pass is run twice: plain loads, and with software prefetch 4 KiB ahead — the two tricks the decode kernels
// use (kernels/cpu/linear.cpp, gemv.cpp, gemm_gguf*). The figure is the better of the two: with plain loads on
// 4 KiB pages this VM read 24 GB/s while the BF16 decode streamed ~29 GB/s, a roofline below what the kernels
// reach (bench/results/decode-quant-20261202-0458.md: "120%").
//   mem_bandwidth [THREADS...]   (default: 1 2)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace {

constexpr size_t kBytes = size_t(512) << 20;
constexpr int kPasses = 5;
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPrefetchWords = 4096 / sizeof(uint64_t);  // 4 KiB ahead, as the GEMV tiles

// XOR of [p, p + n) (n a multiple of 16 words) with four independent 256-bit accumulators: one load per
// instruction pair, so the loop runs at the memory's pace, not the core's.
template <bool kPrefetch>
__attribute__((target("avx2"))) uint64_t xor_avx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 16) {
    if constexpr (kPrefetch) {  // one 128-byte run = two lines; past the end is harmless (a hint)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchWords), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchWords + 8), _MM_HINT_T0);
    }
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  alignas(32) uint64_t w[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), x);
  return w[0] ^ w[1] ^ w[2] ^ w[3];
}

template <bool kPrefetch>
double read_gbs(const uint64_t* buf, size_t n, int threads) {
  double best = 0;
  volatile uint64_t sink = 0;
  for (int p = -1; p < kPasses; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(^ : total)
    {
      const size_t per = n / size_t(omp_get_num_threads()) / 16 * 16, t = size_t(omp_get_thread_num());
      total ^= xor_avx2<kPrefetch>(buf + t * per, per);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink ^ total;
    if (p >= 0) best = std::max(best, double(n * sizeof(uint64_t)) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::max(1, std::atoi(argv[i])));
  if (threads.empty()) threads = {1, 2};
  const size_t n = kBytes / sizeof(uint64_t);
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(kHugePage, kBytes));
  if (!buf) {
    std::fprintf(stderr, "mem_bandwidth: cannot allocate %zu bytes\n", kBytes);
    return 1;
  }
#ifdef __linux__
  madvise(buf, kBytes, MADV_HUGEPAGE);  // best effort: THP off or unsupported leaves 4 KiB pages
#endif
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  for (int t : threads) {
    const double plain = read_gbs<false>(buf, n, t), prefetched = read_gbs<true>(buf, n, t);
    std::printf("mem_bandwidth | threads %d | read %.1f GB/s (best of %d passes over %zu MiB on 2 MiB pages: plain "
                "loads %.1f, prefetched %.1f)\n",
                t, std::max(plain, prefetched), kPasses, kBytes >> 20, plain, prefetched);
  }
  std::free(buf);
  return 0;
}
