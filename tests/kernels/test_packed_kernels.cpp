// The packed-weight kernels (kernels/cpu/packed_kernels.h) against packed_linear_reference (dequantize to F32,
// F64 sums), over parametrized shapes: every format (Int4 / Int8 with groups 32 / 64 / 128 or per channel,
// asymmetric zero points, act-order g_idx; W8A8 / W4A8 int8 activations per token, per group and static;
// FP8 per tensor / channel / 128×128 and 1×128 blocks, with and without emulated FP8 activations; MXFP4,
// NVFP4), odd row counts, odd column counts where the format allows them, TP-slice-like shapes, m = 1..9, on
// every ISA this CPU runs (portable, AVX2; AVX-512 where present — not on the Zen 2 dev machine). W4A16 on
// AVX512-BF16 holds x as two BF16 parts (x ≈ bf16(x) + bf16(x − bf16(x)), 16 significant bits): the same bound,
// measured on Zen 4 up to 1e-11 (one part, x rounded to BF16, measured 2.6e-6 .. 4.6e-6 and failed it). The
// *_x_bf16 cases: BF16 activations (PackedWeight::act_bf16), x rounded to BF16 on both sides, one part in the
// AVX512-BF16 kernels.
// Bound: NMSE = Σ (y − y_ref)² / Σ y_ref² ≤ 1e-10 — both compute the same products in F32 (or exact int32), so
// only the summation order differs (F32 vs F64: ~1e-13 measured). Each case also checks that a kernel ran
// (not the reference fallback) where one is expected. Measured on the Zen 2 dev machine (portable + AVX2): max NMSE 1.7e-13;
// on Zen 4 (portable + AVX2 + AVX-512 / VNNI): 1.5e-13.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "common/gguf_layout.h"
#include "common/packed_weight.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/cpu/packed_linear.h"
#include "tests/kernels/gguf_fixtures.h"

namespace tp::cpu::detail {
namespace {

constexpr double kMaxNmse = 1e-10;
// MXFP4 / NVFP4 and Int4 in 16-row blocks on AVX2 (gemm_rows16_fp4_avx2.cpp, gemm_rows16_a16_avx2.cpp) hold BF16 x
// (act_bf16) as two int8 levels per scale block / 32 columns (rows16_avx2.h rows16_x_levels): each value within 2⁻¹³
// of its block's largest (BF16 itself rounds a value by up to 2⁻⁹ of it).
// Their bound there: NMSE ≤ 1e-7, an order below what rounding x to BF16 itself moves y (~1e-6); measured (Zen 3)
// median 7.5e-10 (FP4) / 8.5e-10 (Int4), up to 2.6e-9 (FP4) and 1.6e-8 (Int4: one row of x, 9 outputs with zero
// points). (Two levels on F32 x measured up to 7.3e-8 on FP4; F32 x takes three, within kMaxNmse.)
constexpr double kRows16Avx2Bf16Nmse = 1e-7;

// Whether a weight as held runs on those two-level AVX2 kernels at decode sizes (the bound above applies).
bool avx2_bf16_levels(const PackedWeight& held) {
  return held.act_bf16 && held.rows_layout == RowsLayout::Rows16 && packed_best_isa() == PackedIsa::Avx2 &&
         (held.format == WeightFormat::Int4 || held.format == WeightFormat::Mxfp4 || held.format == WeightFormat::Nvfp4);
}

struct Case {
  std::string name;
  WeightFormat format;
  int64_t n_out, n_in;
  int64_t group = 0;       // Int: columns a group (0: per channel); Fp8: block columns (0: none)
  int64_t block_out = 0;   // Fp8 blocks
  bool zeros = false, g_idx = false, tensor_scale = false;
  ActQuant act = ActQuant::None;
  int64_t act_group = 0;
  bool expect_kernel = true;
  bool act_bf16 = false;   // x rounded to BF16 (PackedWeight::act_bf16)
};

std::ostream& operator<<(std::ostream& o, const Case& c) { return o << c.name; }

PackedWeight make(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  PackedWeight w;
  w.format = c.format;
  w.n_out = c.n_out;
  w.n_in = c.n_in;
  w.act = c.act;
  w.act_group = c.act_group;
  const bool gguf = is_gguf_format(c.format);
  w.act_bf16 = c.act_bf16 && !gguf;  // GGUF: only in Rows16 (below)
  if (c.act == ActQuant::Int8Static) w.act_scale = 0.02f;
  if (c.act == ActQuant::Fp8Static) w.act_scale = 0.004f;
  w.data = AlignedBytes(c.n_out * w.row_bytes());
  for (int64_t i = 0; i < w.data.size(); ++i) {
    uint8_t b = uint8_t(byte(rng));
    if (c.format == WeightFormat::Fp8E4M3 && (b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN codes
    w.data.data()[i] = b;
  }
  if (c.format == WeightFormat::Int4 && c.n_in % 2) {  // the unused high nibble of each row's last byte is 0
    for (int64_t r = 0; r < c.n_out; ++r) w.data.data()[r * w.row_bytes() + w.row_bytes() - 1] &= 0x0f;
  }
  switch (c.format) {
    case WeightFormat::Int8:
    case WeightFormat::Int4: {
      w.group_size = c.group > 0 ? c.group : c.n_in;
      const int64_t ng = (c.n_in + w.group_size - 1) / w.group_size;
      if (c.g_idx) {  // columns spread over groups in a random order (act-order), one group left unused
        w.g_idx_groups = ng + 1;
        for (int64_t k = 0; k < c.n_in; ++k) w.g_idx.push_back(int32_t(k / w.group_size));
        std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
        for (int32_t& g : w.g_idx) g = g >= 1 ? g + 1 : g;  // group 1 unused
      }
      w.scales.resize(size_t(c.n_out * w.n_groups()));
      for (float& s : w.scales) s = scale(rng);
      if (c.zeros) {
        w.zeros.resize(w.scales.size());
        const int lim = c.format == WeightFormat::Int4 ? 8 : 128;
        for (int8_t& z : w.zeros) z = int8_t(byte(rng) % (2 * lim) - lim);
      }
      break;
    }
    case WeightFormat::Fp8E4M3:
      if (c.group > 0) {
        w.group_size = c.group;
        w.block_out = c.block_out;
        w.scales.resize(size_t(((c.n_out + c.block_out - 1) / c.block_out) * ((c.n_in + c.group - 1) / c.group)));
      } else {
        w.scales.resize(c.tensor_scale ? 1 : size_t(c.n_out));
      }
      for (float& s : w.scales) s = scale(rng) * 0.1f;
      break;
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4: {
      const int64_t blk = c.format == WeightFormat::Mxfp4 ? 32 : 16;
      w.scale_bytes.resize(size_t(c.n_out * c.n_in / blk));
      for (uint8_t& s : w.scale_bytes)
        s = c.format == WeightFormat::Mxfp4 ? uint8_t(120 + byte(rng) % 8) : f32_to_fp8_e4m3(scale(rng) * 100);
      w.global_scale = 0.0123f;
      break;
    }
    case WeightFormat::GgufQ4_0:
    case WeightFormat::GgufQ4_1:
    case WeightFormat::GgufQ4_K: {  // F16 d (and Q4_1's m, either sign / Q4_K's dmin) in each block
      const int64_t bb = c.format == WeightFormat::GgufQ4_K ? 144 : c.format == WeightFormat::GgufQ4_1 ? 20 : 18;
      for (int64_t b = 0; b < w.data.size() / bb; ++b) {
        uint8_t* blk = w.data.data() + b * bb;
        const uint16_t d = f32_to_f16(scale(rng) * 0.1f), m = f32_to_f16(scale(rng) * (byte(rng) % 2 ? -1.0f : 1.0f));
        std::memcpy(blk, &d, 2);
        if (bb == 20) std::memcpy(blk + 2, &m, 2);
        if (bb == 144) {
          const uint16_t dmin = f32_to_f16(scale(rng) * 0.05f);
          std::memcpy(blk + 2, &dmin, 2);
        }
      }
      break;
    }
    default: break;
  }
  check_packed_weight(w);
  if (gguf && c.act_bf16) {  // BF16 x on a GGUF weight: the GEMM-form kernel's, in Rows16
    set_rows_layout(&w, RowsLayout::Rows16);
    w.act_bf16 = true;
    check_packed_weight(w);
  }
  return w;
}

std::vector<Case> cases() {
  using F = WeightFormat;
  std::vector<Case> v;
  for (F f : {F::Int4, F::Int8}) {
    const std::string fn = f == F::Int4 ? "int4" : "int8";
    for (int64_t g : {32, 64, 128}) {
      v.push_back({fn + "_g" + std::to_string(g), f, 37, 256, g});
      v.push_back({fn + "_g" + std::to_string(g) + "_zeros", f, 37, 256, g, 0, true});
      v.push_back({fn + "_g" + std::to_string(g) + "_gidx", f, 19, 256, g, 0, true, true});
    }
    v.push_back({fn + "_channel_odd_cols", f, 13, 203, 0});
    v.push_back({fn + "_channel_zeros", f, 9, 320, 0, 0, true});
    v.push_back({fn + "_tp_slice_g128", f, 64, 128, 128});  // o_proj at tp 2: one group a row
    v.push_back({fn + "_w8a8_token", f, 29, 256, 0, 0, false, false, false, ActQuant::Int8Dynamic});
    v.push_back({fn + "_w8a8_token_g64_zeros", f, 29, 256, 64, 0, true, false, false, ActQuant::Int8Dynamic});
    v.push_back({fn + "_w8a8_static", f, 17, 160, 0, 0, false, false, false, ActQuant::Int8Static});
    v.push_back({fn + "_w8a8_act_group_128", f, 17, 384, 0, 0, false, false, false, ActQuant::Int8Dynamic, 128});
    v.push_back({fn + "_w8a8_odd_cols", f, 5, 101, 0, 0, false, false, false, ActQuant::Int8Dynamic});
  }
  // Groups of 20 columns: not whole vectors — the AVX paths decline (the reference runs), the portable one runs.
  v.push_back({"int4_g20_vector_fallback", F::Int4, 7, 100, 20, 0, false, false, false, ActQuant::None, 0, false});
  v.push_back({"fp8_tensor", F::Fp8E4M3, 33, 256, 0, 0, false, false, true});
  v.push_back({"fp8_channel_odd_cols", F::Fp8E4M3, 31, 203});
  v.push_back({"fp8_block128", F::Fp8E4M3, 300, 384, 128, 128});
  v.push_back({"fp8_rowblock128", F::Fp8E4M3, 21, 256, 128, 1});
  v.push_back({"fp8_dynamic_act", F::Fp8E4M3, 21, 256, 0, 0, false, false, false, ActQuant::Fp8Dynamic});
  v.push_back({"fp8_static_act", F::Fp8E4M3, 21, 256, 0, 0, false, false, true, ActQuant::Fp8Static});
  v.push_back({"fp8_block_group_act", F::Fp8E4M3, 130, 256, 128, 128, false, false, false, ActQuant::Fp8Dynamic, 128});
  v.push_back({"mxfp4", F::Mxfp4, 35, 256});
  v.push_back({"mxfp4_tp_slice", F::Mxfp4, 16, 64});
  v.push_back({"nvfp4", F::Nvfp4, 35, 256});
  v.push_back({"nvfp4_odd_blocks", F::Nvfp4, 3, 48});
  // BF16 activations (PackedWeight::act_bf16, the BF16 runtime's weight-only formats): the reference rounds x to
  // BF16 too, so the same bound holds — a kernel that kept x in F32 would miss it by ~4 orders of magnitude.
  for (const char* base : {"int4_g64", "int4_g32_zeros", "int4_g64_gidx", "int4_channel_odd_cols", "int4_channel_zeros",
                           "int8_g128", "fp8_channel_odd_cols", "fp8_block128", "mxfp4", "nvfp4", "nvfp4_odd_blocks"})
    for (size_t i = 0, n = v.size(); i < n; ++i)
      if (v[i].name == base) {
        Case c = v[i];
        c.name += "_x_bf16";
        c.act_bf16 = true;
        v.push_back(c);
      }
  return v;
}

// Whether packed_linear_isa runs the W4A16 AVX512-BF16 kernel (gemm_int4_bf16.cpp) for this case at isa: on AMD
// (prefer_bf16_a16) whatever it takes, elsewhere what the VNNI kernel (gemm_a16_vnni.cpp: n_in and groups multiples
// of 64) does not take.
bool bf16_a16(const Case& c, PackedIsa isa) {
  const bool vnni = !prefer_bf16_a16() && cpu_has_avx512vnni() && c.n_in % 64 == 0 && c.group % 64 == 0;
  return isa == PackedIsa::Avx512 && cpu_has_avx512bf16() && c.format == WeightFormat::Int4 &&
         c.act == ActQuant::None && !c.g_idx && (c.group == 0 || c.group % 32 == 0) && !vnni;
}

double nmse_of(const std::vector<float>& y, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  if (den > 0) return num / den;  // (a floor on den would pass anything on the tiny rows of x, ~1e-60 a square)
  return num > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// m rows of n values from N(0, 1), seeded by m (the prefill tests' x).
std::vector<float> normal_rows(int64_t m, int64_t n) {
  std::mt19937 rng{uint32_t(m)};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(m * n));
  for (float& v : x) v = nd(rng);
  return x;
}

// y = bf16(x) · bf16(W)ᵀ in F64 sums: W dequantized and each weight rounded to BF16 (the grouped prefill's one
// part at the BF16 runtime).
std::vector<float> rounded_w_reference(const std::vector<float>& x, int64_t m, const PackedWeight& w) {
  std::vector<float> wd(size_t(w.n_out * w.n_in)), y(size_t(m * w.n_out));
  dequantize_rows(w, 0, w.n_out, wd.data());
  for (float& v : wd) v = bf16_to_f32(f32_to_bf16(v));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.n_out; ++r) {
      double s = 0;
      for (int64_t c = 0; c < w.n_in; ++c)
        s += double(bf16_to_f32(f32_to_bf16(x[size_t(i * w.n_in + c)]))) * double(wd[size_t(r * w.n_in + c)]);
      y[size_t(i * w.n_out + r)] = float(s);
    }
  return y;
}

class PackedKernels : public ::testing::TestWithParam<Case> {};

TEST_P(PackedKernels, MatchReferenceOnEveryIsa) {
  const Case& c = GetParam();
  const PackedWeight w = make(c, 42);
  std::vector<PackedIsa> isas{PackedIsa::Portable};
  if (cpu_has_avx2()) isas.push_back(PackedIsa::Avx2);
  if (packed_best_isa() == PackedIsa::Avx512) isas.push_back(PackedIsa::Avx512);
  double worst = 0, worst_bf16 = 0;
  for (int64_t m : {1, 2, 5, 9}) {
    std::mt19937 rng{uint32_t(m)};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m * c.n_in));
    for (float& v : x) v = nd(rng);
    std::vector<float> ref(size_t(m * c.n_out));
    packed_linear_reference(x.data(), m, w, ref.data(), 2);
    for (PackedIsa isa : isas) {
      const bool bf16 = bf16_a16(c, isa);
      for (int threads : {1, 2}) {
        std::vector<float> y(ref.size(), -1e30f);
        const bool ran = packed_linear_isa(x.data(), m, w, y.data(), threads, isa);
        EXPECT_EQ(ran, c.expect_kernel || isa == PackedIsa::Portable) << c.name << " isa " << int(isa);
        const double nmse = nmse_of(y, ref);
        worst = std::max(worst, nmse);
        if (bf16) worst_bf16 = std::max(worst_bf16, nmse);
        EXPECT_LE(nmse, kMaxNmse) << c.name << " m " << m << " isa " << int(isa) << " threads " << threads;
      }
    }
  }
  std::printf("[packed-kernels] %-28s max NMSE %.2g over m 1..9, %zu ISAs", c.name.c_str(), worst, isas.size());
  if (worst_bf16 > 0) std::printf(" (the AVX512-BF16 W4A16 kernel: %.2g)", worst_bf16);
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(Formats, PackedKernels, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// W8A8 / W4A8 prefill (m ≥ kW8a8OnednnMinM, one scale segment a row): the int8 GEMM goes through oneDNN
// (s8 × s8 → exact int32), the scales applied after; same bound as above (the integer sums are exact, only the
// reference's F64 summation differs). Per-channel weights, with and without zero points, dynamic per-token and
// static activation scales, odd sizes, on every non-portable ISA here.
class PackedKernelsPrefill : public ::testing::TestWithParam<Case> {};

TEST_P(PackedKernelsPrefill, OnednnInt8GemmMatchesReference) {
  const Case& c = GetParam();
  const PackedWeight w = make(c, 7);
  std::vector<PackedIsa> isas;
  if (cpu_has_avx2()) isas.push_back(PackedIsa::Avx2);
  if (packed_best_isa() == PackedIsa::Avx512) isas.push_back(PackedIsa::Avx512);
  if (isas.empty()) GTEST_SKIP() << "no AVX2 here: the prefill path is not taken";
  double worst = 0;
  for (int64_t m : {kW8a8OnednnMinM, int64_t(37), int64_t(64), kA16Avx512GemmMinM}) {
    std::mt19937 rng{uint32_t(m)};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m * c.n_in));
    for (float& v : x) v = nd(rng);
    std::vector<float> ref(size_t(m * c.n_out));
    packed_linear_reference(x.data(), m, w, ref.data(), 2);
    // Grouped Int weights at the BF16 runtime through the AVX512-BF16 slabs: the weights rounded to BF16 too.
    const bool w_rounded = c.act_bf16 && c.group > 0 && m >= kA16Bf16MinM && cpu_has_avx512bf16() &&
                           (c.format == WeightFormat::Int4 || c.format == WeightFormat::Int8);
    const std::vector<float> ref_w = w_rounded ? rounded_w_reference(x, m, w) : ref;
    for (PackedIsa isa : isas)
      for (int threads : {1, 2}) {
        std::vector<float> y(ref.size(), -1e30f);
        EXPECT_TRUE(packed_linear_isa(x.data(), m, w, y.data(), threads, isa));
        const double nmse = nmse_of(y, isa == PackedIsa::Avx512 ? ref_w : ref);
        worst = std::max(worst, nmse);
        EXPECT_LE(nmse, kMaxNmse) << c.name << " m " << m << " isa " << int(isa) << " threads " << threads;
      }
  }
  std::printf("[packed-kernels-prefill] %-24s max NMSE %.2g over m 16..256\n", c.name.c_str(), worst);
}

std::vector<Case> prefill_cases() {
  using F = WeightFormat;
  const ActQuant dyn = ActQuant::Int8Dynamic;
  return {
      {"int8_token", F::Int8, 67, 256, 0, 0, false, false, false, dyn},
      {"int8_token_zeros", F::Int8, 40, 320, 0, 0, true, false, false, dyn},
      {"int8_static", F::Int8, 33, 160, 0, 0, false, false, false, ActQuant::Int8Static},
      {"int8_odd_cols", F::Int8, 21, 203, 0, 0, false, false, false, dyn},
      {"int4_token", F::Int4, 48, 256, 0, 0, false, false, false, dyn},
      {"int4_token_zeros_odd", F::Int4, 19, 101, 0, 0, true, false, false, dyn},
  };
}

INSTANTIATE_TEST_SUITE_P(W8a8, PackedKernelsPrefill, ::testing::ValuesIn(prefill_cases()),
                         [](const auto& info) { return info.param.name; });

// A16 prefill on AVX2 and AVX-512 (m ≥ kA16Avx2GemmMinM: gemm_a16_avx2.cpp decodes W to F32 once a call, Int4
// columns and x permuted alike, then the dense F32 linear(); FP8 on AVX512-BF16 stays in gemm_fp8_bf16.cpp: its tiles
// below kFp8OnednnMinM = 64, from there W decoded to BF16 and oneDNN's BF16 matmul, as Int8 per channel from
// kA16Bf16MinM = 64 on AVX512-BF16: gemm_bf16_slabs.cpp): the same suite and bound, m 16 (below: the A16 tiles),
// 37, 64, and 256 (the AVX-512 threshold, kA16Avx512GemmMinM). *_x_bf16: BF16 activations; grouped Int weights
// through the AVX512-BF16 slabs then round the weights to BF16 too (against rounded_w_reference there).
std::vector<Case> a16_prefill_cases() {
  using F = WeightFormat;
  return {
      {"int4_g64_576", F::Int4, 70, 576, 64},
      {"int4_channel_zeros", F::Int4, 33, 256, 0, 0, true},
      {"int4_g32_zeros", F::Int4, 19, 224, 32, 0, true},
      {"int8_g128_zeros", F::Int8, 21, 384, 128, 0, true},
      {"int8_channel", F::Int8, 40, 320},
      {"int8_channel_zeros_odd", F::Int8, 37, 203, 0, 0, true},
      {"fp8_channel", F::Fp8E4M3, 40, 576},
      {"fp8_tensor", F::Fp8E4M3, 13, 160, 0, 0, false, false, true},
      {"fp8_dynamic_act", F::Fp8E4M3, 21, 576, 0, 0, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_block128_576", F::Fp8E4M3, 261, 576, 128, 128},  // 64 columns and 5 rows in the last blocks
      {"fp8_block96x64_dynamic", F::Fp8E4M3, 100, 160, 64, 96, false, false, false, ActQuant::Fp8Dynamic},
      // BF16 activations (x one BF16 part in the slabs and tiles)
      {"int4_g64_576_x_bf16", F::Int4, 70, 576, 64, 0, false, false, false, ActQuant::None, 0, true, true},
      {"int4_channel_zeros_x_bf16", F::Int4, 33, 256, 0, 0, true, false, false, ActQuant::None, 0, true, true},
      {"int8_channel_x_bf16", F::Int8, 40, 320, 0, 0, false, false, false, ActQuant::None, 0, true, true},
      {"fp8_channel_x_bf16", F::Fp8E4M3, 40, 576, 0, 0, false, false, false, ActQuant::None, 0, true, true},
      {"fp8_tensor_x_bf16", F::Fp8E4M3, 13, 160, 0, 0, false, false, true, ActQuant::None, 0, true, true},
  };
}

INSTANTIATE_TEST_SUITE_P(A16, PackedKernelsPrefill, ::testing::ValuesIn(a16_prefill_cases()),
                         [](const auto& info) { return info.param.name; });

// Grouped Int4 / Int8 prefill on oneDNN's BF16 matmul (packed_kernels.h: a16_bf16_prefill): with scales as
// checkpoints ship them (BF16; F16 for Int4) the weight (q − zero) · scale is two exact BF16 parts, so the path
// runs (asserted) and meets the suite's bound at m = 64 and 256, with groups of 32 / 64 / 128 and 48 (not a
// multiple of 16), zero points, g_idx (act-order) and odd widths. Scales with long F32 mantissas, or F16 ones
// on Int8, are refused (the F32 paths run). BF16 activations (act_bf16): x and the weight one BF16 part each —
// the suite's bound against bf16(x) · bf16(W)ᵀ, NMSE ≤ 1e-5 against the exact reference (the weights' rounding:
// ~1e-6 measured), and the scales refused above are taken.
TEST(PackedKernels, A16GroupedBf16PrefillMatchesReference) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  const auto bf16 = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  const auto f16 = [](float v) { return f16_to_f32(f32_to_f16(v)); };
  struct G {
    Case c;
    bool f16_scales;
  };
  const std::vector<G> cs = {
      {{"int4_g64_576", F::Int4, 70, 576, 64}, false},
      {{"int4_g128_zeros_f16", F::Int4, 33, 384, 128, 0, true}, true},
      {{"int4_g32_zeros_gidx", F::Int4, 19, 224, 32, 0, true, true}, false},
      {{"int4_g48_odd", F::Int4, 23, 240, 48}, true},
      {{"int8_g128_zeros", F::Int8, 21, 384, 128, 0, true}, false},
      {{"int8_g64_gidx_odd", F::Int8, 17, 203, 64, 0, false, true}, false},
  };
  for (const G& g : cs)
    for (bool x_bf16 : {false, true}) {  // F32 x (two parts) and BF16 activations (one part, rounded by the kernel)
      PackedWeight w = make(g.c, 29);
      w.act_bf16 = x_bf16;
      for (float& s : w.scales) s = g.f16_scales ? f16(s) : bf16(s);
      for (int64_t m : {kA16Bf16MinM, kA16Avx512GemmMinM}) {
        const std::vector<float> x = normal_rows(m, g.c.n_in);
        std::vector<float> ref(size_t(m * g.c.n_out));
        packed_linear_reference(x.data(), m, w, ref.data(), 2);
        const std::vector<float> rounded = x_bf16 ? rounded_w_reference(x, m, w) : ref;
        for (int threads : {1, 2}) {
          std::vector<float> y(ref.size(), -1e30f);
          ASSERT_TRUE(a16_bf16_prefill(x.data(), m, w, y.data(), threads)) << g.c.name;
          EXPECT_LE(nmse_of(y, rounded), kMaxNmse) << g.c.name << " m " << m << " threads " << threads << " x_bf16 " << x_bf16;
          EXPECT_LE(nmse_of(y, ref), x_bf16 ? 1e-5 : kMaxNmse) << g.c.name << " m " << m << " x_bf16 " << x_bf16;
        }
      }
    }
  // Refused: F32 scales with long mantissas; F16 scales on Int8 (8 + 11 bits > 16).
  PackedWeight w4 = make({"int4_g64", F::Int4, 8, 128, 64}, 3);
  w4.scales[3] = 0.0123456789f;
  PackedWeight w8 = make({"int8_g64", F::Int8, 8, 128, 64}, 3);
  for (float& s : w8.scales) s = f16(s);
  w8.scales[0] = f16(0.0123456789f);
  std::vector<float> x(size_t(64 * 128), 0.5f), y(size_t(64 * 8));
  EXPECT_FALSE(a16_bf16_prefill(x.data(), 64, w4, y.data(), 1));
  EXPECT_FALSE(a16_bf16_prefill(x.data(), 64, w8, y.data(), 1));
  for (PackedWeight* w : {&w4, &w8}) {  // one BF16 part each: taken, the weights rounded
    w->act_bf16 = true;
    ASSERT_TRUE(a16_bf16_prefill(x.data(), 64, *w, y.data(), 1));
    EXPECT_LE(nmse_of(y, rounded_w_reference(x, 64, *w)), kMaxNmse);
  }
}

// MXFP4 / NVFP4 prefill on oneDNN's BF16 matmul (packed_kernels.h: fp4_bf16_prefill): e2m1 · block scale exact
// in BF16, NVFP4's global scale after; the path runs (asserted) within the suite's bound at m = 64 and 256, and
// refuses scale bytes whose products would be subnormal (E8M0 < 2) or NaN.
TEST(PackedKernels, Fp4Bf16PrefillMatchesReference) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  for (const Case& c : {Case{"mxfp4", F::Mxfp4, 35, 256}, Case{"nvfp4", F::Nvfp4, 37, 208}})
    for (bool x_bf16 : {false, true}) {  // F32 x (two parts) and BF16 activations (one part, rounded by the kernel)
      PackedWeight w = make(c, 31);
      w.act_bf16 = x_bf16;
      if (c.format == F::Nvfp4) w.global_scale = 0.37f;
      for (int64_t m : {kA16Bf16MinM, kA16Avx512GemmMinM}) {
        const std::vector<float> x = normal_rows(m, c.n_in);
        std::vector<float> ref(size_t(m * c.n_out));
        packed_linear_reference(x.data(), m, w, ref.data(), 2);
        for (int threads : {1, 2}) {
          std::vector<float> y(ref.size(), -1e30f);
          ASSERT_TRUE(fp4_bf16_prefill(x.data(), m, w, y.data(), threads)) << c.name;
          EXPECT_LE(nmse_of(y, ref), kMaxNmse) << c.name << " m " << m << " threads " << threads << " x_bf16 " << x_bf16;
        }
      }
      PackedWeight bad = copy_packed_weight(w);
      bad.scale_bytes[5] = c.format == F::Mxfp4 ? 1 : 0x7F;
      std::vector<float> x(size_t(64 * c.n_in), 0.5f), y(size_t(64 * c.n_out));
      EXPECT_FALSE(fp4_bf16_prefill(x.data(), 64, bad, y.data(), 1)) << c.name;
    }
}

// W8A8 / W4A8: a row of x in a batch gives the bits it gives alone, for every m (the small-m tiles of 1..4 rows
// of x, their remainders, and the oneDNN GEMM from kW8a8OnednnMinM on), every ISA and 1 or 2 threads: every
// path sums each segment exactly in int32 and applies the scales in one order.
TEST(PackedKernels, W8a8BatchRowsEqualRowsAlone) {
  using F = WeightFormat;
  const ActQuant dyn = ActQuant::Int8Dynamic;
  const std::vector<Case> cs = {
      {"int8_token_576", F::Int8, 96, 576, 0, 0, false, false, false, dyn},
      {"int8_token_zeros_odd", F::Int8, 37, 1543, 0, 0, true, false, false, dyn},
      {"int8_g64_zeros", F::Int8, 29, 256, 64, 0, true, false, false, dyn},
      {"int8_act_group_128", F::Int8, 17, 384, 0, 0, false, false, false, dyn, 128},
      {"int8_static", F::Int8, 33, 160, 0, 0, false, false, false, ActQuant::Int8Static},
      {"int4_token", F::Int4, 48, 256, 0, 0, false, false, false, dyn},
  };
  std::vector<PackedIsa> isas{PackedIsa::Portable};
  if (cpu_has_avx2()) isas.push_back(PackedIsa::Avx2);
  if (packed_best_isa() == PackedIsa::Avx512) isas.push_back(PackedIsa::Avx512);
  for (const Case& c : cs) {
    const PackedWeight w = make(c, 11);
    const int64_t m_max = 37;
    std::mt19937 rng{5};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m_max * c.n_in));
    for (float& v : x) v = nd(rng);
    for (PackedIsa isa : isas)
      for (int threads : {1, 2}) {
        std::vector<float> alone(size_t(m_max * c.n_out));
        for (int64_t i = 0; i < m_max; ++i)
          packed_linear_isa(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads, isa);
        for (int64_t m : {2, 3, 4, 5, 8, 9, 15, 16, 37}) {
          std::vector<float> y(size_t(m * c.n_out), -1e30f);
          packed_linear_isa(x.data(), m, w, y.data(), threads, isa);
          for (int64_t k = 0; k < m * c.n_out; ++k)
            ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m << " row " << k / c.n_out << " isa "
                                                       << int(isa) << " threads " << threads;
        }
      }
  }
}

// W4A16 and FP8 on AVX512-BF16 (gemm_int4_bf16.cpp, gemm_fp8_bf16.cpp): a row of x in a batch gives the bits it
// gives alone (m = 1: W4A16's 4-row pass; tiles of 1..4 rows of x, blocks of weight rows), on W4A16's fast path (n_in
// and groups multiples of 64) and its masked one, FP8 with F32 and FP8 activations. W4A16 up to m < kA16Avx512GemmMinM:
// from there on AVX-512 too runs gemm_a16_avx2.cpp's prefill (W decoded to F32 once a call, oneDNN sgemm; tested
// against the reference in the A16 prefill suite above), which sums in another order; FP8 likewise up to
// m < kFp8OnednnMinM (its oneDNN prefill path, also in that suite).
TEST(PackedKernels, Bf16KernelsBatchRowsEqualRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"int4_g64_576", F::Int4, 70, 576, 64},
      {"int4_channel_zeros_576", F::Int4, 33, 576, 0, 0, true},
      {"int4_g128_zeros", F::Int4, 21, 384, 128, 0, true},
      {"int4_g32_zeros", F::Int4, 19, 224, 32, 0, true},
      {"int4_channel_odd_cols", F::Int4, 13, 203},
      {"fp8_channel_576", F::Fp8E4M3, 40, 576},
      {"fp8_tensor_odd_cols", F::Fp8E4M3, 13, 203, 0, 0, false, false, true},
      {"fp8_dynamic_act", F::Fp8E4M3, 21, 576, 0, 0, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_static_act_odd", F::Fp8E4M3, 21, 101, 0, 0, false, false, true, ActQuant::Fp8Static},
  };
  std::vector<Case> all = cs;
  for (Case c : cs)  // and with BF16 activations (the one-part paths) where the format is weight-only
    if (c.act == ActQuant::None) {
      c.name += "_x_bf16";
      c.act_bf16 = true;
      all.push_back(c);
    }
  for (const Case& c : all) {
    const PackedWeight w = make(c, 13);
    const int64_t m_max = 37;
    std::mt19937 rng{9};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m_max * c.n_in));
    for (float& v : x) v = nd(rng);
    for (int threads : {1, 2}) {
      std::vector<float> alone(size_t(m_max * c.n_out));
      for (int64_t i = 0; i < m_max; ++i)
        ASSERT_TRUE(packed_linear_isa(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads, PackedIsa::Avx512));
      for (int64_t m : {2, 3, 4, 5, 8, 9, 16, 31, 37}) {
        std::vector<float> y(size_t(m * c.n_out), -1e30f);
        packed_linear_isa(x.data(), m, w, y.data(), threads, PackedIsa::Avx512);
        for (int64_t k = 0; k < m * c.n_out; ++k)
          ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m << " row " << k / c.n_out << " threads "
                                                     << threads;
      }
    }
  }
}

// W8A16 decode on AVX-512 (gemm_a16_avx512.cpp, m < kA16Avx512MaxM): the kernel runs (not the generic AVX-512
// path behind it) for Int8 weights with groups of 32 / 64 / 128 or per channel, with and without zero points, row
// counts that leave 1..3 rows past the last 4-row block; the suite's bound against the reference; a row of x in a
// batch (m 2, 3) gives the bits it gives alone, at 1 and 2 threads.
TEST(PackedKernels, A16Avx512DecodeMatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"int8_g32_zeros", F::Int8, 37, 256, 32, 0, true},   {"int8_g64", F::Int8, 70, 576, 64},
      {"int8_g128_zeros", F::Int8, 21, 384, 128, 0, true}, {"int8_channel_576", F::Int8, 96, 576},
      {"int8_channel_zeros_1536", F::Int8, 39, 1536, 0, 0, true},
  };
  for (const Case& c : cs) {
    const PackedWeight w = make(c, 23);
    const int64_t m_max = kA16Avx512MaxM - 1;
    std::mt19937 rng{3};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m_max * c.n_in));
    for (float& v : x) v = nd(rng);
    std::vector<float> ref(size_t(m_max * c.n_out));
    packed_linear_reference(x.data(), m_max, w, ref.data(), 1);
    for (int threads : {1, 2}) {
      std::vector<float> alone(ref.size(), -1e30f);
      for (int64_t i = 0; i < m_max; ++i)
        ASSERT_TRUE(a16_avx512_decode(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads)) << c.name;
      EXPECT_LE(nmse_of(alone, ref), kMaxNmse) << c.name << " threads " << threads;
      for (int64_t m = 2; m <= m_max; ++m) {
        std::vector<float> y(size_t(m * c.n_out), -1e30f);
        ASSERT_TRUE(a16_avx512_decode(x.data(), m, w, y.data(), threads));
        for (int64_t k = 0; k < m * c.n_out; ++k)
          ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m << " row " << k / c.n_out;
      }
    }
    std::vector<float> y(size_t(kA16Avx512MaxM * c.n_out));
    EXPECT_FALSE(a16_avx512_decode(x.data(), kA16Avx512MaxM, w, y.data(), 1)) << "m past the decode kernel's";
  }
}

// A decode kernel's entry (packed_kernels.h): false when it does not take the weight.
using DecodeKernel = bool (*)(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads);

// Zero, NaN and infinity rows between ordinary ones (x's first 4 rows, rows 1-3 replaced): the ordinary row as
// alone, 0 for the zero row, NaN for the others (the infinity: not finite, with BF16 activations).
void check_special_rows(const Case& c, const PackedWeight& w, const std::vector<float>& x, DecodeKernel kernel) {
  std::vector<float> z(size_t(4 * c.n_in));
  std::copy(x.begin(), x.begin() + 4 * c.n_in, z.begin());
  std::fill(z.begin() + c.n_in, z.begin() + 2 * c.n_in, 0.0f);
  z[size_t(2 * c.n_in + 1)] = std::numeric_limits<float>::quiet_NaN();
  z[size_t(3 * c.n_in + c.n_in - 1)] = -std::numeric_limits<float>::infinity();
  std::vector<float> y(size_t(4 * c.n_out), -1e30f), row0(size_t(c.n_out));
  ASSERT_TRUE(kernel(z.data(), 4, w, y.data(), 1)) << c.name;
  ASSERT_TRUE(kernel(z.data(), 1, w, row0.data(), 1)) << c.name;
  for (int64_t r = 0; r < c.n_out; ++r) {
    EXPECT_EQ(y[size_t(r)], row0[size_t(r)]) << c.name;
    EXPECT_EQ(y[size_t(c.n_out + r)], 0.0f) << c.name;
    EXPECT_TRUE(std::isnan(y[size_t(2 * c.n_out + r)])) << c.name;
    if (w.act_bf16)  // one part: −inf · w is ±inf where w ≠ 0 (as the reference), NaN where w = 0
      EXPECT_FALSE(std::isfinite(y[size_t(3 * c.n_out + r)])) << c.name;
    else  // two parts: the low part of an infinity is NaN
      EXPECT_TRUE(std::isnan(y[size_t(3 * c.n_out + r)])) << c.name;
  }
}

// FP4 block scales at their edges: MXFP4's E8M0 0 (2⁻¹²⁷) and 255 (NaN), NVFP4's E4M3 subnormals, 0 and NaN (0x7f,
// 0xff) — each row's output NaN where the reference's is, else within the suite's bound.
void check_fp4_scale_edges(DecodeKernel kernel) {
  using F = WeightFormat;
  for (const Case& c : {Case{"mxfp4", F::Mxfp4, 8, 256}, Case{"nvfp4", F::Nvfp4, 8, 256}}) {
    PackedWeight w = make(c, 17);
    const int64_t nb = c.n_in / (c.format == F::Mxfp4 ? 32 : 16);
    const std::vector<uint8_t> edges = c.format == F::Mxfp4 ? std::vector<uint8_t>{0, 255, 1, 254}
                                                            : std::vector<uint8_t>{0x01, 0x07, 0x00, 0x7f, 0xff, 0x87};
    for (size_t k = 0; k < edges.size(); ++k) w.scale_bytes[size_t(int64_t(k) * nb + 1)] = edges[k];  // row k, block 1
    if (c.format == F::Mxfp4)  // row 3: every block 2^-127 .. 2^-126 against huge x (normal products)
      for (int64_t b = 0; b < nb; ++b) w.scale_bytes[size_t(3 * nb + b)] = uint8_t(b % 2);
    std::vector<float> x = normal_rows(3, c.n_in), ref(size_t(3 * c.n_out)), y(ref.size(), -1e30f);
    for (int64_t k = 0; k < c.n_in; ++k) x[size_t(2 * c.n_in + k)] *= 1e30f;
    packed_linear_reference(x.data(), 3, w, ref.data(), 1);
    ASSERT_TRUE(kernel(x.data(), 3, w, y.data(), 1)) << c.name;
    for (int64_t i = 0; i < 3; ++i) {  // per row of x (row 2's outputs are ~1e30)
      std::vector<float> yf, rf;
      for (int64_t r = 0; r < c.n_out; ++r) {
        const size_t k = size_t(i * c.n_out + r);
        ASSERT_EQ(std::isnan(y[k]), std::isnan(ref[k])) << c.name << " x row " << i << " output " << r;
        if (!std::isnan(ref[k])) yf.push_back(y[k]), rf.push_back(ref[k]);
      }
      EXPECT_LE(nmse_of(yf, rf), kMaxNmse) << c.name << " x row " << i;
      if (c.format == F::Mxfp4) {  // the 2^-127 row on its own
        EXPECT_LE(nmse_of({y[size_t(i * c.n_out + 3)]}, {ref[size_t(i * c.n_out + 3)]}), kMaxNmse) << c.name << " x row " << i;
      }
    }
  }
}

// A levels kernel (x as gemm_a16_vnni.cpp's three int8 levels) on case c: the suite's bound against the reference, also
// for rows at both ends of the exponent range; a row whose largest value is 10⁴ × the rest within the levels' own
// bound (their error is relative to max|x|); a zero row gives 0, a row with a NaN or an infinity gives NaN and leaves
// the other rows alone; a row of x in a batch (m 2..37, or up to m_max) gives the bits it gives alone, at 1 and 2
// threads.
void check_levels_kernel(const Case& c, DecodeKernel kernel, int64_t m_max = 37, int levels_bits = 21,
                         double bound = kMaxNmse) {
  const PackedWeight w = make(c, 31);
  std::vector<float> x = normal_rows(m_max, c.n_in);
  x[size_t(3 * c.n_in + 7)] = 1e4f;                                        // row 3: one outlier
  for (int64_t k = 0; k < c.n_in; ++k) x[size_t(5 * c.n_in + k)] *= 1e-30f;  // row 5: tiny (subnormal products)
  for (int64_t k = 0; k < c.n_in; ++k) x[size_t(6 * c.n_in + k)] *= 1e30f;   // row 6: huge
  std::vector<float> ref(size_t(m_max * c.n_out)), wd(size_t(c.n_out * c.n_in));
  packed_linear_reference(x.data(), m_max, w, ref.data(), 1);
  dequantize_rows(w, 0, c.n_out, wd.data());
  for (int threads : {1, 2}) {
    std::vector<float> alone(ref.size(), -1e30f);
    for (int64_t i = 0; i < m_max; ++i)
      ASSERT_TRUE(kernel(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads)) << c.name;
    for (int64_t i = 0; i < m_max; ++i) {  // each row on its own: the outlier / tiny / huge rows have their own scale
      const std::vector<float> yi(alone.begin() + i * c.n_out, alone.begin() + (i + 1) * c.n_out);
      const std::vector<float> ri(ref.begin() + i * c.n_out, ref.begin() + (i + 1) * c.n_out);
      if (i != 3) {
        EXPECT_LE(nmse_of(yi, ri), bound) << c.name << " row " << i << " threads " << threads;
      }
    }
    // The outlier row: x's levels are exact to max|x| · 2^-levels_bits a value (21; the AVX2 Int8 levels 20), so
    // |y − ref| ≤ Σ|w| · max|x| · 2^-levels_bits (+ F32 sums) — here 10⁴ · 2⁻²¹ ≈ 5e-3 on values ~1, about BF16's
    // rounding of each x; the NMSE bound would not hold.
    for (int64_t r = 0; r < c.n_out; ++r) {
      double wabs = 0, yabs = 0;
      for (int64_t k = 0; k < c.n_in; ++k) {
        wabs += std::fabs(wd[size_t(r * c.n_in + k)]);
        yabs += std::fabs(double(wd[size_t(r * c.n_in + k)]) * x[size_t(3 * c.n_in + k)]);
      }
      const double bound = wabs * 1e4 * std::ldexp(1.0, -levels_bits) + 1e-6 * yabs;
      EXPECT_LE(std::fabs(double(alone[size_t(3 * c.n_out + r)]) - ref[size_t(3 * c.n_out + r)]), bound)
          << c.name << " outlier row, output " << r;
    }
    for (int64_t m : {2, 3, 4, 5, 8, 9, 16, 31, 37}) {
      if (m > m_max) continue;
      std::vector<float> y(size_t(m * c.n_out), -1e30f);
      ASSERT_TRUE(kernel(x.data(), m, w, y.data(), threads));
      for (int64_t k = 0; k < m * c.n_out; ++k)
        ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m << " row " << k / c.n_out;
    }
  }
  check_special_rows(c, w, x, kernel);
}

// W8A16 / W4A16 on VNNI (gemm_a16_vnni.cpp: x as three int8 levels): the kernel takes Int8 and Int4 with groups of
// 64 / 128 or per channel (its own path: the levels summed apart over the row), n_in a multiple of 64, with and
// without zero points, and declines groups of 32, g_idx and n_in not a multiple of 64; check_levels_kernel on each.
TEST(PackedKernels, A16VnniMatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512vnni()) GTEST_SKIP() << "no AVX-512 VNNI here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"int4_g64_576", F::Int4, 70, 576, 64},           {"int4_g128_zeros", F::Int4, 37, 384, 128, 0, true},
      {"int4_channel_1536", F::Int4, 21, 1536},         {"int4_channel_zeros_320", F::Int4, 9, 320, 0, 0, true},
      {"int4_g64_zeros_odd_rows", F::Int4, 5, 128, 64, 0, true},
      {"int8_channel_576", F::Int8, 70, 576},           {"int8_channel_zeros_1536", F::Int8, 21, 1536, 0, 0, true},
      {"int8_g64_zeros", F::Int8, 37, 384, 64, 0, true}, {"int8_g128", F::Int8, 9, 256, 128},
      {"mxfp4_576", F::Mxfp4, 35, 576},                 {"nvfp4_1536", F::Nvfp4, 19, 1536},
      {"nvfp4_128", F::Nvfp4, 6, 128},
  };
  for (const Case& c : cs) check_levels_kernel(c, a16_vnni_linear);
  for (const Case& c : {Case{"int4_g32", F::Int4, 8, 256, 32}, Case{"int4_g64_gidx", F::Int4, 8, 256, 64, 0, false, true},
                        Case{"int4_channel_odd", F::Int4, 8, 203}, Case{"int4_channel_96", F::Int4, 8, 96},
                        Case{"int8_g32", F::Int8, 8, 256, 32}, Case{"int8_channel_odd", F::Int8, 8, 101},
                        Case{"nvfp4_48", F::Nvfp4, 8, 48}, Case{"mxfp4_96", F::Mxfp4, 8, 96}}) {
    const PackedWeight w = make(c, 5);
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out));
    EXPECT_FALSE(a16_vnni_linear(x.data(), 1, w, y.data(), 1)) << c.name;
  }
}

// W4A16 / W8A16 on AVX2 (gemm_a16_avx2_levels.cpp: the same levels — Int8's top level within ±64 — vpmaddubsw;
// Int4 int16 sums over segments of ≤ 256 columns, Int8 int32 sums a group): Int4 with groups of 32 / 64 / 128 / 512
// (two segments a group) or per channel (1536: six segments; 320: 256 + 64), Int8 with groups of 32 / 128 or per
// channel (576, 1536), with and without zero points, 5 weight rows (a pass of 2 and the rows left);
// check_levels_kernel on each (Int8's outlier bound 2⁻²⁰). Declines g_idx, n_in or groups not a multiple of 32,
// activation quantization, FP8 and m from kA16Avx2LevelsMaxM.
TEST(PackedKernels, A16Avx2LevelsMatchesReferenceAndRowsAlone) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"int4_g32", F::Int4, 9, 256, 32},              {"int4_g64_576", F::Int4, 70, 576, 64},
      {"int4_g128_zeros", F::Int4, 37, 384, 128, 0, true}, {"int4_g512", F::Int4, 11, 1024, 512},
      {"int4_channel_1536", F::Int4, 21, 1536},       {"int4_channel_zeros_320", F::Int4, 9, 320, 0, 0, true},
      {"int4_g64_zeros_odd_rows", F::Int4, 5, 128, 64, 0, true}, {"int4_channel_96", F::Int4, 3, 96},
  };
  for (const Case& c : cs) check_levels_kernel(c, a16_avx2_levels);
  const std::vector<Case> c8 = {
      {"int8_channel_576", F::Int8, 70, 576},           {"int8_channel_zeros_1536", F::Int8, 21, 1536, 0, 0, true},
      {"int8_g32_zeros", F::Int8, 37, 384, 32, 0, true}, {"int8_g128", F::Int8, 9, 256, 128},
      {"int8_channel_odd_rows_96", F::Int8, 5, 96},
  };
  for (const Case& c : c8) check_levels_kernel(c, a16_avx2_levels, 37, 20);
  for (const Case& c : {Case{"int4_g64_gidx", F::Int4, 8, 256, 64, 0, false, true}, Case{"int4_channel_odd", F::Int4, 8, 203},
                        Case{"int4_g48", F::Int4, 8, 96, 48}, Case{"int8_channel_odd", F::Int8, 8, 101},
                        Case{"fp8_channel", F::Fp8E4M3, 8, 256},
                        Case{"int4_token", F::Int4, 8, 256, 0, 0, false, false, false, ActQuant::Int8Dynamic}}) {
    const PackedWeight w = make(c, 5);
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out));
    EXPECT_FALSE(a16_avx2_levels(x.data(), 1, w, y.data(), 1)) << c.name;
  }
  const PackedWeight w = make(Case{"int4_g64", F::Int4, 8, 256, 64}, 5);
  std::vector<float> x = normal_rows(kA16Avx2LevelsMaxM, 256), y(size_t(kA16Avx2LevelsMaxM * 8));
  EXPECT_FALSE(a16_avx2_levels(x.data(), kA16Avx2LevelsMaxM, w, y.data(), 1)) << "m from the prefill's on";
}

// W4A16 in 16-row blocks on AVX2 (gemm_rows16_a16_avx2.cpp: the levels of a16_avx2_levels, vpmaddubsw a row a lane,
// int32 sums over segments of ≤ 64 columns): through the DecodeKernel signature, w put in Rows16 each call;
// check_levels_kernel on groups of 32 / 64 / 128 / 512 (segments of 64 within a group) and per channel (1536; 96:
// 64 + 32), with and without zero points, 1 to 16 rows in the last 16-row block (35, 69, 37, 11, 16, 9, 17, 25); the
// same with BF16 x (two levels a 32 columns: kRows16Avx2Bf16Nmse, the outlier row within 2⁻¹³ of it). Declines
// the Rows layout, g_idx, groups not a multiple of 32 and m from kA16Avx2LevelsMaxM; the F32 prefill from there
// (a16_avx2_gemm, rows decoded from the blocks) within the suite's bound.
bool rows16_a16_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  PackedWeight r = copy_packed_weight(w);
  set_rows_layout(&r, RowsLayout::Rows16);
  return rows16_a16_avx2(x, m, r, y, n_threads);
}

TEST(PackedKernels, Int4Rows16Avx2MatchesReferenceAndRowsAlone) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"int4_g32", F::Int4, 35, 256, 32},                  {"int4_g64_576", F::Int4, 69, 576, 64},
      {"int4_g128_zeros", F::Int4, 37, 384, 128, 0, true}, {"int4_g512", F::Int4, 11, 1024, 512},
      {"int4_channel_1536", F::Int4, 16, 1536},            {"int4_channel_zeros_320", F::Int4, 9, 320, 0, 0, true},
      {"int4_g64_zeros_odd_rows", F::Int4, 17, 128, 64, 0, true}, {"int4_channel_96", F::Int4, 25, 96},
  };
  for (const Case& c : cs) check_levels_kernel(c, rows16_a16_decode);
  for (Case c : cs) {  // BF16 x: two int8 levels per 32 columns (2⁻¹³ of their largest), the kernels' own bound
    c.name += "_x_bf16";
    c.act_bf16 = true;
    check_levels_kernel(c, rows16_a16_decode, 37, 13, kRows16Avx2Bf16Nmse);
  }
  const PackedWeight rows = make(Case{"int4_g64", F::Int4, 8, 256, 64}, 5);
  std::vector<float> x = normal_rows(kA16Avx2LevelsMaxM, 256), y(size_t(kA16Avx2LevelsMaxM * 8));
  EXPECT_FALSE(rows16_a16_avx2(x.data(), 1, rows, y.data(), 1)) << "the Rows layout";
  PackedWeight r16 = copy_packed_weight(rows);
  set_rows_layout(&r16, RowsLayout::Rows16);
  EXPECT_FALSE(rows16_a16_avx2(x.data(), kA16Avx2LevelsMaxM, r16, y.data(), 1)) << "m from the prefill's on";
  for (const Case& c : {Case{"int4_g16", F::Int4, 8, 64, 16}, Case{"int4_g48", F::Int4, 8, 96, 48}}) {
    PackedWeight w = make(c, 5);
    set_rows_layout(&w, RowsLayout::Rows16);
    EXPECT_FALSE(rows16_a16_avx2(x.data(), 1, w, y.data(), 1)) << c.name;
  }
  if (!linear_has_onednn(DType::F32)) return;
  for (const Case& c : {Case{"int4_g64_zeros_576", F::Int4, 35, 576, 64, 0, true}, Case{"int4_channel_96", F::Int4, 19, 96}}) {
    const PackedWeight w = make(c, 7);
    PackedWeight w16 = copy_packed_weight(w);
    set_rows_layout(&w16, RowsLayout::Rows16);
    const int64_t m = 100;
    const std::vector<float> xm = normal_rows(m, c.n_in);
    std::vector<float> ref(size_t(m * c.n_out)), ym(ref.size(), -1e30f);
    packed_linear_reference(xm.data(), m, w, ref.data(), 1);
    ASSERT_TRUE(a16_avx2_gemm(xm.data(), m, w16, ym.data(), 2)) << c.name;
    EXPECT_LE(nmse_of(ym, ref), kMaxNmse) << c.name << " prefill";
  }
}

// FP4 block scales at their edges on the VNNI kernel: MXFP4's E8M0 0 (2⁻¹²⁷) and 255 (NaN), NVFP4's E4M3 subnormals,
// 0 and NaN (0x7f, 0xff) — each row's output NaN where the reference's is, else within the suite's bound.
TEST(PackedKernels, A16VnniFp4ScaleEdges) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512vnni()) GTEST_SKIP() << "no AVX-512 VNNI here";
  check_fp4_scale_edges(a16_vnni_linear);
}

// An FP4 decode kernel on cases cs and again with BF16 activations (x one BF16 part; with f32_x false those alone):
// the suite's bound (BF16 x: x_bf16_bound) against the reference for the ordinary rows of x together and for a tiny (row 5) and a huge
// (row 6) row each, at 1 and 2 threads; a row of x in a batch (m 2..37) gives the bits it gives alone;
// check_special_rows.
void check_fp4_decode(std::vector<Case> cs, DecodeKernel kernel, bool f32_x = true, double x_bf16_bound = kMaxNmse) {
  for (size_t i = 0, n = cs.size(); i < n; ++i) {  // and with BF16 activations (x one BF16 part)
    Case c = cs[i];
    c.name += "_x_bf16";
    c.act_bf16 = true;
    cs.push_back(c);
  }
  if (!f32_x) cs.erase(cs.begin(), cs.begin() + int64_t(cs.size() / 2));
  for (const Case& c : cs) {
    const PackedWeight w = make(c, 37);
    const double bound = c.act_bf16 ? x_bf16_bound : kMaxNmse;
    const int64_t m_max = 37;
    std::vector<float> x = normal_rows(m_max, c.n_in);
    for (int64_t k = 0; k < c.n_in; ++k) x[size_t(5 * c.n_in + k)] *= 1e-30f;  // row 5: tiny
    for (int64_t k = 0; k < c.n_in; ++k) x[size_t(6 * c.n_in + k)] *= 1e30f;   // row 6: huge
    std::vector<float> ref(size_t(m_max * c.n_out));
    packed_linear_reference(x.data(), m_max, w, ref.data(), 1);
    for (int threads : {1, 2}) {
      std::vector<float> alone(ref.size(), -1e30f);
      for (int64_t i = 0; i < m_max; ++i)
        ASSERT_TRUE(kernel(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads)) << c.name;
      std::vector<float> ys, rs;  // the ordinary rows together; the tiny and huge ones each on its own
      for (int64_t i = 0; i < m_max; ++i) {
        const std::vector<float> yi(alone.begin() + i * c.n_out, alone.begin() + (i + 1) * c.n_out);
        const std::vector<float> ri(ref.begin() + i * c.n_out, ref.begin() + (i + 1) * c.n_out);
        if (i == 5 || i == 6) {
          EXPECT_LE(nmse_of(yi, ri), bound) << c.name << " row " << i << " threads " << threads;
        } else {
          ys.insert(ys.end(), yi.begin(), yi.end());
          rs.insert(rs.end(), ri.begin(), ri.end());
        }
      }
      EXPECT_LE(nmse_of(ys, rs), bound) << c.name << " threads " << threads;
      for (int64_t m : {2, 3, 5, 8, 9, 16, 37}) {
        std::vector<float> y(size_t(m * c.n_out), -1e30f);
        ASSERT_TRUE(kernel(x.data(), m, w, y.data(), threads));
        for (int64_t k = 0; k < m * c.n_out; ++k)
          ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m << " row " << k / c.n_out;
      }
    }
    check_special_rows(c, w, x, kernel);
  }
}

// MXFP4 / NVFP4 decode on AVX512-BF16 (gemm_fp4_bf16.cpp; fp4_linear's decode on AMD, prefer_bf16_a16): the
// suite's bound against the reference for rows of x at both ends of the exponent range, at 1 and 2 threads, weight
// row counts (35, 19, 7, 5, 6, 9) that leave 3, 3, 7, 5, 6 and 1 rows past the last pass of 8; a row of x in a
// batch (m 2..37) gives the bits it gives alone; a zero row gives 0 and a row with a NaN or an infinity gives NaN;
// the scale bytes at their edges (E8M0 0 and 255, E4M3 subnormals, 0 and NaN) as in A16VnniFp4ScaleEdges; declines
// n_in not a multiple of 64 and activation quantization. All again with BF16 activations (x one part): x is passed
// unrounded, the kernel's vcvtneps2bf16 rounds it as the reference does (the same for normal values: no subnormal
// x here).
TEST(PackedKernels, Fp4Bf16DecodeMatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  // Rows walked in 128-column groups, two at a time (kernel's totals 0 and 1), then a single one, then a last 64
  // columns: 576 = 2 pairs + 64, 1536 = 6 pairs, 448 = a pair + one + 64, 384 = a pair + one, 128 = one, 64.
  std::vector<Case> cs = {Case{"mxfp4_576", F::Mxfp4, 35, 576}, Case{"nvfp4_1536", F::Nvfp4, 19, 1536},
                          Case{"nvfp4_448", F::Nvfp4, 7, 448},  Case{"mxfp4_384", F::Mxfp4, 5, 384},
                          Case{"nvfp4_128", F::Nvfp4, 6, 128},  Case{"mxfp4_64", F::Mxfp4, 9, 64}};
  check_fp4_decode(cs, fp4_bf16_decode);
  for (const Case& c : {Case{"nvfp4_48", F::Nvfp4, 8, 48}, Case{"mxfp4_96", F::Mxfp4, 8, 96}}) {
    const PackedWeight w = make(c, 5);
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out));
    EXPECT_FALSE(fp4_bf16_decode(x.data(), 1, w, y.data(), 1)) << c.name;
  }
  check_fp4_scale_edges(fp4_bf16_decode);
}

// MXFP4 / NVFP4 decode on AVX2 (gemm_fp4_avx2.cpp: E2M1 codes to BF16 bytes by vpshufb, F32 FMAs): the suite's
// bound against the reference for rows of x at both ends of the exponent range, at 1 and 2 threads, weight row counts
// (35, 19, 7, 5, 6, 9, 3) that leave 3, 3, 3, 1, 2, 1 and 3 rows past the last pass of 4; a row of x in a batch
// (m 2..37) gives the bits it gives alone; a zero row gives 0 and a row with a NaN or an infinity gives NaN; the scale
// bytes at their edges (E8M0 0 and 255, E4M3 subnormals, 0 and NaN); all again with BF16 activations. Declines n_in
// not a multiple of 32 (NVFP4 48), the Rows16 layout and m from kFp4Avx2MaxM.
TEST(PackedKernels, Fp4Avx2DecodeMatchesReferenceAndRowsAlone) {
  if (packed_best_isa() == PackedIsa::Portable) GTEST_SKIP() << "no AVX2 + F16C here";
  using F = WeightFormat;
  // n_in: 576 (18 MXFP4 blocks, 36 NVFP4: 4 whole groups of 8 scales and a tail of 2 / 4), 1536, 448, 96, 32.
  std::vector<Case> cs = {Case{"mxfp4_576", F::Mxfp4, 35, 576}, Case{"nvfp4_1536", F::Nvfp4, 19, 1536},
                          Case{"nvfp4_448", F::Nvfp4, 7, 448},  Case{"mxfp4_384", F::Mxfp4, 5, 384},
                          Case{"nvfp4_576", F::Nvfp4, 6, 576},  Case{"mxfp4_96", F::Mxfp4, 9, 96},
                          Case{"nvfp4_32", F::Nvfp4, 3, 32}};
  check_fp4_decode(cs, fp4_avx2_decode);
  const PackedWeight odd = make(Case{"nvfp4_48", F::Nvfp4, 8, 48}, 5);
  std::vector<float> x = normal_rows(kFp4Avx2MaxM, 256), y(size_t(kFp4Avx2MaxM * 8));
  EXPECT_FALSE(fp4_avx2_decode(x.data(), 1, odd, y.data(), 1)) << "n_in 48";
  PackedWeight w = make(Case{"mxfp4", F::Mxfp4, 8, 256}, 5);
  EXPECT_FALSE(fp4_avx2_decode(x.data(), kFp4Avx2MaxM, w, y.data(), 1)) << "m from the prefill's on";
  set_rows_layout(&w, RowsLayout::Rows16);
  EXPECT_FALSE(fp4_avx2_decode(x.data(), 1, w, y.data(), 1)) << "Rows16 layout";
  check_fp4_scale_edges(fp4_avx2_decode);
}

// MXFP4 / NVFP4 prefill on AVX2 (gemm_fp4_avx2.cpp: fp4_avx2_gemm, W decoded to F32 once a call in the decode's
// column order, x permuted alike, oneDNN's sgemm): the suite's bound at m 64 and 100, 1 and 2 threads, F32 and BF16
// x, with the scale bytes at their edges too (rows NaN where the reference's are); declines m below kFp4Avx2MaxM.
TEST(PackedKernels, Fp4Avx2PrefillMatchesReference) {
  if (packed_best_isa() == PackedIsa::Portable || !linear_has_onednn(DType::F32)) GTEST_SKIP() << "no AVX2 or oneDNN here";
  using F = WeightFormat;
  for (Case c : {Case{"mxfp4_576", F::Mxfp4, 40, 576}, Case{"nvfp4_448", F::Nvfp4, 21, 448}})
    for (bool x_bf16 : {false, true}) {
      c.act_bf16 = x_bf16;
      PackedWeight w = make(c, 9);
      if (c.format == F::Mxfp4) w.scale_bytes[3] = 0;   // 2^-127
      else w.scale_bytes[5] = 0x7f;                      // NaN: row 0's outputs NaN
      for (int64_t m : {kFp4Avx2MaxM, int64_t(100)})
        for (int threads : {1, 2}) {
          std::vector<float> x = normal_rows(m, c.n_in), ref(size_t(m * c.n_out)), y(ref.size(), -1e30f);
          packed_linear_reference(x.data(), m, w, ref.data(), 1);
          ASSERT_TRUE(fp4_avx2_gemm(x.data(), m, w, y.data(), threads)) << c.name;
          std::vector<float> yf, rf;
          for (size_t k = 0; k < y.size(); ++k) {
            ASSERT_EQ(std::isnan(y[k]), std::isnan(ref[k])) << c.name << " m " << m << " output " << k;
            if (!std::isnan(ref[k])) yf.push_back(y[k]), rf.push_back(ref[k]);
          }
          EXPECT_LE(nmse_of(yf, rf), kMaxNmse) << c.name << " m " << m << " x_bf16 " << x_bf16 << " threads " << threads;
        }
      std::vector<float> x = normal_rows(kFp4Avx2MaxM - 1, c.n_in), y(size_t((kFp4Avx2MaxM - 1) * c.n_out));
      EXPECT_FALSE(fp4_avx2_gemm(x.data(), kFp4Avx2MaxM - 1, w, y.data(), 1)) << c.name;
    }
}

// The GEMM-form FP4 decode (rows16.h, gemm_rows16.cpp) through the DecodeKernel signature: w put in the
// Rows16 layout each call (the tests only).
bool rows16_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  PackedWeight r = copy_packed_weight(w);
  set_rows_layout(&r, RowsLayout::Rows16);
  return rows16_linear(x, m, r, y, n_threads);
}

// FP4 scale bytes at their edges in Rows16: those the layout takes (MXFP4 1 and 200: 2^-126, 2^73; NVFP4 E4M3 0 and
// subnormals) within the suite's bound through held (a Rows16 kernel, the weight put in the layout each call), which
// declines the weight as given (direct: the same kernel); those it does not (MXFP4 0 and 255, E4M3 NaN) kept out of
// the layout: rows16_wanted false, set_rows_layout throws and leaves the weight in Rows.
void check_rows16_fp4_scale_bytes(DecodeKernel held, DecodeKernel direct) {
  using F = WeightFormat;
  for (const Case& c : {Case{"mxfp4", F::Mxfp4, 8, 256}, Case{"nvfp4", F::Nvfp4, 8, 256}}) {
    const bool mx = c.format == F::Mxfp4;
    const std::vector<uint8_t> taken = mx ? std::vector<uint8_t>{1, 200}  // 2^-126, 2^73
                                          : std::vector<uint8_t>{0x00, 0x01, 0x07, 0x80, 0x87};  // 0, subnormals
    const std::vector<uint8_t> declined = mx ? std::vector<uint8_t>{0, 255} : std::vector<uint8_t>{0x7f, 0xff};
    PackedWeight w = make(c, 17);
    const int64_t nb = c.n_in / (mx ? 32 : 16);
    for (size_t k = 0; k < taken.size(); ++k) w.scale_bytes[size_t(int64_t(k) * nb + 1)] = taken[k];  // row k, block 1
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out)), ref(size_t(c.n_out));
    packed_linear_reference(x.data(), 1, w, ref.data(), 1);
    EXPECT_FALSE(direct(x.data(), 1, w, y.data(), 1)) << c.name << ": a weight in the Rows layout";
    ASSERT_TRUE(held(x.data(), 1, w, y.data(), 1)) << c.name;
    EXPECT_LE(nmse_of(y, ref), kMaxNmse) << c.name;
    for (const uint8_t b : declined) {
      PackedWeight e = copy_packed_weight(w);
      e.scale_bytes[3] = b;
      EXPECT_FALSE(rows16_wanted(e)) << c.name << " byte " << int(b);
      EXPECT_THROW(set_rows_layout(&e, RowsLayout::Rows16), Error) << c.name << " byte " << int(b);
      EXPECT_EQ(e.rows_layout, RowsLayout::Rows) << c.name << " byte " << int(b);
    }
  }
}

// The GEMM-form FP4 decode: the suite's bound against the reference (rows of x at both ends of the exponent range
// apart), at 1 and 2 threads, row counts 35, 19, 16, 5 and 1 (a last 16-row block holding 3, 3, 16, 5 and 1 rows),
// 4 to 192 column chunks of 8; a row of x in a batch (m 2..37, passes of 8 rows of x) gives the bits it gives
// alone; zero / NaN / infinity rows as the row-major kernel; F32 and BF16 x. Takes E4M3 0 and subnormal scales;
// the bytes its fast conversion does not take (MXFP4 0 and 255, E4M3 NaN) are kept out of the layout
// (set_rows_layout refuses them, rows16_wanted is false); declines (false) a weight in the Rows layout.
TEST(PackedKernels, Fp4Rows16MatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {Case{"mxfp4_576", F::Mxfp4, 35, 576}, Case{"nvfp4_1536", F::Nvfp4, 19, 1536},
                                Case{"nvfp4_64", F::Nvfp4, 16, 64},   Case{"mxfp4_32", F::Mxfp4, 5, 32},
                                Case{"nvfp4_96", F::Nvfp4, 1, 96}};
  check_fp4_decode(cs, rows16_decode);
  check_rows16_fp4_scale_bytes(rows16_decode, rows16_linear);
  PackedWeight odd = make(Case{"nvfp4_48", F::Nvfp4, 8, 48}, 5);
  EXPECT_FALSE(rows16_wanted(odd));
  EXPECT_THROW(set_rows_layout(&odd, RowsLayout::Rows16), Error);
  PackedWeight int8 = make(Case{"int8", F::Int8, 8, 64, 32}, 5);
  EXPECT_FALSE(rows16_wanted(int8));
  EXPECT_THROW(set_rows_layout(&int8, RowsLayout::Rows16), Error);
}

// The 16-row FP4 decode on AVX2 (gemm_rows16_fp4_avx2.cpp: x as int8 levels per scale block, vpmaddubsw against the
// codes as 2 v + 12) through the DecodeKernel signature, w put in the Rows16 layout each call (the tests only).
bool rows16_fp4_avx2_decode(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  PackedWeight r = copy_packed_weight(w);
  set_rows_layout(&r, RowsLayout::Rows16);
  return rows16_fp4_avx2(x, m, r, y, n_threads);
}

// The 16-row FP4 decode on AVX2: the suite's bound against the reference (BF16 x: kRows16Avx2Bf16Nmse; rows of x at both ends of the exponent range
// apart), 1 and 2 threads, row counts 35, 19, 16, 5, 1 and 40 (a last 16-row block holding 3, 3, 16, 5, 1 and 8
// rows), 1 to 48 scale blocks a row; a row of x in a batch (m 2..37) with the bits it has alone; zero / NaN /
// infinity rows; F32 and BF16 x; x whose blocks differ by 2^60 and 2^-130 (a block F32 cannot keep beside the row's
// largest gives nothing: within the bound), and subnormal x alone; scale bytes as check_rows16_fp4_scale_bytes;
// declines activation quantization and other formats.
TEST(PackedKernels, Fp4Rows16Avx2MatchesReferenceAndRowsAlone) {
  if (packed_best_isa() == PackedIsa::Portable) GTEST_SKIP() << "no AVX2 + F16C here";
  using F = WeightFormat;
  const std::vector<Case> cs = {Case{"mxfp4_576", F::Mxfp4, 35, 576}, Case{"nvfp4_1536", F::Nvfp4, 19, 1536},
                                Case{"nvfp4_64", F::Nvfp4, 16, 64},   Case{"mxfp4_32", F::Mxfp4, 5, 32},
                                Case{"nvfp4_96", F::Nvfp4, 1, 96},    Case{"mxfp4_1536", F::Mxfp4, 40, 1536},
                                Case{"nvfp4_32", F::Nvfp4, 3, 32}};
  check_fp4_decode(cs, rows16_fp4_avx2_decode, true, kRows16Avx2Bf16Nmse);
  check_rows16_fp4_scale_bytes(rows16_fp4_avx2_decode, rows16_fp4_avx2);
  for (const Case& c : {Case{"mxfp4_spread", F::Mxfp4, 21, 256}, Case{"nvfp4_spread", F::Nvfp4, 21, 256}}) {
    const PackedWeight w = make(c, 29);
    std::vector<float> x = normal_rows(3, c.n_in);
    for (int64_t k = 0; k < c.n_in; ++k) {
      if (k % 64 < 32) x[size_t(k)] *= 0x1p60f;                         // row 0: blocks 2^60 apart
      if (k >= 32) x[size_t(c.n_in + k)] *= 0x1p-65f * 0x1p-65f;        // row 1: all but the first block 2^-130 smaller
      x[size_t(2 * c.n_in + k)] = float(k % 7 - 3) * 0x1p-140f;         // row 2: subnormal
    }
    std::vector<float> ref(size_t(3 * c.n_out)), y(ref.size(), -1e30f);
    packed_linear_reference(x.data(), 3, w, ref.data(), 1);
    ASSERT_TRUE(rows16_fp4_avx2_decode(x.data(), 3, w, y.data(), 1)) << c.name;
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<float> yi(y.begin() + i * c.n_out, y.begin() + (i + 1) * c.n_out);
      const std::vector<float> ri(ref.begin() + i * c.n_out, ref.begin() + (i + 1) * c.n_out);
      EXPECT_LE(nmse_of(yi, ri), kMaxNmse) << c.name << " row " << i;
    }
  }
  for (const Case& c : {Case{"w4a8", F::Int4, 8, 64, 32, 0, false, false, false, ActQuant::Int8Dynamic},
                        Case{"int4", F::Int4, 8, 64, 32}}) {
    PackedWeight w = make(c, 5);
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out));
    EXPECT_FALSE(rows16_fp4_avx2(x.data(), 1, w, y.data(), 1)) << c.name;
  }
}

// The GEMM-form decode on Int4 (W4A16) weights: as Fp4Rows16MatchesReferenceAndRowsAlone — the suite's bound
// against the reference (the tiny and huge rows of x apart), 1 and 2 threads, a row of a batch (m 2..37) with the
// bits it has alone, zero / NaN / infinity rows, F32 and BF16 x — on groups of 32, 64 and 128 columns and per
// channel, symmetric and with zero points (taken off as zero · Σ x a group), a last group shorter than the others
// (n_in 96 in groups of 64), groups of 16 and 48 (an act-order slice's held groups: common/act_order.h), row counts
// leaving 3, 3, 16, 5 and 1 rows in the last 16-row block (17 rows, not 1: the tiny and huge rows' NMSE is over a
// row's outputs, and over one output it is one squared relative error — at n_out 1 the AMX Xeon's vdpbf16ps rounding
// put g32 with zeros at 7.6e-10 where Zen 5's passed); g_idx, groups of 8 and activation quantization stay out of the
// layout.
TEST(PackedKernels, Int4Rows16MatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      Case{"int4_g64_576", F::Int4, 35, 576, 64},          Case{"int4_g128_zeros_1536", F::Int4, 19, 1536, 128, 0, true},
      Case{"int4_channel_576", F::Int4, 16, 576},          Case{"int4_channel_zeros_64", F::Int4, 5, 64, 0, 0, true},
      Case{"int4_g32_zeros_96", F::Int4, 17, 96, 32, 0, true}, Case{"int4_g64_zeros_96", F::Int4, 21, 96, 64, 0, true},
      Case{"int4_g16_zeros_64", F::Int4, 8, 64, 16, 0, true}, Case{"int4_g48_576", F::Int4, 19, 576, 48},
  };
  check_fp4_decode(cs, rows16_decode);
  for (const Case& c : {Case{"int4_g64_gidx", F::Int4, 8, 256, 64, 0, false, true}, Case{"int4_g8", F::Int4, 8, 64, 8},
                        Case{"w4a8", F::Int4, 8, 64, 32, 0, false, false, false, ActQuant::Int8Dynamic},
                        Case{"int4_odd", F::Int4, 8, 48}}) {
    PackedWeight w = make(c, 5);
    EXPECT_FALSE(rows16_wanted(w)) << c.name;
    EXPECT_THROW(set_rows_layout(&w, RowsLayout::Rows16), Error) << c.name;
  }
}

// The GEMM-form decode on GGUF Q4_0 / Q4_1 / Q4_K weights (d (q − 8); d q + m as d (q − 8) + (m + 8 d), Q4_K's
// d sc q − dmin m a 32-column sub-block as d sc (q − 8) + (8 d sc − dmin m), the second term × Σ x of the block): as Fp4Rows16MatchesReferenceAndRowsAlone — the suite's bound against the reference on the
// weight in 16-row blocks (x as given, or rounded to BF16 with act_bf16), the tiny and huge rows of x apart, 1 and 2
// threads, a row of a batch (m 2..37) with the bits it has alone, zero / NaN / infinity rows — over 1 to 48 blocks a
// row and row counts leaving 3, 3, 16, 5 and 1 rows in the last 16-row block; rows regrouped for the VNNI kernel
// (Q4_0Groups) stay out of the layout.
TEST(PackedKernels, GgufQ4Rows16MatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here";
  using F = WeightFormat;
  // with F32 x they run on the int8 GEMM form (x quantized as llama.cpp does: test_gemm_gguf.cpp GemmGgufRows16);
  // here their BF16-x form
  check_fp4_decode({Case{"q4_0_576", F::GgufQ4_0, 35, 576}, Case{"q4_1_1536", F::GgufQ4_1, 19, 1536},
                    Case{"q4_1_64", F::GgufQ4_1, 16, 64}, Case{"q4_0_32", F::GgufQ4_0, 5, 32},
                    Case{"q4_1_96", F::GgufQ4_1, 1, 96}, Case{"q4_k_1536", F::GgufQ4_K, 35, 1536},
                    Case{"q4_k_256", F::GgufQ4_K, 19, 256}},
                   rows16_decode, false);
  PackedWeight groups = make(Case{"q4_0_groups", F::GgufQ4_0, 8, 64}, 5);
  std::vector<uint8_t> row(size_t(groups.row_bytes()));
  for (int64_t r = 0; r < groups.n_out; ++r) {
    std::memcpy(row.data(), groups.data.data() + r * groups.row_bytes(), row.size());
    gguf_row_from_file_layout(GgufLayout::Q4_0Groups, row.data(), groups.n_in, groups.data.data() + r * groups.row_bytes());
  }
  groups.gguf_layout = GgufLayout::Q4_0Groups;
  EXPECT_FALSE(rows16_wanted(groups));
  EXPECT_THROW(set_rows_layout(&groups, RowsLayout::Rows16), Error);
}

// GGUF Q4_0 / Q4_1 / Q4_K through cpu::Weight and linear(): where rows16_wanted the Weight holds them in 16-row blocks
// for the int8 GEMM form (x as llama.cpp quantizes it; no act_bf16), else as the file's blocks; dequantize_rows equal
// to the file's; in 16-row blocks every m (1..37, 64, 100) each row of a batch or prefill with the bits it has alone,
// within the suite's bound of the file layout's int8-activation kernel (gemm_gguf on the file's blocks: the same
// integer sums).
TEST(PackedKernels, GgufQ4WeightTakesTheDecodeLayout) {
  using F = WeightFormat;
  for (const Case& c : {Case{"q4_0_576", F::GgufQ4_0, 35, 576}, Case{"q4_1_1536", F::GgufQ4_1, 19, 1536},
                        Case{"q4_k_512", F::GgufQ4_K, 21, 512}}) {
    const PackedWeight given = make(c, 29);
    const bool wanted = rows16_wanted(given);
    const cpu::Weight w(copy_packed_weight(given));
    EXPECT_EQ(w.packed().rows_layout, wanted ? RowsLayout::Rows16 : RowsLayout::Rows) << c.name;
    EXPECT_FALSE(w.packed().act_bf16) << c.name;
    std::vector<float> a(size_t(c.n_out * c.n_in)), b(a.size());
    dequantize_rows(given, 0, c.n_out, a.data());
    dequantize_rows(w.packed(), 0, c.n_out, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << c.name;
    if (!wanted) continue;  // the file layout's kernels: test_gemm_gguf.cpp
    const int64_t m_max = 100;
    const std::vector<float> x = normal_rows(m_max, c.n_in);
    std::vector<float> int8_x(size_t(m_max * c.n_out)), alone(int8_x.size());
    gemm_gguf(x.data(), m_max, given, int8_x.data(), 1, GgufKernel::Best);
    for (int64_t i = 0; i < m_max; ++i) cpu::linear(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out);
    EXPECT_LE(nmse_of(alone, int8_x), kMaxNmse) << c.name;
    for (int64_t m : {2, 8, 16, 37, 64, 100}) {
      std::vector<float> y(size_t(m * c.n_out));
      cpu::linear(x.data(), m, w, y.data());
      for (int64_t k = 0; k < m * c.n_out; ++k) ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m;
    }
  }
}

// Int4 and FP4 weights through cpu::Weight and linear(), as a loaded model runs them: where the GEMM-form decode
// is this CPU's (rows16_wanted: AVX512-BF16 and prefer_bf16_a16; Int4 and FP4 on AVX2 without AVX-512 too) the Weight holds
// them in 16-row blocks, else as given; either way, decode sizes (m 1..37) within the suite's bound of the reference on the weight as given, a row
// of a batch with the bits it has alone; prefill sizes (m 64, 100): in 16-row blocks the same kernel, each row with
// the bits it has alone (Int4 / FP4 on AVX2: the F32 prefill, within the bound); else the prefill kernels, within the bound — grouped Int4 at BF16 activations, whose
// prefill rounds the weights to BF16, with the bits the weight as given has; the portable and AVX2 paths (the reference for a Rows16 weight; AVX2's Int4 / FP4 kernels within the bound) the same as the
// reference; dequantize_rows of the Weight's packed bytes equal to the given weight's.
TEST(PackedKernels, FourBitWeightTakesTheDecodeLayoutAndMatchesReference) {
  using F = WeightFormat;
  std::vector<Case> cs = {Case{"int4_g64_zeros_576", F::Int4, 35, 576, 64, 0, true},
                          Case{"int4_channel_1536", F::Int4, 19, 1536},
                          Case{"nvfp4_576", F::Nvfp4, 35, 576}, Case{"mxfp4_1536", F::Mxfp4, 19, 1536},
                          Case{"nvfp4_192_x_bf16", F::Nvfp4, 40, 192}, Case{"int4_g128_x_bf16", F::Int4, 40, 256, 128}};
  cs[4].act_bf16 = cs[5].act_bf16 = true;
  for (const Case& c : cs) {
    const PackedWeight given = make(c, 23);
    const bool wanted = rows16_wanted(given);
    const cpu::Weight w(copy_packed_weight(given));
    EXPECT_EQ(w.packed().rows_layout, wanted ? RowsLayout::Rows16 : RowsLayout::Rows) << c.name;
    std::vector<float> a(size_t(c.n_out * c.n_in)), b(a.size());
    dequantize_rows(given, 0, c.n_out, a.data());
    dequantize_rows(w.packed(), 0, c.n_out, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << c.name;
    const int64_t m_max = 100;
    const std::vector<float> x = normal_rows(m_max, c.n_in);
    std::vector<float> ref(size_t(m_max * c.n_out));
    packed_linear_reference(x.data(), m_max, given, ref.data(), 1);
    std::vector<float> alone(size_t(37 * c.n_out));
    for (int64_t i = 0; i < 37; ++i) cpu::linear(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out);
    // Int4 / FP4 in 16-row blocks on AVX2 with BF16 x: two int8 levels, the kernels' own bound
    const double bound = avx2_bf16_levels(w.packed()) ? kRows16Avx2Bf16Nmse : kMaxNmse;
    EXPECT_LE(nmse_of(alone, std::vector<float>(ref.begin(), ref.begin() + 37 * c.n_out)), bound) << c.name;
    for (int64_t m : {2, 8, 16, 37}) {
      std::vector<float> y(size_t(m * c.n_out));
      cpu::linear(x.data(), m, w, y.data());
      for (int64_t k = 0; k < m * c.n_out; ++k) ASSERT_EQ(y[size_t(k)], alone[size_t(k)]) << c.name << " m " << m;
    }
    // Int4 / FP4 in 16-row blocks on AVX2 (rows16_avx2_wanted): the decode kernel below kA16Avx2LevelsMaxM /
    // kFp4Avx2MaxM, the F32 prefill from there (a16_avx2_gemm, fp4_avx2_gemm), within the bound
    const bool avx2_rows16 = wanted && packed_best_isa() == PackedIsa::Avx2;
    for (int64_t m : {64, 100}) {
      std::vector<float> y(size_t(m * c.n_out)), rows(y.size());
      cpu::linear(x.data(), m, w, y.data());
      if (wanted && !avx2_rows16) {  // the GEMM-form kernel at every m: a prefill's rows have the bits they have alone
        for (int64_t i = 0; i < m; ++i) cpu::linear(x.data() + i * c.n_in, 1, w, rows.data() + i * c.n_out);
        ASSERT_EQ(y, rows) << c.name << " m " << m;
      } else if (c.format == F::Int4 && c.group > 0 && c.act_bf16 && !avx2_rows16) {  // (q − z) · scale rounded to BF16 (packed_kernels.h
        packed_linear(x.data(), m, given, rows.data(), 1);      // a16_bf16_prefill): the weight as given's bits
        ASSERT_EQ(y, rows) << c.name << " m " << m;
      } else {
        EXPECT_LE(nmse_of(y, std::vector<float>(ref.begin(), ref.begin() + m * c.n_out)), kMaxNmse) << c.name << " m " << m;
      }
    }
    for (PackedIsa isa : {PackedIsa::Portable, PackedIsa::Avx2}) {
      if (!wanted) break;  // the weight as given: those ISAs run their own kernels (the suites above)
      if (isa == PackedIsa::Avx2 && packed_best_isa() == PackedIsa::Portable) continue;
      std::vector<float> y(size_t(4 * c.n_out)), r(y.size());
      packed_linear_isa(x.data(), 4, w.packed(), y.data(), 1, isa);
      packed_linear_reference(x.data(), 4, w.packed(), r.data(), 1);
      if (isa == PackedIsa::Avx2)  // AVX2's own kernels in 16-row blocks (rows16_a16_avx2, rows16_fp4_avx2)
        EXPECT_LE(nmse_of(y, r), bound) << c.name << " isa " << int(isa);
      else
        EXPECT_EQ(y, r) << c.name << " isa " << int(isa);
    }
  }
}

// Act-order weights (GPTQ's actorder "group": g_idx a shuffled assignment of group_size columns a group, the last
// group the rest), whole and as a row-parallel slice holds them (columns [c0, c1): groups held partly), through
// cpu::Weight and linear(): held with their columns sorted by group (common/act_order.h; g_idx cleared, a slice's
// groups padded in 32s), so the kernels for contiguous groups run them — Int4 in 16-row blocks where rows16_wanted
// takes the held weight (AMD), W8A16 on the VNNI / AVX-512 decode, W8A8 on its int8 kernels — where the one
// kernel that took g_idx read a scale a column (~40× slower decode: bench/packed_bench --as-loaded). Checked: every
// held column's values (dequantize_rows) those of the given column it reads (0 for padding); m 1 (37 rows one at a
// time), 2, 16, 37 and 64 within the suite's bound of the reference on the weight as given (x as given: linear()
// gathers x for the held columns); in 16-row blocks a batch's rows with the bits they have alone; m = 4 on every
// ISA here (packed_linear_isa on the held weight and x gathered) within the bound.
TEST(PackedKernels, ActOrderWeightIsHeldSortedAndMatchesReference) {
  using F = WeightFormat;
  struct A {
    Case c;
    int64_t c0 = 0, c1 = 0;  // a row-parallel slice of the columns (0, 0: the whole weight)
  };
  std::vector<A> cs = {{Case{"int4_g64_576", F::Int4, 35, 576, 64}},
                       {Case{"int4_g128_zeros_576", F::Int4, 19, 576, 128, 0, true}},
                       {Case{"int4_g32_odd_203", F::Int4, 9, 203, 32}},
                       {Case{"int8_g128_576", F::Int8, 21, 576, 128}},
                       {Case{"int8_g64_w8a8_token", F::Int8, 29, 256, 64, 0, false, false, false, ActQuant::Int8Dynamic}},
                       {Case{"int4_g128_x_bf16", F::Int4, 40, 256, 128}},
                       {Case{"int4_g64_slice_288_576", F::Int4, 35, 576, 64}, 288, 576},
                       {Case{"int4_g128_zeros_slice_x_bf16", F::Int4, 19, 1536, 128, 0, true}, 512, 1024},
                       {Case{"int8_g128_slice_192_384", F::Int8, 21, 576, 128}, 192, 384}};
  cs[5].c.act_bf16 = cs[7].c.act_bf16 = true;
  for (const A& a : cs) {
    const Case& c = a.c;
    PackedWeight whole = make(c, 31);
    std::mt19937 rng(7);
    for (int64_t k = 0; k < c.n_in; ++k) whole.g_idx.push_back(int32_t(k / whole.group_size));
    std::shuffle(whole.g_idx.begin(), whole.g_idx.end(), rng);
    PackedWeight given = copy_packed_weight(whole);
    if (a.c1 > 0) {  // columns [c0, c1), every group's scales kept, as the loaders slice act-order weights
      given.n_in = a.c1 - a.c0;
      given.g_idx.assign(whole.g_idx.begin() + a.c0, whole.g_idx.begin() + a.c1);
      given.g_idx_groups = whole.n_groups();
      given.data = AlignedBytes(c.n_out * given.row_bytes());
      for (int64_t r = 0; r < c.n_out; ++r)
        std::memcpy(given.data.data() + r * given.row_bytes(), whole.data.data() + r * whole.row_bytes() +
                    a.c0 * whole.row_bytes() / c.n_in, size_t(given.row_bytes()));  // c0 even: whole bytes
    }
    check_packed_weight(given);
    const int64_t n_in = given.n_in;
    const cpu::Weight w(copy_packed_weight(given));
    const PackedWeight& held = w.packed();
    const std::vector<int32_t>& gather = w.column_gather();
    EXPECT_TRUE(held.g_idx.empty()) << c.name;
    EXPECT_EQ(w.n_in(), n_in) << c.name;
    ASSERT_EQ(int64_t(gather.size()), held.n_in) << c.name;
    const bool rows16 = held.rows_layout == RowsLayout::Rows16;
    std::vector<float> a_given(size_t(c.n_out * n_in)), b_held(size_t(c.n_out * held.n_in));
    dequantize_rows(given, 0, c.n_out, a_given.data());
    dequantize_rows(held, 0, c.n_out, b_held.data());
    for (int64_t r = 0; r < c.n_out; ++r)
      for (int64_t j = 0; j < held.n_in; ++j)
        if (gather[size_t(j)] >= 0) {
          ASSERT_EQ(b_held[size_t(r * held.n_in + j)], a_given[size_t(r * n_in + gather[size_t(j)])]) << c.name;
        }
    const int64_t m_max = 64;
    const std::vector<float> x = normal_rows(m_max, n_in);
    std::vector<float> ref(size_t(m_max * c.n_out)), alone(size_t(37 * c.n_out));
    packed_linear_reference(x.data(), m_max, given, ref.data(), 1);
    auto head = [&](int64_t m) { return std::vector<float>(ref.begin(), ref.begin() + m * c.n_out); };
    for (int64_t i = 0; i < 37; ++i) cpu::linear(x.data() + i * n_in, 1, w, alone.data() + i * c.n_out);
    const bool levels2 = avx2_bf16_levels(held);  // BF16 x on the AVX2 16-row kernels at decode sizes: their bound
    EXPECT_LE(nmse_of(alone, head(37)), levels2 ? kRows16Avx2Bf16Nmse : kMaxNmse) << c.name;
    for (int64_t m : {2, 16, 37, 64}) {
      std::vector<float> y(size_t(m * c.n_out));
      cpu::linear(x.data(), m, w, y.data());
      // grouped Int weights at BF16 x outside the 16-row blocks: the prefill rounds the weights to BF16 too
      const bool w_rounded = c.act_bf16 && !rows16 && m >= kA16Bf16MinM;
      const double bound = w_rounded ? 1e-5 : levels2 && m < kA16Avx2LevelsMaxM ? kRows16Avx2Bf16Nmse : kMaxNmse;
      EXPECT_LE(nmse_of(y, head(m)), bound) << c.name << " m " << m;
      if (rows16 && m <= 37) {
        EXPECT_EQ(y, std::vector<float>(alone.begin(), alone.begin() + m * c.n_out)) << c.name << " m " << m;
      }
    }
    std::vector<float> xg(size_t(4 * held.n_in));  // x as linear() gathers it
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < held.n_in; ++j)
        xg[size_t(i * held.n_in + j)] = gather[size_t(j)] < 0 ? 0.0f : x[size_t(i * n_in + gather[size_t(j)])];
    std::vector<PackedIsa> isas{PackedIsa::Portable};
    if (cpu_has_avx2()) isas.push_back(PackedIsa::Avx2);
    if (packed_best_isa() == PackedIsa::Avx512) isas.push_back(PackedIsa::Avx512);
    for (PackedIsa isa : isas) {
      std::vector<float> y(size_t(4 * c.n_out));
      packed_linear_isa(xg.data(), 4, held, y.data(), 1, isa);
      EXPECT_LE(nmse_of(y, head(4)), levels2 && isa == PackedIsa::Avx2 ? kRows16Avx2Bf16Nmse : kMaxNmse)
          << c.name << " isa " << int(isa);
    }
    std::printf("[packed-kernels] act-order %-30s held sorted: %lld -> %lld columns, groups of %lld%s\n",
                c.name.c_str(), (long long)n_in, (long long)held.n_in, (long long)held.group_size,
                rows16 ? ", in 16-row blocks" : "");
  }
}

// Block scales one row a block (block_out 1, 203 rows) as a fused q|k|v weight holds its parts' 128 × 128 blocks
// (compressed_tensors.cpp): rows 0-127, 128-191, 192-199 and 200-202 each take their first row's scales.
void hold_as_fused_runs(PackedWeight& w) {
  const int64_t nbc = w.n_groups();
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 128}, {128, 192}, {192, 200}, {200, 203}})
    for (int64_t r = r0 + 1; r < r1; ++r) std::copy_n(w.scales.begin() + r0 * nbc, nbc, w.scales.begin() + r * nbc);
}

// An FP8 decode kernel that reads E4M3's F32 bits in place against x · 2^k (fp8_pow2.h) on 9 rows of x: the suite's
// bound per row for ordinary rows, one with a 10⁴ outlier, rows × 1e-30 and × 1e30 and a row near F32's largest
// values; 0 for a zero row, NaN for a row with a NaN, the reference's ±inf / NaN for one with an infinity; a row of
// x in a batch (m 2-9 from every row) gives the bits it gives alone, at 1 and 2 threads; a batch of m_max rows
// the same.
void check_fp8_decode_rows(const Case& c, const PackedWeight& w, DecodeKernel kernel, int64_t m_max) {
  constexpr int64_t kRows = 9;
  std::vector<float> x = normal_rows(kRows, c.n_in);
  x[size_t(1 * c.n_in + 5)] = 1e4f;                                              // row 1: one outlier
  for (int64_t k = 0; k < c.n_in; ++k) x[size_t(2 * c.n_in + k)] *= 1e-30f;      // row 2: tiny
  for (int64_t k = 0; k < c.n_in; ++k) x[size_t(3 * c.n_in + k)] *= 1e30f;       // row 3: huge
  for (int64_t k = 0; k < c.n_in; ++k) x[size_t(4 * c.n_in + k)] *= 1e36f;       // row 4: near F32's largest
  std::fill(x.begin() + 5 * c.n_in, x.begin() + 6 * c.n_in, 0.0f);               // row 5: zeros
  x[size_t(6 * c.n_in + c.n_in / 2)] = std::numeric_limits<float>::quiet_NaN();  // row 6
  x[size_t(7 * c.n_in + c.n_in - 1)] = -std::numeric_limits<float>::infinity();  // row 7
  std::vector<float> ref(size_t(kRows * c.n_out));
  packed_linear_reference(x.data(), kRows, w, ref.data(), 1);
  for (int threads : {1, 2}) {
    std::vector<float> alone(ref.size(), -1e30f);
    for (int64_t i = 0; i < kRows; ++i)
      ASSERT_TRUE(kernel(x.data() + i * c.n_in, 1, w, alone.data() + i * c.n_out, threads)) << c.name;
    for (int64_t i = 0; i < kRows; ++i) {
      const std::vector<float> yi(alone.begin() + i * c.n_out, alone.begin() + (i + 1) * c.n_out);
      const std::vector<float> ri(ref.begin() + i * c.n_out, ref.begin() + (i + 1) * c.n_out);
      if (i == 5) {
        for (float v : yi) EXPECT_EQ(v, 0.0f) << c.name;
      } else if (i == 6) {
        for (float v : yi) EXPECT_TRUE(std::isnan(v)) << c.name;
      } else if (i == 7) {  // ±inf where the reference has it (static FP8 activations saturate it to -448)
        std::vector<float> yf, rf;
        for (int64_t r = 0; r < c.n_out; ++r) {
          EXPECT_EQ(std::isnan(yi[size_t(r)]), std::isnan(ri[size_t(r)])) << c.name << " output " << r;
          if (std::isinf(ri[size_t(r)])) {
            EXPECT_EQ(yi[size_t(r)], ri[size_t(r)]) << c.name << " output " << r;
          } else if (!std::isnan(ri[size_t(r)])) {
            yf.push_back(yi[size_t(r)]), rf.push_back(ri[size_t(r)]);
          }
        }
        EXPECT_LE(nmse_of(yf, rf), kMaxNmse) << c.name << " the infinity's row";
      } else {
        EXPECT_LE(nmse_of(yi, ri), kMaxNmse) << c.name << " row " << i << " threads " << threads;
      }
    }
    for (int64_t m : {2, 3, 4, 5, 6, 7, 9})
      for (int64_t i0 = 0; i0 + m <= kRows; ++i0) {
        std::vector<float> y(size_t(m * c.n_out), -1e30f);
        ASSERT_TRUE(kernel(x.data() + i0 * c.n_in, m, w, y.data(), threads)) << c.name;
        for (int64_t k = 0; k < m * c.n_out; ++k) {
          const float a = alone[size_t(i0 * c.n_out + k)];
          if (std::isnan(a)) {
            EXPECT_TRUE(std::isnan(y[size_t(k)])) << c.name << " m " << m << " from row " << i0;
          } else {
            ASSERT_EQ(y[size_t(k)], a) << c.name << " m " << m << " from row " << i0 << " output " << k;
          }
        }
      }
  }
  std::vector<float> xb(size_t((m_max + 1) * c.n_in)), y(size_t((m_max + 1) * c.n_out));
  for (int64_t k = 0; k < (m_max + 1) * c.n_in; ++k) xb[size_t(k)] = x[size_t(k % (kRows * c.n_in))];
  ASSERT_TRUE(kernel(xb.data(), m_max, w, y.data(), 2)) << c.name;
  for (int64_t i = 0; i < m_max; ++i) {  // xb's row i is x's row i % kRows
    std::vector<float> row(size_t(c.n_out));
    ASSERT_TRUE(kernel(xb.data() + i * c.n_in, 1, w, row.data(), 1)) << c.name;
    for (int64_t r = 0; r < c.n_out; ++r) {
      const float a = row[size_t(r)], b = y[size_t(i * c.n_out + r)];
      ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << c.name << " m " << m_max << " row " << i;
    }
  }
}

// FP8 decode on Intel AVX-512 (gemm_fp8_avx512.cpp: each E4M3 byte's F32 bits made in place by 16-bit shifts and a
// mask, value · 2⁻¹²⁰, against x permuted a 64-column step and scaled by a power of two a row): tensor / channel
// scales, F32 and FP8 activations (dynamic, static), every E4M3 code but NaN, column counts of 1 to 24 steps with and
// without a short last one; block scales (128 × 128 with partial last blocks, with FP8 dynamic activations, 96 rows
// × 64 columns, 40 × 48 across steps, 1 × 128 all different and in runs of equal rows as a fused weight holds its
// parts' blocks; with FP8 activations per group of 128, x rounded first as fp8_linear does); check_fp8_decode_rows with
// every m below kFp8OnednnMinM; declines prefill sizes (and activation groups without x_quantized).
TEST(PackedKernels, Fp8Avx512DecodeMatchesReferenceAndRowsAlone) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_is_intel() || !cpu_has_avx512bf16())
    GTEST_SKIP() << "not an Intel CPU with AVX-512 BF16: the kernel is Intel's";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"fp8_channel_576", F::Fp8E4M3, 40, 576},
      {"fp8_tensor_odd_cols", F::Fp8E4M3, 13, 203, 0, 0, false, false, true},
      {"fp8_channel_32", F::Fp8E4M3, 6, 32},
      {"fp8_channel_64", F::Fp8E4M3, 5, 64},
      {"fp8_dynamic_act", F::Fp8E4M3, 21, 1536, 0, 0, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_static_act_odd", F::Fp8E4M3, 21, 101, 0, 0, false, false, true, ActQuant::Fp8Static},
      {"fp8_block128_576", F::Fp8E4M3, 261, 576, 128, 128},  // 64 columns and 5 rows in the last blocks
      {"fp8_block128_dynamic", F::Fp8E4M3, 130, 256, 128, 128, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_block96x64", F::Fp8E4M3, 100, 160, 64, 96},
      {"fp8_block40x48_odd", F::Fp8E4M3, 45, 203, 48, 40},  // blocks across 64-column steps, a short last step
      {"fp8_block1x128", F::Fp8E4M3, 70, 320, 128, 1},       // a scale row a weight row, all different
      {"fp8_fused_runs", F::Fp8E4M3, 203, 320, 128, 1},      // the same as a fused weight holds it: runs (below)
      // FP8 activations per group of 128 (DeepSeek-V3's 1 × 128): fp8_linear rounds x first (x_quantized)
      {"fp8_block128_act_group", F::Fp8E4M3, 130, 384, 128, 128, false, false, false, ActQuant::Fp8Dynamic, 128},
  };
  const DecodeKernel kernel = [](const float* x, int64_t m, const PackedWeight& w, float* y, int t) {
    return fp8_avx512_decode(x, m, w, y, t);
  };
  const DecodeKernel after_fake_quantization = [](const float* x, int64_t m, const PackedWeight& w, float* y, int t) {
    std::vector<float> xq(size_t(m * w.n_in));
    fake_quantize_activations(x, m, w.n_in, w.act, w.act_scale, w.act_group, xq.data());
    return fp8_avx512_decode(xq.data(), m, w, y, t, /*x_quantized=*/true);
  };
  for (const Case& c : cs) {
    PackedWeight w = make(c, 29);
    if (c.name == "fp8_fused_runs") hold_as_fused_runs(w);
    check_fp8_decode_rows(c, w, c.act_group > 0 ? after_fake_quantization : kernel, kFp8OnednnMinM - 1);
    std::vector<float> big(size_t(kFp8OnednnMinM * c.n_in)), yb(size_t(kFp8OnednnMinM * c.n_out));
    EXPECT_FALSE(fp8_avx512_decode(big.data(), kFp8OnednnMinM, w, yb.data(), 1)) << c.name << ": prefill sizes";
    if (c.act_group > 0) {  // the grouped scales are fp8_linear's to apply
      EXPECT_FALSE(fp8_avx512_decode(big.data(), 1, w, yb.data(), 1)) << c.name << ": activation groups";
    }
  }
}

// FP8 decode on AVX2 (gemm_a16_avx2.cpp: each E4M3 byte's F32 bits made by shifts and a mask, value · 2⁻¹²⁰ —
// E4M3's subnormals as F32 subnormals — against x permuted and scaled by a power of two a row): tensor / channel
// scales, 1-48 blocks of 32 columns, row counts that leave 0-3 rows past the last 4-row block, F32 x and FP8 dynamic
// activations (through fp8_linear), every E4M3 code but NaN; the suite's bound per row of x for ordinary rows, one
// with a 10⁴ outlier, rows × 1e-30 and × 1e30 and a row near F32's largest values; 0 for a zero row, NaN for a
// row with a NaN, the reference's ±inf / NaN for one with an infinity; a row of x in a batch (m 2-9 from every row:
// 4 rows of x a pass and the last 1-3 together) gives the bits it gives alone, at 1 and 2 threads; a batch of
// kA16Avx2MaxM - 1 rows the same; block scales (128 × 128 with partial last blocks, with FP8 dynamic activations, 96
// rows × 64 columns, 1 × 128 all different, and 1 × 128 in runs of equal rows as a fused weight holds its parts'
// blocks) likewise; declines m from kA16Avx2MaxM, n_in not a multiple of 32 and blocks of 48 columns.
TEST(PackedKernels, Fp8Avx2DecodeMatchesReferenceAndRowsAlone) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 here";
  using F = WeightFormat;
  const std::vector<Case> cs = {
      {"fp8_channel_576", F::Fp8E4M3, 40, 576},
      {"fp8_tensor_1536", F::Fp8E4M3, 13, 1536, 0, 0, false, false, true},
      {"fp8_channel_32", F::Fp8E4M3, 6, 32},
      {"fp8_dynamic_act_256", F::Fp8E4M3, 23, 256, 0, 0, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_static_act_96", F::Fp8E4M3, 7, 96, 0, 0, false, false, true, ActQuant::Fp8Static},
      {"fp8_block128_576", F::Fp8E4M3, 261, 576, 128, 128},  // 64 columns and 5 rows in the last blocks
      {"fp8_block128_dynamic", F::Fp8E4M3, 130, 256, 128, 128, false, false, false, ActQuant::Fp8Dynamic},
      {"fp8_block96x64", F::Fp8E4M3, 100, 160, 64, 96},
      {"fp8_block1x128", F::Fp8E4M3, 70, 320, 128, 1},  // a scale row a weight row, all different
      {"fp8_fused_runs", F::Fp8E4M3, 203, 320, 128, 1},  // the same as a fused weight holds it: runs (below)
  };
  const DecodeKernel through_fp8_linear = [](const float* x, int64_t m, const PackedWeight& w, float* y, int t) {
    return m < kA16Avx2MaxM && fp8_linear(x, m, w, y, t, PackedIsa::Avx2);
  };
  for (const Case& c : cs) {
    PackedWeight w = make(c, 37);
    if (c.name == "fp8_fused_runs") hold_as_fused_runs(w);
    const DecodeKernel kernel = c.act == ActQuant::None ? a16_avx2_decode : through_fp8_linear;
    check_fp8_decode_rows(c, w, kernel, kA16Avx2MaxM - 1);
    std::vector<float> xb(size_t(kA16Avx2MaxM * c.n_in), 1.0f), y(size_t(kA16Avx2MaxM * c.n_out));
    EXPECT_FALSE(a16_avx2_decode(xb.data(), kA16Avx2MaxM, w, y.data(), 1)) << c.name << ": m past the decode kernel's";
  }
  for (const Case& c : {Case{"fp8_odd_cols", F::Fp8E4M3, 8, 203}, Case{"fp8_block_48_cols", F::Fp8E4M3, 20, 96, 48, 16},
                        Case{"int8_channel", F::Int8, 8, 256}}) {
    const PackedWeight w = make(c, 5);
    std::vector<float> x = normal_rows(1, c.n_in), y(size_t(c.n_out));
    EXPECT_FALSE(a16_avx2_decode(x.data(), 1, w, y.data(), 1)) << c.name;
  }
}

// W8A8 Int8 held in Rows64 (oneDNN's AMX int8 order; gemm_int_w8a8_rows64.cpp): the same bits as the row-major
// weight at every m on AVX-512 — its decode kernel (groups of 16 rows 1-4 at a time, rows of x 1-4 at a time) below
// kW8a8OnednnMinM, oneDNN reading the layout as BA16a64b4a in chunks of rows of x from there (where this CPU's oneDNN
// runs it; else the decode kernel) — so a row of a batch keeps the bits it has alone; a thread's range starting
// inside a 64-row block (2 threads over 3 or 5 groups of 16); dynamic and static activations; and elsewhere (other
// ISAs) the reference, which reads the layout.
TEST(PackedKernels, W8a8Rows64MatchesRowsBitForBit) {
  if (packed_best_isa() != PackedIsa::Avx512 || !cpu_has_avx512vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  using F = WeightFormat;
  const ActQuant dyn = ActQuant::Int8Dynamic;
  const std::vector<Case> cs = {
      {"int8_64x64", F::Int8, 64, 64, 0, 0, false, false, false, dyn},
      {"int8_192x128", F::Int8, 192, 128, 0, 0, false, false, false, dyn},
      {"int8_320x576", F::Int8, 320, 576, 0, 0, false, false, false, dyn},
      {"int8_128x1536_static", F::Int8, 128, 1536, 0, 0, false, false, false, ActQuant::Int8Static},
  };
  for (const Case& c : cs) {
    const PackedWeight rows = make(c, 21);
    PackedWeight held = copy_packed_weight(rows);
    set_rows_layout(&held, RowsLayout::Rows64);
    check_packed_weight(held);
    const int64_t m_max = 130;
    const std::vector<float> x = normal_rows(m_max, c.n_in);
    for (int threads : {1, 2})
      for (int64_t m : {1, 2, 3, 4, 5, 8, 15, 16, 17, 64, 65, 130}) {
        std::vector<float> want(size_t(m * c.n_out)), got(want.size(), -1e30f);
        packed_linear_isa(x.data(), m, rows, want.data(), threads, PackedIsa::Avx512);
        packed_linear_isa(x.data(), m, held, got.data(), threads, PackedIsa::Avx512);
        for (int64_t k = 0; k < m * c.n_out; ++k)
          ASSERT_EQ(got[size_t(k)], want[size_t(k)])
              << c.name << " m " << m << " row " << k / c.n_out << " output " << k % c.n_out << " threads " << threads;
      }
    std::vector<float> ref(size_t(3 * c.n_out)), y(ref.size());
    packed_linear_reference(x.data(), 3, rows, ref.data(), 1);
    // the reference ran
    EXPECT_FALSE(packed_linear_isa(x.data(), 3, held, y.data(), 1, PackedIsa::Portable)) << c.name;
    EXPECT_EQ(y, ref) << c.name;
  }
}

// Weight (the load's choice, prepare_w8a8_weight): a W8A8 Int8 weight Rows64 takes goes into it exactly where the
// CPU has AMX int8 and oneDNN reads the layout by a JIT kernel, and then linear() gives the row-major weight's bits;
// one Rows64 refuses (n_out 96), relayout = false and a W8A16 weight stay in Rows.
TEST(PackedKernels, W8a8WeightTakesRows64WhereAmxInt8) {
  const bool amx = __builtin_cpu_supports("amx-int8") && cpu_has_avx512vnni() &&
                   packed_best_isa() == PackedIsa::Avx512 && onednn_s8_rows64_supported();
  const Case c{"int8_128x192", WeightFormat::Int8, 128, 192, 0, 0, false, false, false, ActQuant::Int8Dynamic};
  const PackedWeight p = make(c, 31);
  const Weight w(copy_packed_weight(p));
  EXPECT_EQ(w.packed().rows_layout, amx ? RowsLayout::Rows64 : RowsLayout::Rows);
  const std::vector<float> x = normal_rows(40, c.n_in);
  for (int64_t m : {1, 40}) {
    std::vector<float> want(size_t(m * c.n_out)), got(want.size());
    packed_linear(x.data(), m, p, want.data(), 1);
    linear(x.data(), m, w, got.data());
    EXPECT_EQ(got, want) << "m " << m;
  }
  EXPECT_EQ(Weight(copy_packed_weight(p), false).packed().rows_layout, RowsLayout::Rows);
  Case odd = c;
  odd.n_out = 96;
  EXPECT_EQ(Weight(make(odd, 32)).packed().rows_layout, RowsLayout::Rows);
  Case a16 = c;
  a16.act = ActQuant::None;
  EXPECT_EQ(Weight(make(a16, 33)).packed().rows_layout, RowsLayout::Rows);
}

// W8A8 with a row long enough that the VNNI kernel's unsigned-offset sum Σ (w + 128)·qx passes 2³¹ (w = 127,
// qx = 127 everywhere, 70 000 columns) while Σ w·qx still fits: the wrapping correction must give it exactly.
TEST(PackedKernels, W8a8LongRowOffsetSumWraps) {
  Case c{"int8_long", WeightFormat::Int8, 3, 70000, 0, 0, false, false, false, ActQuant::Int8Dynamic};
  PackedWeight w = make(c, 3);
  for (int64_t k = 0; k < w.data.size(); ++k) w.data.data()[k] = 127;
  std::vector<float> x(size_t(c.n_in), 0.25f), ref(3), y(3);
  packed_linear_reference(x.data(), 1, w, ref.data(), 1);
  for (PackedIsa isa : {PackedIsa::Portable, packed_best_isa()}) {
    packed_linear_isa(x.data(), 1, w, y.data(), 1, isa);
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(y[size_t(r)], ref[size_t(r)], 1e-5 * std::fabs(ref[size_t(r)])) << int(isa);
  }
}

// Int8 activation quantization (packed_kernels.h: quantize_s8) on every ISA here gives the scalar rule's bits,
// clamp(nearbyint(x / s), ±127): the vector paths' division-free quotient (Markstein) over wide exponent ranges,
// exact halves and their neighbours (where a 1-ulp quotient error would flip the rounding), ±0, ±inf, quotients
// that overflow, and scales inside and outside the division-free range.
TEST(PackedKernels, Int8ActivationQuantizationMatchesScalarRule) {
  std::vector<PackedIsa> isas{PackedIsa::Portable};
  if (cpu_has_avx2()) isas.push_back(PackedIsa::Avx2);
  if (packed_best_isa() == PackedIsa::Avx512) isas.push_back(PackedIsa::Avx512);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> expo(-40.0f, 40.0f), unit(-1.0f, 1.0f);
  for (float s : {1.0f, 0.37f, 3.0e-3f, 0.0123456f, 7.7f, 1.5e-37f, 1e-38f, 5e36f, 1e38f}) {
    std::vector<float> x;
    for (int i = 0; i < 20000; ++i) x.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(expo(rng)));
    for (int i = 0; i < 20000; ++i) x.push_back(unit(rng) * 127.0f * s);
    for (int k = -130; k <= 130; ++k) {
      const float t = (float(k) + 0.5f) * s;
      x.insert(x.end(), {t, std::nextafter(t, INFINITY), std::nextafter(t, -INFINITY), float(k) * s});
    }
    x.insert(x.end(), {0.0f, -0.0f, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-45f});
    x.resize(x.size() + 5, 0.5f * s);  // a tail of 5 after the whole vectors
    std::vector<int8_t> want(x.size()), got(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = int8_t(std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f));
    for (PackedIsa isa : isas) {
      std::fill(got.begin(), got.end(), int8_t(99));
      quantize_s8(x.data(), int64_t(x.size()), s, got.data(), isa);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(int(got[i]), int(want[i])) << "x " << x[i] << " s " << s << " isa " << int(isa);
    }
  }
}

// FP8 activation fake quantization (packed_linear.h; on AVX2 a vector path) gives the scalar rule's bits:
// E4M3(x / s) decoded × s, over values from the subnormal range to past 448 (saturating), both signs, and zeros.
TEST(PackedKernels, Fp8ActivationQuantizationMatchesScalarRule) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> expo(-14.0f, 11.0f);
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * std::exp2(expo(rng));
  x[5] = 0.0f;
  x[6] = -0.0f;
  x[7] = 448.0f;
  x[8] = 464.0f;  // halfway to 480: saturates
  x[9] = std::numeric_limits<float>::quiet_NaN();  // stays NaN (a model bug must not turn into 448)
  x[10] = std::numeric_limits<float>::infinity();  // saturates, as the scalar rule
  x[11] = -std::numeric_limits<float>::infinity();
  for (float s : {1.0f, 0.37f, 3.0e-3f}) {
    std::vector<float> out(x.size());
    fake_quantize_activations(x.data(), 1, int64_t(x.size()), ActQuant::Fp8Static, s, 0, out.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / s)) * s;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i])) << "x " << x[i] << " s " << s << " got " << out[i];
        continue;
      }
      ASSERT_EQ(std::memcmp(&want, &out[i], 4), 0) << "x " << x[i] << " s " << s << " got " << out[i] << " want " << want;
    }
  }
}

// Which 4-bit decode kernel runs first on AVX-512: the vendor rule and TPSERVE_A16_KERNEL's override.
TEST(PackedKernels, PreferBf16A16Rule) {
  EXPECT_TRUE(prefer_bf16_a16_rule(nullptr, true, false));   // AMD with AVX512-BF16
  EXPECT_FALSE(prefer_bf16_a16_rule(nullptr, true, true));   // Intel
  EXPECT_FALSE(prefer_bf16_a16_rule(nullptr, false, false)); // no AVX512-BF16
  EXPECT_TRUE(prefer_bf16_a16_rule("auto", true, false));
  EXPECT_FALSE(prefer_bf16_a16_rule("vnni", true, false));
  EXPECT_TRUE(prefer_bf16_a16_rule("bf16", true, true));
  EXPECT_THROW(prefer_bf16_a16_rule("bf16", false, false), InputError);
  try {
    prefer_bf16_a16_rule("avx", true, false);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("TPSERVE_A16_KERNEL: 'avx'"), std::string::npos) << e.what();
  }
}

// The dispatch reaches a kernel for each family on this CPU's best ISA.
TEST(PackedKernels, DispatchUsesTheKernels) {
  const PackedWeight w = make({"int4", WeightFormat::Int4, 8, 128, 64}, 1);
  std::vector<float> x(128, 0.5f), y(8), ref(8);
  EXPECT_TRUE(packed_linear_isa(x.data(), 1, w, y.data(), 1, packed_best_isa()));
  packed_linear(x.data(), 1, w, ref.data(), 1);
  EXPECT_EQ(y, ref);
}

}  // namespace
}  // namespace tp::cpu::detail
