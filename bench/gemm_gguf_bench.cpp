// Every weight format's kernel alone, through tp::cpu::linear() (what the model calls): y = x · Wᵀ on the
// SmolLM2-135M shapes, for BF16 (the baseline), GGUF Q8_0 (and Q8_0 regrouped: q8_0_quads) / Q4_0 / Q4_1 / Q5_0
// (and q5_0_quads) / Q5_1 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_NL, W8A16 (int8 per channel), W4A16 (int4, groups of 64; w4a16_channel
// and w4a16_g128 too), W8A8-INT8 (int8 per channel, int8 activations per token), FP8 weight only (E4M3 per channel),
// FP8 dynamic (W8A8-FP8: activations rounded to E4M3 per token), MXFP4 and NVFP4.
// Decode (m = 1): weight GB/s = bytes held by W (values + scales) ÷ seconds a call, and that as a fraction of
// the DRAM read roofline BW_GBS (bench/mem_bandwidth); the weights stream from DRAM as in a decode step: the
// call cycles over enough copies of W (≥ 192 MiB) that none is still in cache. Prefill (m = M_PREFILL):
// GMAC/s (m · n_out · n_in ÷ seconds) and × BF16 on the same shape (one copy: compute-bound).
// 1 thread: timed in this thread's CPU time (see now()); more: wall time. Each figure is the median of 5 timed rounds (each ≥ 0.1 s), the formats alternating within a round.
//   gemm_gguf_bench [THREADS=1] [BW_GBS=27] [M_PREFILL=512 | 32,64,... (0: none)] [FORMATS=all | bf16,q8_0,...]
// A GGUF format name may carry a path suffix (linear()'s LinearImpl; kernels/cpu/gemm_gguf_bf16.h):
// NAME+tile the int8 tile at every m, NAME+bf16 W dequantized to BF16 in slabs of 256 rows + oneDNN,
// NAME+bf16w the same with all of W dequantized at once, NAME+bf16sN slabs of N rows; NAME alone: linear()'s
// choice. Any weight-only format but GGUF's may carry +x16: x rounded to BF16 (the BF16 runtime's activations,
// PackedWeight::act_bf16) instead of F32. Weights are kept in the layout made (cpu::Weight's relayout off): the
// 4-bit ones (w4a16_*, mxfp4, nvfp4, q4_0, q4_1, iq4_nl) read as the checkpoint's rows; +r16 (F32 x) or +r16x16 (BF16
// x) puts them in 16-row blocks first (common/rows16_layout.h Rows16), which linear() sends to the GEMM-form decode
// (kernels/cpu/rows16.h). Several M_PREFILL values: one prefill column each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "common/dtype.h"
#include "common/fp_formats.h"
#include "common/gguf_layout.h"
#include "common/packed_weight.h"
#include "kernels/cpu/gemm_gguf_bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rows16.h"

namespace {

using namespace tp;

struct Fmt {
  std::string name;
  WeightFormat format;
  int64_t group = 0;  // Int: columns a group (0: per channel)
  ActQuant act = ActQuant::None;
  GgufLayout layout = GgufLayout::File;  // GGUF rows regrouped (common/gguf_layout.h); File: kept as the file's
  cpu::LinearImpl impl = cpu::LinearImpl::Auto;
  int64_t slab = 0;  // > 0: detail::gemm_gguf_bf16 with slabs of this many rows
  bool act_bf16 = false;  // x rounded to BF16 (PackedWeight::act_bf16: the BF16 runtime's A16 weights)
  bool rows16 = false;  // Int4 / MXFP4 / NVFP4 in 16-row blocks (common/rows16_layout.h Rows16)
};

PackedWeight make(const Fmt& f, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (f.format == WeightFormat::BF16) {
    std::vector<float> src(size_t(n_out * n_in));
    for (float& v : src) v = u(rng) * 0.05f;
    return pack_dense(WeightFormat::BF16, n_out, n_in, src.data());
  }
  PackedWeight w;
  w.format = f.format;
  w.n_out = n_out;
  w.n_in = n_in;
  w.act = f.act;
  w.act_bf16 = f.act_bf16 && !is_gguf_format(f.format);  // GGUF: in Rows16 only (below)
  if (f.format == WeightFormat::Int8 || f.format == WeightFormat::Int4) w.group_size = f.group > 0 ? f.group : n_in;
  w.data = AlignedBytes(n_out * w.row_bytes());
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  if (is_gguf_format(f.format)) {  // finite block scales
    const DType t = gguf_block_dtype(f.format);
    const int64_t bb = dtype_block_bytes(t);
    const uint16_t h = f32_to_f16(0.01f);
    const auto [at, n_f16] = block_f16s(t);
    for (int64_t b = 0; b < w.data.size() / bb; ++b)
      for (int k = 0; k < n_f16; ++k) std::memcpy(w.data.data() + b * bb + at + 2 * k, &h, 2);
  } else if (f.format == WeightFormat::Fp8E4M3) {
    // Codes of normal values whose row maximum is near E4M3's 448, as a checkpoint's per-channel scales make them
    // (zeros and subnormals as rare as there).
    std::normal_distribution<float> nd(0.0f, 448.0f / 4.5f);
    for (int64_t i = 0; i < w.data.size(); ++i)
      w.data.data()[i] = f32_to_fp8_e4m3(std::clamp(nd(rng), -448.0f, 448.0f));
    if (f.group > 0) {  // 128 x 128 block scales (fp8_block), as DeepSeek / Qwen3 FP8 checkpoints ship them
      w.group_size = w.block_out = f.group;
      w.scales.assign(size_t((n_out + f.group - 1) / f.group * w.n_groups()), 0.001f);
    } else {
      w.scales.assign(size_t(n_out), 0.001f);
    }
  } else if (f.format == WeightFormat::Mxfp4 || f.format == WeightFormat::Nvfp4) {  // 2^-7 / E4M3 0.5 block scales
    const bool mx = f.format == WeightFormat::Mxfp4;
    w.scale_bytes.assign(size_t(n_out * n_in / (mx ? 32 : 16)), mx ? uint8_t(120) : f32_to_fp8_e4m3(0.5f));
    w.global_scale = mx ? 1.0f : 0.01f;
  } else {  // BF16 scales, as checkpoints of BF16 models ship them (a16_bf16_prefill's exact BF16 parts need them)
    w.scales.assign(size_t(n_out * w.n_groups()), bf16_to_f32(f32_to_bf16(0.001f)));
  }
  if (f.layout != GgufLayout::File) {
    std::vector<uint8_t> row(static_cast<size_t>(w.row_bytes()));
    for (int64_t r = 0; r < n_out; ++r) {
      std::memcpy(row.data(), w.data.data() + r * w.row_bytes(), row.size());
      gguf_row_from_file_layout(f.layout, row.data(), n_in, w.data.data() + r * w.row_bytes());
    }
    w.gguf_layout = f.layout;
  }
  check_packed_weight(w);
  return w;
}

// The clock: with 1 thread, this thread's CPU time (a shared, loaded machine deschedules us; CPU time does not
// count that, though memory contention from the other tenants still shows); with more, wall time.
bool g_cpu_clock = false;
double now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds a call: `calls` calls cycling over the copies, repeated until ≥ 0.1 s.
double time_calls(const Fmt& f, const cpu::Weight* ws, size_t n_ws, const std::vector<float>& x, int64_t m,
                  std::vector<float>& y) {
  size_t k = 0;
  int64_t n = 0;
  const double t0 = now();
  double t = t0;
  while (t - t0 < 0.1) {
    for (int i = 0; i < 8; ++i, ++n) {
      const cpu::Weight& w = ws[k % n_ws];
      if (f.slab > 0) {
        cpu::detail::gemm_gguf_bf16(x.data(), m, w.packed(), y.data(), cpu::num_threads(), f.slab);
      } else {
        cpu::linear(x.data(), m, w, y.data(), f.impl);
      }
      ++k;
    }
    t = now();
  }
  return (t - t0) / double(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const double bw = argc > 2 ? std::atof(argv[2]) : 27.0;
  std::vector<int64_t> m_list;
  for (std::string ms = argc > 3 ? argv[3] : "512"; !ms.empty();) {
    const size_t c = ms.find(',');
    const int64_t v = std::atoll(ms.substr(0, c).c_str());
    if (v > 1) m_list.push_back(v);
    ms = c == std::string::npos ? "" : ms.substr(c + 1);
  }
  const int64_t m_prefill = m_list.empty() ? 0 : *std::max_element(m_list.begin(), m_list.end());
  const std::string only = argc > 4 ? std::string(",") + argv[4] + "," : "";  // e.g. "bf16,q8_0": these formats
  cpu::set_num_threads(threads);
  g_cpu_clock = threads == 1;
  using F = WeightFormat;
  std::vector<Fmt> fmts = {
      {"bf16", F::BF16},
      {"q8_0", F::GgufQ8_0},
      {"q8_0_quads", F::GgufQ8_0, 0, ActQuant::None, GgufLayout::Q8_0Quads},
      {"q4_0", F::GgufQ4_0},
      {"q4_0_groups", F::GgufQ4_0, 0, ActQuant::None, GgufLayout::Q4_0Groups},
      {"q8_0_groups", F::GgufQ8_0, 0, ActQuant::None, GgufLayout::Q8_0Groups},
      {"q4_1", F::GgufQ4_1},
      {"q5_0", F::GgufQ5_0},
      {"q5_0_quads", F::GgufQ5_0, 0, ActQuant::None, GgufLayout::Q5_0Quads},
      {"q5_0_groups", F::GgufQ5_0, 0, ActQuant::None, GgufLayout::Q5_0Groups},
      {"q5_1", F::GgufQ5_1},  // +r16 for its kernel (Rows16), as iq4_nl
      {"q2_k", F::GgufQ2_K},  // +r16 for its kernel (Rows16), as q5_1
      {"q3_k", F::GgufQ3_K},  // the same
      {"q4_k", F::GgufQ4_K},
      {"q5_k", F::GgufQ5_K},  // +r16 for its kernel (Rows16), as q5_1
      {"q6_k", F::GgufQ6_K},
      {"iq4_nl", F::GgufIq4Nl},  // +r16 for its kernel (Rows16); in the file's rows it runs the portable one
      {"w8a16", F::Int8},
      {"w4a16_g64", F::Int4, 64},
      {"w4a16_channel", F::Int4, 0},
      {"w4a16_g128", F::Int4, 128},
      {"w8a8_int8", F::Int8, 0, ActQuant::Int8Dynamic},
      {"fp8_weight", F::Fp8E4M3},
      {"fp8_dynamic", F::Fp8E4M3, 0, ActQuant::Fp8Dynamic},
      {"fp8_block", F::Fp8E4M3, 128},
      {"mxfp4", F::Mxfp4},
      {"nvfp4", F::Nvfp4},
  };
  // NAME+suffix variants asked for (see the top).
  for (std::string rest = only; rest.size() > 1;) {
    const size_t c = rest.find(',', 1);
    const std::string name = rest.substr(1, c - 1);
    rest = c == std::string::npos ? "" : rest.substr(c);
    const size_t plus = name.find('+');
    if (plus == std::string::npos) continue;
    const std::string base = name.substr(0, plus), how = name.substr(plus + 1);
    for (size_t i = 0; i < fmts.size(); ++i) {
      if (fmts[i].name != base) continue;
      Fmt v = fmts[i];
      v.name = name;
      if (how == "tile") v.impl = cpu::LinearImpl::Gemv;
      else if (how == "bf16") v.impl = cpu::LinearImpl::Onednn;
      else if (how == "bf16w") v.slab = int64_t(1) << 40;
      else if (how.rfind("bf16s", 0) == 0) v.slab = std::atoll(how.c_str() + 5);
      else if (how == "x16") v.act_bf16 = true;
      else if (how == "r16" || how == "r16x16") v.rows16 = true, v.act_bf16 = how == "r16x16";
      else { std::fprintf(stderr, "unknown suffix %s\n", name.c_str()); return 2; }
      fmts.push_back(v);
      break;
    }
  }
  const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};  // {n_out, n_in}
  std::printf("gemm_gguf_bench | threads %d (%s) | roofline %.1f GB/s | decode m=1: GB/s of weight bytes (%% roofline); "
              "prefill m=M: GMAC/s (x bf16)\n",
              threads, g_cpu_clock ? "thread CPU time" : "wall time", bw);
  std::mt19937 rng(1);
  for (const auto& sh : shapes) {
    const int64_t n_out = sh[0], n_in = sh[1];
    // Decode: enough copies to stream from DRAM.
    std::vector<std::vector<cpu::Weight>> ws(fmts.size());
    for (size_t f = 0; f < fmts.size(); ++f) {
      if (!only.empty() && only.find("," + fmts[f].name + ",") == std::string::npos) continue;
      if (is_gguf_format(fmts[f].format) && n_in % dtype_block_elems(gguf_block_dtype(fmts[f].format)) != 0) continue;
      PackedWeight made = make(fmts[f], n_out, n_in, rng);
      if (fmts[f].rows16) {
        made.act_bf16 = fmts[f].act_bf16;
        if (!cpu::gemv_has_avx512(DType::BF16) && !cpu::detail::rows16_avx2_wanted(made)) {
          // linear() would run the reference: not the kernel's figure
          std::fprintf(stderr,
                       "%s: the GEMM-form decode needs AVX512-BF16 (GGUF Q4_0 / Q4_1 / Q5_1 / Q2_K / Q3_K / Q5_K / "
                       "IQ4_NL with F32 x: AVX2)\n",
                       fmts[f].name.c_str());
          return 2;
        }
        const std::string why = rows16_refusal(made);
        if (!why.empty()) {
          std::fprintf(stderr, "%s: no 16-row blocks for it: %s\n", fmts[f].name.c_str(), why.c_str());
          return 2;
        }
        set_rows_layout(&made, RowsLayout::Rows16);
      }
      ws[f].emplace_back(std::move(made), false);  // the layout as made
      const int64_t bytes = ws[f][0].n_bytes();
      // GEMM_BENCH_HOT=1: one copy (cache-resident for the small shapes: the kernels' compute ceiling).
      const int64_t copies = std::getenv("GEMM_BENCH_HOT") ? 1 : std::max<int64_t>(2, (int64_t(192) << 20) / bytes);
      while (int64_t(ws[f].size()) < copies) ws[f].emplace_back(copy_packed_weight(ws[f][0].packed()), false);
    }
    std::vector<float> x(size_t(std::max<int64_t>(m_prefill, 1) * n_in)), y(size_t(std::max<int64_t>(m_prefill, 1) * n_out));
    for (float& v : x) v = float(int(rng() % 2001) - 1000) / 1000.0f;
    std::vector<std::vector<double>> dec(fmts.size());
    std::vector<std::vector<std::vector<double>>> pre(fmts.size(), std::vector<std::vector<double>>(m_list.size()));
    const bool do_prefill = m_prefill > 1 && n_out * n_in <= 1536 * 576;
    for (int round = 0; round < 5; ++round)
      for (size_t f = 0; f < fmts.size(); ++f) {
        if (ws[f].empty()) continue;  // K-quants need n_in % 256 == 0 (llama-quantize falls back to Q5_0 etc.)
        dec[f].push_back(time_calls(fmts[f], ws[f].data(), ws[f].size(), x, 1, y));
        if (do_prefill)
          for (size_t j = 0; j < m_list.size(); ++j) pre[f][j].push_back(time_calls(fmts[f], ws[f].data(), 1, x, m_list[j], y));
      }

    for (size_t f = 0; f < fmts.size(); ++f) {
      if (ws[f].empty()) continue;
      const double s = median(dec[f]), gbs = double(ws[f][0].n_bytes()) / s / 1e9;
      std::printf("%-12s [%5lld x %4lld] %6.2f MiB | m=1 %8.1f us %6.2f GB/s %4.0f%% roofline", fmts[f].name.c_str(),
                  (long long)n_out, (long long)n_in, double(ws[f][0].n_bytes()) / 1048576.0, s * 1e6, gbs, 100 * gbs / bw);
      if (do_prefill)
        for (size_t j = 0; j < m_list.size(); ++j) {
          const double p = median(pre[f][j]), pre_bf16 = pre[0][j].empty() ? 0 : median(pre[0][j]);
          std::printf(" | m=%lld %8.3f ms %6.1f GMAC/s x%.2f bf16", (long long)m_list[j], p * 1e3,
                      double(m_list[j] * n_out * n_in) / p / 1e9, pre_bf16 / p);
        }
      std::printf("\n");
    }
  }
  return 0;
}
