// quantize -> load -> run round trip on the real model (SmolLM2-135M-Instruct, its Q4_1 GGUF dequantized as the
// "unquantized" base): our compressed-tensors output loads with our loader, and
//   w8a16 RTN: greedy tokens agree with the base's for the first 8 tokens of 3 prompts (teacher-forced on the
//     base's tokens; a differing argmax is allowed only where the base's top-2 logit gap is under 0.5, a near
//     tie), and the mean NLL over the held-out text is within 0.02 nats of the base's;
//   w4a16 group 64 RTN and GPTQ, in order and with act-order "weight" (256 calibration tokens): mean NLL within
//     0.6 nats of the base's (re-quantizing
//     weights that already sit on a Q4_1 grid onto another 4-bit grid costs much: llm-compressor's own W4A16 g64
//     goes from perplexity 14.0 to 20.3, +0.37 nats), and GPTQ's below RTN's.
// Measured on the dev machine: NLL base 2.876, w8a16 2.870 (greedy 24 / 24 agree), w4a16 g64 RTN 3.308
// (+0.43), GPTQ 3.241 (+0.36); with the current damping 0.1: GPTQ 3.2587, act-order "weight" 3.2422. CPU time: about 30 s (w8a16) and 85 s (w4a16: GPTQ of 30 layers ≈ 37 s).
// Held-out text: /usr/share/common-licenses/Apache-2.0, its first 256 tokens (calibration: GPL-3, the default
// of `tpserve quantize`). NLL = −mean log p(token_i | tokens_<i) over tokens 1..255 (one sequence).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "coordinator/tokenizer.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/quantize.h"
#include "rank/sequence_runner.h"
#include "tests/util/top2_gap.h"

namespace tp {
namespace {

// Scratch directory of this process (ctest runs each test in its own process, maybe in parallel), removed at
// exit.
struct Scratch {
  Scratch() : dir(testing::TempDir() + "/tpserve_quantize_" + std::to_string(getpid())) {
    std::filesystem::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
};
const std::string& scratch() {
  static const Scratch s;
  return s.dir;
}

const std::string kModel = std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Measured {
  double nll = 0;
  std::vector<std::vector<float>> step_logits;  // per prompt, per step: logits after the base's tokens
};

class QuantizeReal : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " missing (launch/setup makes it)";
    file_ = open_model(kModel).release();
    const Tokenizer tok(file_->tokenizer());
    text_ = tok.encode(slurp("/usr/share/common-licenses/Apache-2.0"), false, false);
    text_.resize(256);
    calib_ = tok.encode(slurp("/usr/share/common-licenses/GPL-3"), false, false);
    calib_.resize(256);
    for (const char* p : {"The capital of France is", "def fibonacci(n):", "Water boils at"})
      prompts_.push_back(tok.encode(p, false, false));
    // The base: greedy continuations and their logits.
    base_ = new Measured(measure(*file_, true));
  }
  static void TearDownTestSuite() {
    delete base_;
    delete file_;
  }

  // Mean NLL over text_ and, per prompt, the logits of 8 greedy steps (the base's tokens when !greedy_self).
  static Measured measure(const ModelFile& f, bool is_base) {
    WeightLoadOptions lo;
    lo.runtime = DType::F32;
    lo.keep_quantized = false;
    LlamaModel m(f, lo);
    Measured r;
    {
      LocalRunner run(m, 272);
      const std::vector<TokenLogprobs> lp = run.seq.feed_scored(text_, 1);
      for (size_t i = 1; i < lp.size(); ++i) r.nll -= lp[i].logprob;
      r.nll /= double(lp.size() - 1);
    }
    for (size_t p = 0; p < prompts_.size(); ++p) {
      LocalRunner run(m, 64);
      std::vector<float> logits = run.seq.feed(prompts_[p]);
      if (is_base) base_tokens_.emplace_back();
      for (int k = 0; k < 8; ++k) {
        r.step_logits.push_back(logits);
        if (is_base) base_tokens_[p].push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        logits = run.seq.feed({base_tokens_[p][size_t(k)]});
      }
    }
    return r;
  }

  static Measured quantize_and_measure(const QuantizeOptions& o, const std::string& name) {
    const std::string out = scratch() + "/smollm2_" + name;
    quantize_model(*file_, out, o);
    return measure(*open_model(out), false);
  }

  static inline ModelFile* file_ = nullptr;
  static inline std::vector<int32_t> text_, calib_;
  static inline std::vector<std::vector<int32_t>> prompts_, base_tokens_;
  static inline Measured* base_ = nullptr;
};

void expect_greedy_near_base(const Measured& q, const Measured& base, const char* name) {
  ASSERT_EQ(q.step_logits.size(), base.step_logits.size());
  int agree = 0;
  for (size_t s = 0; s < q.step_logits.size(); ++s) {
    const auto& b = base.step_logits[s];
    const auto& l = q.step_logits[s];
    const auto am = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    if (am(b) == am(l)) {
      ++agree;
    } else {
      EXPECT_LT(test::top2_gap(b), 0.5f) << "step " << s << ": argmax differs and the base's top-2 gap is not a near tie";
    }
  }
  std::printf("%s greedy agreement %d / %zu\n", name, agree, q.step_logits.size());
}

TEST_F(QuantizeReal, W8A16GreedyAndNll) {
  QuantizeOptions o;
  o.scheme = QuantScheme::W8A16;
  const Measured q = quantize_and_measure(o, "w8a16");
  std::printf("NLL base %.4f w8a16 %.4f\n", base_->nll, q.nll);
  EXPECT_LT(std::fabs(q.nll - base_->nll), 0.02);
  expect_greedy_near_base(q, *base_, "w8a16");
}

// The lm_head quantized too (--ignore ''): SmolLM2 ties it to the embedding, so the output unties them — a dense
// embedding and lm_head.weight_packed — and keeps the W8A16 bars [measured NLL 2.8733 (base 2.8763), greedy 22 / 24,
// the other two near ties].
TEST_F(QuantizeReal, W8A16WithTheLmHead) {
  QuantizeOptions o;
  o.scheme = QuantScheme::W8A16;
  o.ignore = {};
  const Measured q = quantize_and_measure(o, "w8a16_lm_head");
  auto f = open_model(scratch() + "/smollm2_w8a16_lm_head");
  EXPECT_FALSE(f->config().tied_embeddings);
  EXPECT_NE(f->find("output.weight_packed"), nullptr);
  EXPECT_NE(f->find("token_embd.weight"), nullptr);
  std::printf("NLL base %.4f w8a16 with the lm_head %.4f\n", base_->nll, q.nll);
  EXPECT_LT(std::fabs(q.nll - base_->nll), 0.02);
  expect_greedy_near_base(q, *base_, "w8a16 with the lm_head");
}

TEST_F(QuantizeReal, W4A16RtnAndGptqNll) {
  QuantizeOptions o;
  o.scheme = QuantScheme::W4A16;
  o.group_size = 64;
  const Measured rtn = quantize_and_measure(o, "w4a16_rtn");
  o.method = QuantMethod::Gptq;
  o.calib_tokens = calib_;
  o.seq_len = 256;
  const Measured gptq = quantize_and_measure(o, "w4a16_gptq");
  o.act_order = ActOrder::Weight;  // the CLI's default for GPTQ
  const Measured gptq_ao = quantize_and_measure(o, "w4a16_gptq_act_order");
  std::printf("NLL base %.4f w4a16 g64 rtn %.4f gptq %.4f gptq act-order weight %.4f\n", base_->nll, rtn.nll, gptq.nll,
              gptq_ao.nll);
  EXPECT_LT(rtn.nll - base_->nll, 0.6);
  EXPECT_LT(gptq.nll - base_->nll, 0.6);
  // GPTQ with act-order (the CLI's default) must beat RTN: Zen 4 and Zen 3 alike [measured 3.137 vs 3.308 on a
  // Zen 3 core]. Without act-order, on this base (already on a 4-bit grid) and 256 calibration tokens, its gain
  // depends on the calibration forward's float order: 3.241 vs 3.308 on Zen 4 (AVX-512), 3.318 vs 3.308 on Zen 3
  // (AVX2) -> only "no worse than RTN beyond 0.03".
  EXPECT_LT(gptq.nll, rtn.nll + 0.03);
  EXPECT_LT(gptq_ao.nll, rtn.nll);
}

}  // namespace
}  // namespace tp
