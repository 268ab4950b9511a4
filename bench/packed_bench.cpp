// The packed-weight kernels (kernels/cpu/packed_kernels.h) on SmolLM2-135M's linear shapes, as the model runs them
// (30 layers of qkv 960x576, o 576x576, gate_up 3072x576, down 576x1536; the BF16 lm_head is not here):
//   decode: m = 1 through every layer's four weights in order (106 MiB of int8, past any L3 here: W streams
//           from DRAM as in a decode step); GB/s = weight bytes / seconds, and ms a step.
//   prefill: m = 512 (--m) through 2 layers; GMAC/s = m · Σ n_out·n_in / seconds.
// Formats: CT-W8A8-INT8 (int8 per channel, int8 per-token activations), W8A16 (int8 per channel), W4A16-g64,
// FP8-dynamic (E4M3 per channel, FP8 per-token activations); w4a16-gidx / w8a16-g128-gidx: act-order (g_idx, a
// random assignment of whole groups of 64 / 128 columns, as GPTQ's actorder "group" makes), w8a16-g128 without;
// mxfp4 / nvfp4 (E2M1, E8M0 / E4M3 block scales of 32 / 16 columns); fp8-block (E4M3, a scale a 128 × 128 block,
// FP8 activations per 128 columns: llm-compressor's FP8_BLOCK) and fp8-block-rows (the same scales held a row each,
// as our loader holds a fused q|k|v or gate|up weight's). Each figure: the best of --reps passes (the least
// disturbed on a shared machine) and the median, in CPU seconds of the process (cpu_now below), not wall time.
// Usage: packed_bench [--threads N] [--reps N] [--m M] [--only w8a8|w8a16|w4a16|fp8|mxfp4|nvfp4|...] [--isa portable|avx2|avx512]
//                     [--no-decode | --no-prefill] (one pass of the other: under `perf stat`, cycles of one kind)
//                     [--layers N] (30: the model; 1: 3.5 MiB of int8, in L3 — the kernel's compute ceiling)
//                     [--as-loaded] (each weight through cpu::Weight and linear(): the layout a loaded model's
//                     weight takes on this CPU, kernels/cpu/linear.h; without it the kernels read the checkpoint's)
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/packed_weight.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_kernels.h"

using namespace tp;
using tp::cpu::detail::PackedIsa;

namespace {

struct Fmt {
  const char* name;
  WeightFormat format;
  int64_t group;  // 0: per channel
  ActQuant act;
  bool gidx = false;  // act-order: g_idx a shuffled assignment of whole groups
  int64_t block_out = 0;  // Fp8: block scales of block_out rows × 128 columns, activations per 128 columns
};

PackedWeight make(const Fmt& f, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  PackedWeight w;
  w.format = f.format;
  w.n_out = n_out;
  w.n_in = n_in;
  w.act = f.act;
  w.group_size = f.format == WeightFormat::Fp8E4M3 || f.format == WeightFormat::Mxfp4 || f.format == WeightFormat::Nvfp4
                     ? 0
                     : (f.group > 0 ? f.group : n_in);
  if (f.block_out > 0) {
    w.block_out = f.block_out;
    w.group_size = 128;
    w.act_group = 128;
  }
  w.data = AlignedBytes(n_out * w.row_bytes());
  uint64_t state = rng() | 1;  // xorshift: mt19937 a byte took most of the bench's time
  for (int64_t i = 0; i < w.data.size(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    uint8_t b = uint8_t(state >> 24);
    if (f.format == WeightFormat::Fp8E4M3 && (b & 0x7f) == 0x7f) b &= 0xfe;
    w.data.data()[i] = b;
  }
  if (f.format == WeightFormat::Mxfp4 || f.format == WeightFormat::Nvfp4) {  // block scales: E8M0 2^-7..2^-4, E4M3 ~0.02-0.1
    const bool mx = f.format == WeightFormat::Mxfp4;
    w.scale_bytes.resize(size_t(n_out * (n_in / (mx ? 32 : 16))));
    for (uint8_t& b : w.scale_bytes) b = mx ? uint8_t(120 + rng() % 4) : uint8_t(0x18 + rng() % 16);
    if (!mx) w.global_scale = 0.5f;
    return w;
  }
  if (f.block_out > 0) {  // a scale a block; with block_out 1 (a fused weight's rows) runs of 128 rows share theirs
    const int64_t nb_in = (n_in + 127) / 128, nb_out = (n_out + f.block_out - 1) / f.block_out;
    for (int64_t b = 0; b < nb_out; ++b)
      for (int64_t c = 0; c < nb_in; ++c) w.scales.push_back(0.01f + 1e-4f * float((b * f.block_out / 128 + c) % 7));
    return w;
  }
  w.scales.assign(size_t(f.format == WeightFormat::Fp8E4M3 ? n_out : n_out * w.n_groups()), 0.01f);
  if (f.gidx) {
    for (int64_t c = 0; c < n_in; ++c) w.g_idx.push_back(int32_t(c / w.group_size));
    std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  }
  return w;
}

// Seconds of this process's CPU time (all threads): on a shared machine a kernel's own time, less disturbed
// than the wall clock when other processes take turns on the cores (with --threads 1; wall otherwise).
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 5, layers = 30;
  int64_t pm = 512;
  std::string only, isa_name;
  bool decode = true, prefill = true, as_loaded = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--m" && i + 1 < argc) pm = std::atoll(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--isa" && i + 1 < argc) isa_name = argv[++i];
    else if (a == "--layers" && i + 1 < argc) layers = std::atoi(argv[++i]);
    else if (a == "--no-decode") decode = false;
    else if (a == "--no-prefill") prefill = false;
    else if (a == "--as-loaded") as_loaded = true;
    else {
      std::fprintf(stderr, "usage: packed_bench [--threads N] [--reps N] [--m M] [--only NAME] [--isa NAME] [--layers N] [--as-loaded]\n");
      return 2;
    }
  }
  cpu::set_num_threads(threads);  // the dense linear() some prefill paths end in
  PackedIsa isa = cpu::detail::packed_best_isa();
  if (isa_name == "portable") isa = PackedIsa::Portable;
  if (isa_name == "avx2") isa = PackedIsa::Avx2;
  const Fmt fmts[] = {
      {"w8a8", WeightFormat::Int8, 0, ActQuant::Int8Dynamic},
      {"w8a16", WeightFormat::Int8, 0, ActQuant::None},
      {"w4a16", WeightFormat::Int4, 64, ActQuant::None},
      {"fp8", WeightFormat::Fp8E4M3, 0, ActQuant::Fp8Dynamic},
      {"w4a16-gidx", WeightFormat::Int4, 64, ActQuant::None, true},
      {"w8a16-g128", WeightFormat::Int8, 128, ActQuant::None},
      {"w8a16-g128-gidx", WeightFormat::Int8, 128, ActQuant::None, true},
      {"mxfp4", WeightFormat::Mxfp4, 0, ActQuant::None},
      {"nvfp4", WeightFormat::Nvfp4, 0, ActQuant::None},
      {"fp8-block", WeightFormat::Fp8E4M3, 0, ActQuant::Fp8Dynamic, false, 128},
      {"fp8-block-rows", WeightFormat::Fp8E4M3, 0, ActQuant::Fp8Dynamic, false, 1},
  };
  const int64_t shapes[4][2] = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
  const int kLayers = layers, kPrefillLayers = std::min(2, layers);
  std::printf("packed_bench: threads %d, isa %d, reps %d (best / median)%s\n", threads, int(isa), reps,
              as_loaded ? ", as loaded (cpu::Weight, linear())" : "");
  for (const Fmt& f : fmts) {
    if (!only.empty() && only != f.name) continue;
    std::mt19937 rng(1);
    std::vector<PackedWeight> ws;
    std::vector<cpu::Weight> loaded;
    int64_t bytes = 0, macs = 0;
    for (int l = 0; l < kLayers; ++l)
      for (const auto& s : shapes) {
        ws.push_back(make(f, s[0], s[1], rng));
        bytes += ws.back().n_bytes();
        if (l < kPrefillLayers) macs += s[0] * s[1];
        if (as_loaded) {
          loaded.emplace_back(std::move(ws.back()));
          ws.pop_back();
        }
      }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(pm * 1536)), y(size_t(pm * 3072));
    for (float& v : x) v = nd(rng);
    auto run = [&](size_t k, int64_t m) {
      if (as_loaded)
        cpu::linear(x.data(), m, loaded[k], y.data());
      else
        cpu::detail::packed_linear_isa(x.data(), m, ws[k], y.data(), threads, isa);
    };
    const size_t n_weights = as_loaded ? loaded.size() : ws.size();
    // decode
    std::vector<double> t_dec;
    for (int r = 0; r < (decode ? reps + 1 : 2); ++r) {
      const double t0 = cpu_now();
      for (size_t k = 0; k < n_weights; ++k) run(k, 1);
      if (r > 0) t_dec.push_back(cpu_now() - t0);
    }
    std::vector<double> t_pre;
    for (int r = 0; r < (prefill ? std::max(1, reps / 2) + 1 : 2); ++r) {
      const double t0 = cpu_now();
      for (size_t k = 0; k < size_t(4 * kPrefillLayers); ++k)
        run(k, pm);
      if (r > 0) t_pre.push_back(cpu_now() - t0);
    }
    std::sort(t_dec.begin(), t_dec.end());
    std::sort(t_pre.begin(), t_pre.end());
    const double db = t_dec.front(), dm = t_dec[t_dec.size() / 2], pb = t_pre.front(), pmed = t_pre[t_pre.size() / 2];
    std::printf("%-6s decode %6.1f MiB: %6.2f ms (%5.2f GB/s) median %6.2f ms | prefill m %lld: %6.2f GMAC/s median %6.2f\n",
                f.name, double(bytes) / (1 << 20), db * 1e3, double(bytes) / db * 1e-9, dm * 1e3, (long long)pm,
                double(macs) * double(pm) / pb * 1e-9, double(macs) * double(pm) / pmed * 1e-9);
    std::fflush(stdout);
  }
  return 0;
}
