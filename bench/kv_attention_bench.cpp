// Paged attention per KV dtype and kernel: N query tokens (SmolLM2's 9 heads, 3 KV heads, head_dim 64) at the
// end of a context of C positions (N = 1: decode at depth C - 1; N > 1: a prefill chunk of N tokens at depth
// C - N) in blocks of 16 through a shuffled block table, on the AVX-512, AVX2 and portable paths, with the tiled
// kernel (paged_attention, the model's: on AVX-512 the lane kernels; there also the row kernel with split-K, "tiled rows";
// with AMX and bf16 pools also the AMX tile kernel, "tiled+amx", the model's there) and the naive one (paged_attention_naive). Reports µs per call (one
// layer), the KV bytes of the context (C x 2 x 3 x 64 x dtype bytes + block scales; each read once by an ideal
// kernel) and the rate they imply (bytes / time), and the speedup tiled / naive (naive time / tiled time, same
// dtype and path). --layers L keeps L copies of the pool (the model's layers) and times one call on each in
// turn, reporting the time per call: with L = 30 (SmolLM2) the KV of all layers is far larger than the caches,
// as in the model, and each call reads its layer from DRAM; L = 1 measures a pool that stays in L2/L3.
// Inputs as in the tests: uniform [-1, 1]. Best of --reps after a warm-up. "CPU µs" is the process CPU time of
// the best rep per call (all threads): on a shared, loaded machine it is what the kernel cost, where the wall
// time also holds the time the OS gave to other jobs.
//   kv_attention_bench [--threads 1] [--contexts 512,2048,8192] [--tokens 1] [--layers 1] [--reps 50]
//                      [--dtypes f32,bf16,fp8_e4m3,int8] [--paths avx512,avx2,portable] [--split-blocks 0]
//                      [--q-tokens 0]
// --split-blocks, --q-tokens: AttentionTiling's of the tiled kernels (0: their defaults; split -1: never split).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/kv_dtype.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

namespace {

using namespace tp;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoll(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

std::vector<KvDType> parse_dtypes(const std::string& s) {
  std::vector<KvDType> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(parse_kv_dtype(s.substr(at, comma - at), "--dtypes"));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// --gap-us: ~us microseconds of reading a 64 MiB buffer in this thread (512-bit loads), standing for a decode
// step's GEMVs between two attention calls: the caches then hold weights, not the kernel's code, scratch or q.
__attribute__((target("avx512f"))) void gap_work(double us) {
  static std::vector<float> buf(size_t(16) << 20, 1.0f);
  static size_t at = 0;
  const auto end = Clock::now() + std::chrono::nanoseconds(int64_t(us * 1e3));
  __m512 a = _mm512_setzero_ps();
  while (Clock::now() < end)
    for (int i = 0; i < 64; ++i, at = (at + 16) % buf.size()) a = _mm512_add_ps(a, _mm512_loadu_ps(buf.data() + at));
  alignas(64) float out[16];
  _mm512_store_ps(out, a);
  volatile float sink = out[0];
  (void)sink;
}

std::vector<cpu::AttentionImpl> parse_paths(const std::string& s) {
  std::vector<cpu::AttentionImpl> out;
  if (s.find("avx512") != std::string::npos) out.push_back(cpu::AttentionImpl::Avx512);
  if (s.find("avx2") != std::string::npos) out.push_back(cpu::AttentionImpl::Avx2);
  if (s.find("portable") != std::string::npos) out.push_back(cpu::AttentionImpl::Portable);
  if (out.empty()) throw std::runtime_error("--paths takes avx512, avx2 and/or portable");
  return out;
}

int run(int argc, char** argv) {
  int threads = 1, reps = 50;
  int64_t n_tok = 1, n_layers = 1, split_blocks = 0, q_tokens = 0;
  double gap_us = 0;
  std::vector<int64_t> contexts = {512, 2048, 8192};
  std::vector<KvDType> dtypes = {KvDType::F32, KvDType::BF16, KvDType::FP8_E4M3, KvDType::INT8};
  std::vector<cpu::AttentionImpl> paths = {cpu::AttentionImpl::Avx512, cpu::AttentionImpl::Avx2,
                                           cpu::AttentionImpl::Portable};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") threads = std::stoi(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--contexts") contexts = parse_list(v);
    else if (k == "--tokens") n_tok = std::stoll(v);
    else if (k == "--layers") n_layers = std::stoll(v);
    else if (k == "--gap-us") gap_us = std::stod(v);
    else if (k == "--dtypes") dtypes = parse_dtypes(v);
    else if (k == "--paths") paths = parse_paths(v);
    else if (k == "--split-blocks") split_blocks = std::stoll(v);
    else if (k == "--q-tokens") q_tokens = std::stoll(v);
    else throw std::runtime_error("unknown option " + k);
  }
  if (n_tok < 1 || n_layers < 1) throw std::runtime_error("--tokens and --layers must be >= 1");
  cpu::set_num_threads(threads);
  const int64_t n_heads = 9, n_kv = 3, d = 64, bs = 16;
  std::printf("paged attention, %lld query token(s) at the end of the context, 9 heads / 3 KV heads x 64, blocks of "
              "16, %lld layer pool(s) in turn, %d thread(s), best of %d, split_blocks %lld, q_tokens %lld\n\n",
              (long long)n_tok, (long long)n_layers, threads, reps, (long long)split_blocks, (long long)q_tokens);
  std::printf("| context | KV dtype | path | kernel | µs per call | CPU µs per call | KV bytes | GB/s | tiled speedup "
              "(CPU time) |\n|---:|---|---|---|---:|---:|---:|---:|---:|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t ctx : contexts) {
    if (ctx < n_tok) throw std::runtime_error("a context is shorter than --tokens");
    const int64_t n_blocks = (ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<float> k(size_t(ctx * n_kv * d)), v(k.size()), q(size_t(n_tok * n_heads * d)), out(q.size());
    for (float& x : k) x = uni(rng);
    for (float& x : v) x = uni(rng);
    for (float& x : q) x = uni(rng);
    std::vector<int64_t> slots(static_cast<size_t>(ctx));
    for (int64_t p = 0; p < ctx; ++p) slots[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
    for (KvDType dt : dtypes) {
      const KvBlockLayout layout{dt, bs, n_kv, d, false};
      const size_t layer_bytes = size_t(n_blocks * layout.block_bytes());
      std::vector<uint8_t> kb(layer_bytes * size_t(n_layers)), vb(kb.size());
      std::vector<KvTensorView> kv_k, kv_v;
      for (int64_t li = 0; li < n_layers; ++li) {
        kv_k.push_back({kb.data() + size_t(li) * layer_bytes, n_blocks, layout, 1.0f});
        kv_v.push_back({vb.data() + size_t(li) * layer_bytes, n_blocks, layout, 1.0f});
        cpu::write_kv(k.data(), v.data(), ctx, slots.data(), kv_k.back(), kv_v.back());
      }
      const int64_t bytes = 2 * (ctx * layout.row_bytes() + n_blocks * layout.scale_bytes());
      for (cpu::AttentionImpl impl : paths) {
        if (impl == cpu::AttentionImpl::Avx2 && !cpu::attention_has_avx2()) continue;
        if (impl == cpu::AttentionImpl::Avx512 && !cpu::attention_has_avx512()) continue;
        double naive_best = 0;
        // kernel 0: naive, 1: tiled (on AVX-512 the lane kernels, AttentionTiling::lanes, without AMX), 2: on
        // AVX-512, tiled with the row kernel and split-K (lanes off, what AVX2 and portable run), 3: on CPUs with
        // AMX and bf16 pools, the AMX tile kernel (the model's there, AttentionTiling::amx)
        const bool amx = impl == cpu::AttentionImpl::Avx512 && dt == KvDType::BF16 && cpu::attention_has_amx();
        for (int kernel = 0; kernel < (impl == cpu::AttentionImpl::Avx512 ? (amx ? 4 : 3) : 2); ++kernel) {
          const bool tiled = kernel > 0;
          cpu::AttentionTiling tiling;
          tiling.lanes = kernel == 1 || kernel == 3;
          tiling.amx = kernel == 3;
          tiling.split_blocks = split_blocks;
          tiling.q_tokens = q_tokens;
          double best = 1e30, best_cpu = 1e30;
          for (int r = 0; r < reps + 3; ++r) {
            const double c0 = cpu_seconds();
            auto t0 = Clock::now();
            double gap_s = 0, gap_cpu = 0;  // --gap-us: the time spent between calls, taken out of the call times
            for (int64_t li = 0; li < n_layers; ++li) {
              if (gap_us > 0) {
                const auto g0 = Clock::now();
                const double gc0 = cpu_seconds();
                gap_work(gap_us);
                gap_s += std::chrono::duration<double>(Clock::now() - g0).count();
                gap_cpu += cpu_seconds() - gc0;
              }
              const KvTensorView &lk = kv_k[size_t(li)], &lv = kv_v[size_t(li)];
              if (tiled)
                cpu::paged_attention(q.data(), n_tok, ctx - n_tok, n_heads, lk, lv, table.data(), 0.125f, out.data(),
                                     impl, tiling);
              else
                cpu::paged_attention_naive(q.data(), n_tok, ctx - n_tok, n_heads, lk, lv, table.data(), 0.125f,
                                           out.data(), impl);
            }
            const double s = (std::chrono::duration<double>(Clock::now() - t0).count() - gap_s) / double(n_layers);
            const double c = (cpu_seconds() - c0 - gap_cpu) / double(n_layers);
            if (r >= 3) best = std::min(best, s), best_cpu = std::min(best_cpu, c);
          }
          if (!tiled) naive_best = best_cpu;
          char speedup[32] = "";
          if (tiled) std::snprintf(speedup, sizeof speedup, "%.2fx", naive_best / best_cpu);
          std::printf("| %lld | %s | %s | %s | %.1f | %.1f | %lld | %.1f | %s |\n", (long long)ctx,
                      std::string(kv_dtype_name(dt)).c_str(), cpu::attention_impl_name(impl),
                      kernel == 3 ? "tiled+amx" : kernel == 2 ? "tiled rows" : kernel == 1 && impl == cpu::AttentionImpl::Avx512 ? "tiled+lanes" : tiled ? "tiled" : "naive", best * 1e6, best_cpu * 1e6, (long long)bytes, double(bytes) / best / 1e9, speedup);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_attention_bench: %s\n", e.what());
    return 1;
  }
}
