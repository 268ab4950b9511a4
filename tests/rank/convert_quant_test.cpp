// `tpserve convert --to gguf-q8_0 | q4_0 | q4_1 | q4_k | q6_k | q4_k_m` on the real model: every matrix gets
// llama-quantize's type for its mix (rank/gguf_quant_mix.h; the types themselves are checked against
// llama-quantize's files by tests/rank/quant_peer_test.cpp), its rows dequantize close to the source, and the
// file loads with the blocks kept and runs: the first-position logits of a 13-token prompt against the source
// (the Q4_1 model) dequantized to F32. Max-abs-diff over all 49152 logits, measured: Q4_1 → Q4_1 1.01 (the
// requantization is lossless: tensor NMSE 0, so this is the activations' Q8_1 rounding alone), Q8_0 1.24,
// Q6_K 1.84, Q4_K_M 4.6, Q4_K 6.4, Q4_0 8.4 (requantizing 4-bit to another 4-bit grid); bounds 1.5x those.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "rank/convert.h"
#include "rank/gguf_quant_mix.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sequence_runner.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

struct Case {
  const char* to;
  ConvertFormat fmt;
  GgufQuantMix mix;
  double row_nmse;   // per-tensor Σ(deq − src)² / Σ src², bound (measured: Q8_0 4.3e-5, Q4_0 1.1e-2, Q4_1 0,
                     // Q4_K 3.1e-3, Q6_K 3.4e-4, Q4_K_M 2.6e-3)
  float logit_tol;   // first-position logits max-abs-diff vs the F32 source
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.to; }

class ConvertQuantized : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertQuantized, TypesRowsAndAModelThatRuns) {
  TP_REQUIRE_REAL_MODEL();
  const Case& c = GetParam();
  TempDir dir;
  const std::string out = dir.file("q.gguf");
  convert_model(test::real_model_path(), out, c.fmt);
  auto src = open_model(test::real_model_path());
  auto q = open_model(out);
  const ModelConfig& cfg = src->config();
  double worst = 0;
  for (const TensorView& t : q->tensors()) {
    const TensorView* s = src->find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(t.shape, s->shape) << t.name;
    if (t.shape.size() < 2) {
      EXPECT_EQ(t.dtype, DType::F32) << t.name;
      continue;
    }
    const bool output = t.name == "output.weight" || (!src->find("output.weight") && t.name == "token_embd.weight");
    EXPECT_EQ(t.dtype, gguf_mix_type(c.mix, t.name, t.shape.back(), cfg.n_layers, output)) << t.name;
    const int64_t n = t.shape.back(), rows = t.n_elems() / n;
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    double err = 0, ref = 0;
    for (int64_t r = 0; r < rows; r += 7) {  // every 7th row
      dequantize_row(t.dtype, t.data + r * dtype_row_bytes(t.dtype, n), a.data(), n);
      dequantize_row(s->dtype, s->data + r * dtype_row_bytes(s->dtype, n), b.data(), n);
      for (int64_t k = 0; k < n; ++k) {
        err += (double(a[size_t(k)]) - b[size_t(k)]) * (double(a[size_t(k)]) - b[size_t(k)]);
        ref += double(b[size_t(k)]) * b[size_t(k)];
      }
    }
    worst = std::max(worst, err / ref);
    EXPECT_LE(err / ref, c.row_nmse) << t.name << " " << dtype_name(t.dtype);
  }

  const std::vector<int32_t> prompt = {504, 3458, 282, 4649, 314, 253, 2630, 30, 1050, 9874, 28, 12, 3};
  LlamaModel ref_model(*src, WeightLoadOptions{DType::F32, false});
  LlamaModel q_model(*q, WeightLoadOptions{DType::F32, true});
  LocalRunner ra(ref_model, 32), rb(q_model, 32);
  const std::vector<float>& la = ra.seq.feed(prompt);
  const std::vector<float>& lb = rb.seq.feed(prompt);
  float diff = 0;
  for (size_t i = 0; i < la.size(); ++i) diff = std::max(diff, std::fabs(la[i] - lb[i]));
  std::printf("[convert] %s: worst tensor NMSE %.2e (bound %.1e), first logits max-abs-diff vs F32 %.3f (tol %.2f), "
              "resident %.1f MiB\n",
              c.to, worst, c.row_nmse, diff, c.logit_tol, double(q_model.resident_weight_bytes()) / (1 << 20));
  EXPECT_LE(diff, c.logit_tol);
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, ConvertQuantized,
    ::testing::Values(Case{"gguf-q8_0", ConvertFormat::GgufQ8_0, GgufQuantMix::Q8_0, 1e-4, 1.9f},
                      Case{"gguf-q4_0", ConvertFormat::GgufQ4_0, GgufQuantMix::Q4_0, 2e-2, 12.6f},
                      Case{"gguf-q4_1", ConvertFormat::GgufQ4_1, GgufQuantMix::Q4_1, 1e-12, 1.5f},
                      Case{"gguf-q4_k", ConvertFormat::GgufQ4_K, GgufQuantMix::Q4_K, 6e-3, 9.6f},
                      Case{"gguf-q6_k", ConvertFormat::GgufQ6_K, GgufQuantMix::Q6_K, 1e-3, 2.8f},
                      Case{"gguf-q4_k_m", ConvertFormat::GgufQ4_K_M, GgufQuantMix::Q4_K_M, 6e-3, 6.9f}),
    [](const auto& info) {
      std::string s = info.param.to;
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

}  // namespace
}  // namespace tp
