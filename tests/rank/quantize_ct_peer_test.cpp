// Issue 14, deliverable 2: transformers + compressed-tensors load OUR `tpserve quantize` output, and their logits
// equal our loader's on the same files. The references (tests/peers/fixtures/tpserve_quantized/reference.json)
// were made by tests/peers/make_quantize_ct_fixtures.sh (its header has the exact commands): `tpserve synth`
// (2 layers, hidden 256, 8 heads, 4 KV heads, intermediate 512, vocab 512, seed 21, BF16), `tpserve quantize`
// per case below (RTN; GPTQ act-order on 1,024 byte tokens of GPL-3), then transformers 5.17 + compressed-tensors
// 0.19 (F32, CPU) on each directory. The GPTQ case's bytes depend on the F32 GEMMs of the Hessians (oneDNN, 1
// thread here and in the script): on a CPU where oneDNN sums in another order its CRC may differ — then make the
// fixture again there (the message says so).
// This test remakes the same directories in-process (rank/synth.h, rank/quantize.h with the CLI's defaults)
// and checks, per case:
//   * the files are the fixture's: CRC-32 of model.safetensors and config.json equal the recorded ones (so the
//     references belong to exactly these bytes);
//   * our loader (tp 1, F32 runtime) gives transformers' logits after each of 4 prompts within the case's
//     bound: max |ours − theirs| ≤ tol · max |theirs| (bounds and measured figures in kCases); for W8A8 also
//     against transformers with vLLM's int8 activation rule ("logits_vllm_rule", the script says how), which
//     is ours;
//   * weight-only cases: the quantization itself moved transformers' logits by 100× the bound or more (so a
//     loader that ignored the quantization — e.g. a dense fallback — could not pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "rank/ct_writer.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/quantize.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"
#include "coordinator/tokenizer.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using json = nlohmann::json;

uint32_t crc32_of_file(const std::string& path) {
  EXPECT_TRUE(std::filesystem::exists(path)) << "cannot read " << path;
  const std::vector<uint8_t> bytes = test::read_bytes(path);
  return test::crc32(bytes.data(), bytes.size());
}

std::string hex8(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

struct Case {
  const char* name;
  const char* flags;  // the peer script's `tpserve quantize` flags (checked against the fixture)
  QuantScheme scheme;
  int64_t group;      // QuantizeOptions::group_size
  bool gptq_act_order;  // --method gptq --act-order, calibration as in kCalib*
  // Bounds on max |ours − transformers'| / max |transformers'| over the 512 logits after each prompt: against
  // "logits", and (int8 activations) against "logits_vllm_rule".
  double tol, tol_vllm_rule;
  // GPTQ only: the bound against "logits" when our output is not the fixture's file (0: it must be). GPTQ's
  // result follows the float sums of the calibration forward and the Hessian, whose order is the CPU's vector
  // width (the fixture was made on an AVX-512 CPU). With act-order the error feedback carries a last-bit
  // difference into other codes: on a Zen 3 core (AVX2 only) our GPTQ output, read by us, is 0.148 from
  // transformers' logits on the fixture's file, whose quantization moved them by 0.281 -> 0.2: a weak check (it
  // catches an output as far from the fixture's as the quantization's whole effect), not the 1e-5 of the same file.
  double tol_other_cpu = 0;
  // Activation-quantized cases: the case with the same weights (CRC) and no activation quantization; transformers'
  // logits must differ from its by ≥ 5 × tol after each prompt (so a loader that skipped the activation
  // quantization could not pass).
  const char* act_partner = nullptr;
  const char* base = "base";       // the synthetic model quantized: "base", or "base_tied" (--tied: no lm_head.weight)
  const char* ignore = "lm_head";  // QuantizeOptions::ignore (--ignore): another module, and the lm_head quantized
};

// Weight-only cases: both sides multiply the same dequantized weights (BF16 scales), only the summation order
// differs [measured <= 7.1e-7] -> 1e-5. W8A8 (per-token dynamic int8 activations): compressed-tensors' fake
// quantization takes scale max|x| / 127.5 into [-128, 127], ours (as vLLM's kernels) max|x| / 127 into
// [-127, 127]; the grids differ by 0.4%, so most activations round differently and the two results differ by
// about √2 × the activation rounding's own effect on the logits (transformers' W8A8 vs its W8A16, whose
// weights are the same: 0.010–0.014) [measured 0.0181] -> 0.03.
// FP8 activations (fp8-dynamic per token, fp8-block per 128 columns): both sides round x to E4M3 by the same rule
// (max|x| / 448), so the results agree unless a summation-order difference puts one activation on the other side of
// a rounding boundary [measured 4.95e-5 (fp8_dynamic), 6.6e-7 (fp8_block) on Zen 3] -> 5e-3, 100× those and
// 7-14× below what the activation quantization itself moves (fp8_dynamic against fp8_weight, the same bytes:
// 0.037–0.071). NVFP4: compressed-tensors rounds the dequantized weights (e2m1 · e4m3 / global) to BF16, we keep F32
// (as in ct_fidelity_test) [measured 0.0042] -> 1e-2. MXFP4 (e2m1 · 2^k) is exact in BF16 [2.3e-6] -> 1e-5. The
// quantization must move transformers' logits by 100 × the bound (10 × for bounds above 1e-5), W8A8 excepted. With
// vLLM's rule on their side too the difference shrinks only a little [measured 0.0082–0.0138 over the 4 prompts] ->
// 0.02: something else in the int8 activation path (ours: kernels/cpu/gemm_int_w8a8.cpp) still rounds differently from
// compressed-tensors' fake quantization — not explained yet (the weights themselves are checked exactly by the CRC and
// by the weight-only cases, whose packing is the same int8 per-channel grid).
const Case kCases[] = {
    {"base", "", QuantScheme::W8A16, 0, false, 1e-5, 0},
    {"w4a16_g64", "--scheme w4a16 --group-size 64", QuantScheme::W4A16, 64, false, 1e-5, 0},
    {"w4a16_channel", "--scheme w4a16 --group-size 0", QuantScheme::W4A16, 0, false, 1e-5, 0},
    {"w4a16_asym_g64", "--scheme w4a16-asym --group-size 64", QuantScheme::W4A16Asym, 64, false, 1e-5, 0},
    {"w8a16", "--scheme w8a16", QuantScheme::W8A16, -1, false, 1e-5, 0},
    {"w8a8_int8", "--scheme w8a8-int8", QuantScheme::W8A8Int8, -1, false, 0.03, 0.02},
    {"w3a16_g64", "--scheme w3a16 --group-size 64", QuantScheme::W3A16, 64, false, 1e-5, 0},
    {"w4a16_g64_gptq_actorder",
     "--scheme w4a16 --group-size 64 --method gptq --act-order --calib /usr/share/common-licenses/GPL-3 "
     "--calib-tokens 1024 --calib-seq-len 128",
     QuantScheme::W4A16, 64, true, 1e-5, 0, 0.2},
    {"fp8_dynamic", "--scheme fp8-dynamic", QuantScheme::Fp8Dynamic, -1, false, 5e-3, 0, 0, "fp8_weight"},
    {"fp8_weight", "--scheme fp8-weight", QuantScheme::Fp8Weight, -1, false, 1e-5, 0},
    {"fp8_block", "--scheme fp8-block", QuantScheme::Fp8Block, -1, false, 5e-3, 0},
    {"nvfp4", "--scheme nvfp4", QuantScheme::Nvfp4, -1, false, 1e-2, 0},
    {"mxfp4", "--scheme mxfp4", QuantScheme::Mxfp4, -1, false, 1e-5, 0},
    {"base_tied", "", QuantScheme::W8A16, 0, false, 1e-5, 0, 0, nullptr, "base_tied"},
    // The lm_head quantized too (one other linear left dense); from the tied model, the lm_head untied into its own
    // quantized tensor beside the dense embedding.
    {"w4a16_g64_lm_head", "--scheme w4a16 --group-size 64 --ignore model.layers.1.mlp.down_proj", QuantScheme::W4A16,
     64, false, 1e-5, 0, 0, nullptr, "base", "model.layers.1.mlp.down_proj"},
    {"w8a16_tied_lm_head", "--scheme w8a16 --ignore model.layers.0.self_attn.o_proj", QuantScheme::W8A16, -1, false,
     1e-5, 0, 0, nullptr, "base_tied", "model.layers.0.self_attn.o_proj"},
};
const char* const kCalibText = "/usr/share/common-licenses/GPL-3";
constexpr int64_t kCalibTokens = 1024, kCalibSeqLen = 128;

std::vector<float> logits_after(LlamaModel& m, const std::vector<int32_t>& prompt) {
  LocalRunner run(m, int64_t(prompt.size()) + 1);
  return run.seq.feed(prompt);
}

TEST(QuantizeCtPeer, TransformersLoadsOurOutputWithOurLogits) {
  const std::string fx = std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/tpserve_quantized/reference.json";
  std::ifstream in(fx);
  ASSERT_TRUE(in.good()) << "missing " << fx << " (tests/peers/make_quantize_ct_fixtures.sh)";
  const json ref = json::parse(in);
  const auto prompts = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const json& cases = ref.at("cases");
  cpu::set_num_threads(1);

  const test::TempDir scratch;
  SynthSpec s;
  s.n_layers = 2;
  s.hidden = 256;
  s.n_heads = 8;
  s.n_kv_heads = 4;
  s.intermediate = 512;
  s.vocab = 512;
  s.seed = 21;
  s.dtype = DType::BF16;
  write_synthetic_model(scratch.path() + "/base", s);
  s.tied = true;
  write_synthetic_model(scratch.path() + "/base_tied", s);

  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(cases.contains(c.name)) << "the fixture has no case " << c.name;
    const json& r = cases.at(c.name);
    EXPECT_EQ(r.at("flags").get<std::string>(), c.flags) << "the peer script and this test disagree on the flags";
    const std::string base = scratch.path() + "/" + c.base;
    const auto base_theirs = cases.at(c.base).at("logits").get<std::vector<std::vector<float>>>();
    const bool is_base = std::string(c.name) == c.base;
    std::string dir = base;
    if (!is_base) {
      auto base_file = open_model(base);
      dir = scratch.path() + "/" + c.name;
      QuantizeOptions o;  // the CLI's defaults
      o.ignore = {c.ignore};
      o.scheme = c.scheme;
      o.method = QuantMethod::Rtn;
      o.group_size = c.group;
      o.dtype = DType::BF16;
      if (c.gptq_act_order) {
        std::ifstream t(kCalibText, std::ios::binary);
        ASSERT_TRUE(t.good()) << "cannot read " << kCalibText;
        const std::string text((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
        std::vector<int32_t> ids = Tokenizer(base_file->tokenizer()).encode(text, false, false);
        ASSERT_GE(int64_t(ids.size()), kCalibTokens);
        ids.resize(size_t(kCalibTokens));
        o.method = QuantMethod::Gptq;
        o.act_order = ActOrder::Weight;
        o.calib_tokens = std::move(ids);
        o.seq_len = kCalibSeqLen;
      }
      quantize_model(*base_file, dir, o);
    }
    ASSERT_EQ(hex8(crc32_of_file(dir + "/config.json")), r.at("crc32").at("config.json").get<std::string>())
        << "config.json is not the file the references were made from (regenerate the fixture if the output "
           "format changed on purpose)";
    const bool same_file =
        hex8(crc32_of_file(dir + "/model.safetensors")) == r.at("crc32").at("model.safetensors").get<std::string>();
    if (c.tol_other_cpu == 0) {
      ASSERT_TRUE(same_file) << "model.safetensors is not the file the references were made from (regenerate the "
                                "fixture if the output format changed on purpose)";
    }
    const double tol = same_file ? c.tol : c.tol_other_cpu;
    if (!same_file)
      std::printf("[quantize-ct-peer] %s: model.safetensors differs from the fixture's (GPTQ on another CPU's "
                  "float order): bound %.0e instead of %.0e\n", c.name, tol, c.tol);
    auto file = open_model(dir);
    LlamaModel model(*file, DType::F32, nullptr);
    const auto theirs = r.at("logits").get<std::vector<std::vector<float>>>();
    ASSERT_EQ(theirs.size(), prompts.size());
    const bool vllm_rule = c.tol_vllm_rule > 0;
    ASSERT_EQ(r.contains("logits_vllm_rule"), vllm_rule);
    const auto theirs_vr =
        vllm_rule ? r.at("logits_vllm_rule").get<std::vector<std::vector<float>>>() : std::vector<std::vector<float>>{};
    double worst = 0, worst_vr = 0, moved = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::vector<float> ours = logits_after(model, prompts[p]);
      ASSERT_EQ(ours.size(), theirs[p].size());
      double scale = 0, diff = 0, diff_vr = 0, q_shift = 0;
      for (size_t v = 0; v < ours.size(); ++v) {
        scale = std::max(scale, double(std::fabs(theirs[p][v])));
        diff = std::max(diff, double(std::fabs(ours[v] - theirs[p][v])));
        if (vllm_rule) diff_vr = std::max(diff_vr, double(std::fabs(ours[v] - theirs_vr[p][v])));
        q_shift = std::max(q_shift, double(std::fabs(theirs[p][v] - base_theirs[p][v])));
      }
      EXPECT_LE(diff / scale, tol) << "prompt " << p << ": max |ours - transformers'| " << diff << ", max |logit| "
                                     << scale;
      if (vllm_rule) {
        EXPECT_LE(diff_vr / scale, c.tol_vllm_rule) << "prompt " << p << ": max |ours - transformers' (vLLM's int8 "
                                                    << "rule)| " << diff_vr << ", max |logit| " << scale;
      }
      if (!is_base && !vllm_rule) {  // (W8A8's bound is as large as its whole effect)
        EXPECT_GT(q_shift / scale, (c.tol <= 1e-5 ? 100 : 10) * c.tol)
            << "prompt " << p << ": the quantization barely moved the logits";
      }
      if (c.act_partner) {
        const json& partner = cases.at(c.act_partner);
        EXPECT_EQ(partner.at("crc32").at("model.safetensors"), r.at("crc32").at("model.safetensors"))
            << c.act_partner << " does not hold the same weights";
        const auto pl = partner.at("logits").get<std::vector<std::vector<float>>>()[p];
        double act_effect = 0;
        for (size_t v = 0; v < ours.size(); ++v)
          act_effect = std::max(act_effect, double(std::fabs(theirs[p][v] - pl[v])));
        EXPECT_GT(act_effect / scale, 5 * c.tol)
            << "prompt " << p << ": the activation quantization barely moved the logits";
      }
      worst = std::max(worst, diff / scale);
      worst_vr = std::max(worst_vr, diff_vr / scale);
      moved = std::max(moved, q_shift / scale);
    }
    std::printf("[quantize-ct-peer] %-16s %-16s max|ours - transformers'| / max|logit| %.3g (bound %.0e)", c.name,
                r.at("format").is_null() ? "(dense)" : r.at("format").get<std::string>().c_str(), worst, tol);
    if (vllm_rule) std::printf(", with vLLM's int8 rule %.3g (bound %.0e)", worst_vr, c.tol_vllm_rule);
    std::printf("; the quantization moved transformers' logits by %.3g\n", moved);
  }
}

}  // namespace
}  // namespace tp
