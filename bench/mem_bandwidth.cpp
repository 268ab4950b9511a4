// DRAM read bandwidth, for the decode roofline of bench/run_decode_bench.sh: N threads (OpenMP) each sum
// their share of a 512 MiB buffer (far beyond every cache) with 256-bit AVX2 loads, R passes after one warm-up;
// GB/s = bytes read / seconds of the best pass (10^9 bytes). Prints one line per thread count.
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

namespace {

constexpr size_t kBytes = size_t(512) << 20;
constexpr int kPasses = 5;

// XOR of [p, p + n) (n a multiple of 16 words) with four independent 256-bit accumulators: one load per
// instruction pair, so the loop runs at the memory's pace, not the core's.
__attribute__((target("avx2"))) uint64_t xor_avx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 16) {
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

double read_gbs(const uint64_t* buf, size_t n, int threads) {
  double best = 0;
  volatile uint64_t sink = 0;
  for (int p = -1; p < kPasses; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(^ : total)
    {
      const size_t per = n / size_t(omp_get_num_threads()) / 16 * 16, t = size_t(omp_get_thread_num());
      total ^= xor_avx2(buf + t * per, per);
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
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(64, kBytes));
  if (!buf) {
    std::fprintf(stderr, "mem_bandwidth: cannot allocate %zu bytes\n", kBytes);
    return 1;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  for (int t : threads)
    std::printf("mem_bandwidth | threads %d | read %.1f GB/s (best of %d passes over %zu MiB)\n", t, read_gbs(buf, n, t),
                kPasses, kBytes >> 20);
  std::free(buf);
  return 0;
}
