// Synthetic models: the requested shapes, deterministic by seed, loadable and runnable; bad specs refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"

namespace tp {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SynthSpec small(uint64_t seed) {
  SynthSpec s;
  s.n_layers = 2;
  s.hidden = 64;
  s.n_heads = 8;
  s.n_kv_heads = 4;
  s.intermediate = 96;
  s.vocab = 300;
  s.seed = seed;
  s.dtype = DType::BF16;
  return s;
}

TEST(Synth, ShapesAndDeterminism) {
  const std::string a = testing::TempDir() + "/synth_a", b = testing::TempDir() + "/synth_b",
                    c = testing::TempDir() + "/synth_c";
  write_synthetic_model(a, small(5));
  write_synthetic_model(b, small(5));
  write_synthetic_model(c, small(6));
  EXPECT_EQ(slurp(a + "/model.safetensors"), slurp(b + "/model.safetensors"));
  EXPECT_NE(slurp(a + "/model.safetensors"), slurp(c + "/model.safetensors"));

  auto f = open_model(a);
  const ModelConfig& cfg = f->config();
  EXPECT_EQ(cfg.n_layers, 2);
  EXPECT_EQ(cfg.hidden, 64);
  EXPECT_EQ(cfg.n_heads, 8);
  EXPECT_EQ(cfg.n_kv_heads, 4);
  EXPECT_EQ(cfg.head_dim, 8);
  EXPECT_EQ(cfg.intermediate, 96);
  EXPECT_EQ(cfg.vocab, 300);
  EXPECT_EQ(f->require("blk.1.attn_k.weight", {32, 64}).dtype, DType::BF16);
  EXPECT_EQ(f->require("blk.0.ffn_norm.weight", {64}).dtype, DType::F32);
  ASSERT_NE(f->find("output.weight"), nullptr);
  EXPECT_EQ(f->tokenizer().tokens.size(), 300u);

  // well scaled: the weights' standard deviation is the stated 0.02
  const TensorView& q = f->require("blk.0.attn_q.weight", {64, 64});
  std::vector<float> v(size_t(q.n_elems()));
  dequantize_row(q.dtype, q.data, v.data(), q.n_elems());
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  EXPECT_NEAR(std::sqrt(ss / double(v.size())), 0.02, 0.002);

  LlamaModel m(*f, DType::F32);
  LocalRunner run(m, 16);
  const auto& logits = run.seq.feed({1, 2, 3, 4});
  ASSERT_EQ(logits.size(), 300u);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(Synth, BadSpecsNameTheField) {
  auto err = [](SynthSpec s) -> std::string {
    try {
      write_synthetic_model(testing::TempDir() + "/synth_bad", s);
    } catch (const InputError& e) {
      return e.what();
    }
    return "<no error>";
  };
  SynthSpec s = small(1);
  s.n_kv_heads = 3;
  EXPECT_NE(err(s).find("--kv-heads: must divide --heads 8"), std::string::npos) << err(s);
  s = small(1);
  s.n_heads = 7;
  EXPECT_NE(err(s).find("--heads: must divide --hidden 64"), std::string::npos) << err(s);
  s = small(1);
  s.vocab = 100;
  EXPECT_NE(err(s).find("--vocab: must be >= 257"), std::string::npos) << err(s);
}

}  // namespace
}  // namespace tp
