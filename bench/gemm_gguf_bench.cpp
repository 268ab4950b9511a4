// The GGUF block kernels alone (kernels/cpu/gemm_gguf.h): y = x · Wᵀ for W [n_out, n_in] in each format, m rows
// of x, one thread; prints µs a call, weight GB/s (weight bytes ÷ time: the decode roofline's measure) and
// GMAC/s. W is random blocks (finite scales), 8 MiB-ish so it streams from DRAM like a real layer would not
// — the model's layers are 0.3-2 MiB each and a decode step streams all of them in turn.
//   gemm_gguf_bench [N_OUT=4608] [N_IN=1536] [KERNEL=best|avx2|portable] [M,M,...=1,16]  (rows of x to time)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_gguf.h"

int main(int argc, char** argv) {
  using namespace tp;
  using namespace tp::cpu::detail;
  const int64_t n_out = argc > 1 ? std::atoll(argv[1]) : 4608, n_in = argc > 2 ? std::atoll(argv[2]) : 1536;
  const std::string k = argc > 3 ? argv[3] : "best";
  std::vector<int64_t> ms;
  for (const char* p = argc > 4 ? argv[4] : "1,16"; *p;) {
    char* end = nullptr;
    const long long m = std::strtoll(p, &end, 10);
    if (end == p || m < 1 || m > 4096 || (*end != ',' && *end != 0)) {
      std::fprintf(stderr, "gemm_gguf_bench: M list must be whole numbers in [1, 4096] separated by commas: %s\n", argv[4]);
      return 2;
    }
    ms.push_back(m);
    p = *end ? end + 1 : end;
  }
  const GgufKernel kernel = k == "avx2" ? GgufKernel::Avx2 : k == "portable" ? GgufKernel::Portable : GgufKernel::Best;
  std::mt19937 rng(1);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q6_K}) {
    PackedWeight w;
    w.format = gguf_weight_format(t);
    w.n_out = n_out;
    w.n_in = n_in;
    w.data = AlignedBytes(n_out * w.row_bytes());
    for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t b = 0; b < w.data.size() / bb; ++b) {  // finite scales
      const uint16_t h = f32_to_f16(0.01f);
      uint8_t* blk = w.data.data() + b * bb + (t == DType::Q6_K ? 208 : 0);
      std::memcpy(blk, &h, 2);
      if (t == DType::Q4_1 || t == DType::Q4_K) std::memcpy(blk + 2, &h, 2);
    }
    for (int64_t m : ms) {
      std::vector<float> x(size_t(m * n_in)), y(size_t(m * n_out));
      for (float& v : x) v = float(int(rng() % 2001) - 1000) / 1000.0f;
      const int reps = m == 1 ? 50 : m <= 16 ? 10 : 3;
      gemm_gguf(x.data(), m, w, y.data(), 1, kernel);
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) gemm_gguf(x.data(), m, w, y.data(), 1, kernel);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      std::printf("%-5s m=%-3lld [%lld x %lld] %-8s %8.1f us  %6.2f GB/s  %6.1f GMAC/s\n",
                  std::string(dtype_name(t)).c_str(), (long long)m, (long long)n_out, (long long)n_in, k.c_str(), s * 1e6,
                  double(w.data.size()) / s / 1e9, double(m * n_out * n_in) / s / 1e9);
    }
  }
  return 0;
}
