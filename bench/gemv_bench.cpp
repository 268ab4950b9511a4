// GEMV bandwidth: our linear() GEMV path vs oneDNN matmul at m = 1, BF16 and F32 weights, 1 and 2 threads.
//   GB/s = weight bytes / seconds per call (x and y are negligible at these shapes).
//   cold: each call uses the next of N copies of the weight (N·bytes ≥ 768 MiB, beyond any L3 here), so W
//         streams from DRAM as in a decode step over all layers; hot: the same copy every call.
//   oneDNN: its reordered weight copy (Weight::gemm_cache_bytes) is made during the untimed warm-up pass.
//   read: a plain vectorized sum over the same bytes — the read roofline of this machine, now.
//   p50 / best: median and fastest single call (each call timed alone; the best is the least disturbed by
//   other processes on a shared machine).
// Then an M sweep (cold, GFLOP/s = 2·m·n_out·n_in / s at p50) to place the GEMV → oneDNN crossover; m = 512 is
// a prefill chunk. Where oneDNN has no matmul for the dtype (BF16 on AVX2-only CPUs) its columns print nan.
// On CPUs with AMX the sweep's "amx" column is our AMX tile kernel on oneDNN's blocked copy (gemm_bf16_amx.h,
// what linear() runs there for 1 <= m <= 128) and "onednn" oneDNN's own matmul (set_amx_gemm(false)).
// --shapes: only SmolLM2-135M's decode shapes (qkv 960x576, kv 192x576, o 576x576, gate_up 3072x576, up/gate
// 1536x576, down 576x1536, lm_head 49152x576), BF16, m = 1, cold over 256 MiB of copies, 1 and 2 threads:
// gemv, oneDNN and the read roofline timed alternately call by call, GB/s at p50 and best, and gemv / read.
// Usage: gemv_bench [--quick | --shapes | --sweep (the M sweep only)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/linear.h"

using tp::DType;
using tp::cpu::LinearImpl;
using tp::cpu::Weight;

namespace {

std::vector<std::unique_ptr<Weight>> make_copies(DType dtype, int64_t n_out, int64_t n_in, int64_t min_total) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(n_out * n_in));
  for (float& f : src) f = uni(rng);
  std::vector<std::unique_ptr<Weight>> c;
  const int64_t one = tp::dtype_row_bytes(dtype, n_in) * n_out;
  const int64_t n = std::max<int64_t>(2, (min_total + one - 1) / one);
  for (int64_t i = 0; i < n; ++i)
    c.push_back(std::make_unique<Weight>(dtype, n_out, n_in, DType::F32, src.data(), n_in * 4));
  return c;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float read_sum(const float* p, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

struct Timing {
  double p50, best;  // seconds per call
};

// Times `call(i)` for i = 0, 1, ... individually until `min_seconds` have passed (at least `min_calls`),
// after `warmup` untimed calls (one pass over all weight copies: oneDNN reorders each copy on first use).
Timing time_calls(const std::function<void(size_t)>& call, size_t warmup, size_t min_calls, double min_seconds) {
  using clock = std::chrono::steady_clock;
  for (size_t i = 0; i < warmup; ++i) call(i);
  std::vector<double> t;
  const auto start = clock::now();
  for (size_t i = 0;; ++i) {
    const auto t0 = clock::now();
    call(i);
    const auto t1 = clock::now();
    t.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (t.size() >= min_calls && std::chrono::duration<double>(t1 - start).count() >= min_seconds) break;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

// Alternates the calls of several candidates (one call each in turn) so that load from other processes falls on
// all of them alike; per-candidate p50 and best seconds per call.
std::vector<Timing> time_alternating(const std::vector<std::function<void(size_t)>>& calls, size_t warmup,
                                     size_t min_calls, double min_seconds) {
  using clock = std::chrono::steady_clock;
  // Candidate j is called with i + j * warmup / n: a different copy from the one its predecessor just read
  // (with warmup = the number of copies, each candidate is a third of the ring apart).
  const size_t n = calls.size();
  for (const auto& c : calls)
    for (size_t i = 0; i < warmup; ++i) c(i);
  std::vector<std::vector<double>> t(calls.size());
  const auto start = clock::now();
  for (size_t i = 0;; ++i) {
    for (size_t j = 0; j < calls.size(); ++j) {
      const auto t0 = clock::now();
      calls[j](i + j * warmup / n);
      t[j].push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    if (t[0].size() >= min_calls && std::chrono::duration<double>(clock::now() - start).count() >= min_seconds) break;
  }
  std::vector<Timing> out;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    out.push_back({v[v.size() / 2], v[0]});
  }
  return out;
}

int smollm2_shapes() {
  struct Named {
    const char* name;
    int64_t n_out, n_in;
  };
  const bool dnn = tp::cpu::linear_has_onednn(DType::BF16);
  const Named shapes[] = {{"qkv", 960, 576},     {"kv", 192, 576},       {"o", 576, 576},
                          {"gate_up", 3072, 576}, {"gate", 1536, 576},   {"down", 576, 1536},
                          {"lm_head", 49152, 576}};
  std::printf("SmolLM2-135M decode shapes, BF16, m = 1, cold; GB/s of weight bytes, p50/best\n");
  std::printf("%-8s %-10s %3s | %-11s %-11s %-11s | %7s %7s\n", "layer", "W[out,in]", "thr", "read", "gemv", "onednn",
              "gemv/rd", "gemv/dnn");
  for (const Named& s : shapes) {
    const auto c = make_copies(DType::BF16, s.n_out, s.n_in, int64_t(256) << 20);
    const double bytes = double(c[0]->n_bytes());
    std::vector<float> x(static_cast<size_t>(s.n_in), 0.5f), y(static_cast<size_t>(s.n_out));
    for (int threads : {1, 2}) {
      tp::cpu::set_num_threads(threads);
      const size_t n = c.size();
      auto lin = [&](LinearImpl impl) {
        return [&, impl](size_t i) { tp::cpu::linear(x.data(), 1, *c[i % n], y.data(), impl); };
      };
      auto rd = [&](size_t i) {
        const auto* p = static_cast<const float*>(c[i % n]->data());
        const int64_t cnt = c[0]->n_bytes() / 4, per = cnt / threads;
        float sum = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum)
        for (int t = 0; t < threads; ++t) sum += read_sum(p + t * per, per);
        y[0] = sum;
      };
      std::vector<std::function<void(size_t)>> calls = {rd, lin(LinearImpl::Gemv)};
      if (dnn) calls.push_back(lin(LinearImpl::Onednn));
      auto r = time_alternating(calls, n, 3 * n, 0.3);
      if (!dnn) r.push_back({NAN, NAN});  // no oneDNN BF16 matmul here (AVX2-only CPU): printed as nan
      auto gb = [&](double sec) { return bytes / sec / 1e9; };
      const std::string dims = std::to_string(s.n_out) + "x" + std::to_string(s.n_in);
      std::printf("%-8s %-10s %3d | %5.1f/%5.1f %5.1f/%5.1f %5.1f/%5.1f | %7.2f %7.2f\n", s.name, dims.c_str(),
                  threads, gb(r[0].p50), gb(r[0].best), gb(r[1].p50), gb(r[1].best), gb(r[2].p50), gb(r[2].best),
                  r[0].p50 / r[1].p50, r[2].p50 / r[1].p50);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--shapes") == 0) return smollm2_shapes();
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const double min_s = quick ? 0.2 : 1.0;
  const int64_t cold_bytes = int64_t(768) << 20;
  std::printf("avx512 gemv: bf16 %s, f32 %s; oneDNN from m >= %lld (bf16), %lld (f32)\n",
              tp::cpu::gemv_has_avx512(DType::BF16) ? "yes" : "no", tp::cpu::gemv_has_avx512(DType::F32) ? "yes" : "no",
              static_cast<long long>(tp::cpu::linear_gemm_min_m(DType::BF16)),
              static_cast<long long>(tp::cpu::linear_gemm_min_m(DType::F32)));
  struct Shape {
    DType dtype;
    int64_t n_out, n_in;
  };
  const Shape shapes[] = {{DType::BF16, 576, 1536}, {DType::BF16, 49152, 576}, {DType::F32, 576, 1536}};

  const bool sweep_only = argc > 1 && std::strcmp(argv[1], "--sweep") == 0;
  if (!sweep_only) std::printf("\nm = 1, GB/s of weight traffic\n");
  std::printf("%-5s %-10s %3s %5s | %-11s %-11s %-11s %-11s | %8s %8s\n", "dtype", "W[out,in]", "thr", "cache",
              "read p50/best", "gemv", "onednn", "portable", "gemv/dnn", "gemv/rd");
  for (const Shape& s : shapes) {
    if (sweep_only) break;
    const auto c = make_copies(s.dtype, s.n_out, s.n_in, cold_bytes);
    const double bytes = double(c[0]->n_bytes());
    const std::string dims = std::to_string(s.n_out) + "x" + std::to_string(s.n_in);
    std::vector<float> x(static_cast<size_t>(s.n_in), 0.5f), y(static_cast<size_t>(s.n_out));
    for (int threads : {1, 2}) {
      tp::cpu::set_num_threads(threads);
      for (bool cold : {true, false}) {
        const size_t n_use = cold ? c.size() : 1;
        const size_t min_calls = 3 * n_use;
        auto lin = [&](LinearImpl impl) {
          return time_calls([&](size_t i) { tp::cpu::linear(x.data(), 1, *c[i % n_use], y.data(), impl); }, n_use,
                            min_calls, min_s);
        };
        const Timing rd = time_calls(
            [&](size_t i) {
              const auto* p = static_cast<const float*>(c[i % n_use]->data());
              const int64_t n = c[0]->n_bytes() / 4, per = n / threads;
              float s = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : s)
              for (int t = 0; t < threads; ++t) s += read_sum(p + t * per, per);
              y[0] = s;
            },
            n_use, min_calls, min_s);
        const Timing g = lin(LinearImpl::Gemv), p = lin(LinearImpl::GemvPortable);
        const Timing d = tp::cpu::linear_has_onednn(s.dtype) ? lin(LinearImpl::Onednn) : Timing{NAN, NAN};
        auto gb = [&](double sec) { return bytes / sec / 1e9; };
        std::printf("%-5s %-10s %3d %5s | %5.1f/%5.1f %5.1f/%5.1f %5.1f/%5.1f %5.1f/%5.1f | %8.2f %8.2f\n",
                    std::string(tp::dtype_name(s.dtype)).c_str(), dims.c_str(), threads, cold ? "cold" : "hot",
                    gb(rd.p50), gb(rd.best), gb(g.p50), gb(g.best), gb(d.p50), gb(d.best), gb(p.p50), gb(p.best),
                    d.p50 / g.p50, rd.p50 / g.p50);
      }
    }
  }

  std::printf("\nM sweep, BF16 cold, GFLOP/s at p50\n");
  std::printf("%-10s %3s %4s | %8s %8s %8s\n", "W[out,in]", "thr", "m", "gemv", "onednn", "amx");
  for (const Shape& s : {Shape{DType::BF16, 1536, 576}, Shape{DType::BF16, 576, 1536}}) {
    const auto c = make_copies(s.dtype, s.n_out, s.n_in, cold_bytes);
    const std::string dims = std::to_string(s.n_out) + "x" + std::to_string(s.n_in);
    for (int threads : {1, 2}) {
      tp::cpu::set_num_threads(threads);
      for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) {
        std::vector<float> x(static_cast<size_t>(m * s.n_in), 0.5f), y(static_cast<size_t>(m * s.n_out));
        const size_t calls = m >= 64 ? 16 : c.size();  // compute-bound there: fewer calls, W partly in L3
        auto lin = [&](LinearImpl impl) {
          return time_calls([&](size_t i) { tp::cpu::linear(x.data(), m, *c[i % c.size()], y.data(), impl); },
                            calls, calls, min_s / 4);
        };
        const double flop = 2.0 * double(m) * double(s.n_out) * double(s.n_in) / 1e9;
        const bool amx = tp::cpu::amx_gemm();
        tp::cpu::set_amx_gemm(false);
        const double onednn = tp::cpu::linear_has_onednn(s.dtype) ? flop / lin(LinearImpl::Onednn).p50 : NAN;
        tp::cpu::set_amx_gemm(true);
        const double ours = amx && m <= 128 ? flop / lin(LinearImpl::Onednn).p50 : NAN;
        std::printf("%-10s %3d %4lld | %8.1f %8.1f %8.1f\n", dims.c_str(), threads, static_cast<long long>(m),
                    flop / lin(LinearImpl::Gemv).p50, onednn, ours);
      }
    }
  }
  return 0;
}
