// convert_model on the real model: GGUF Q4_1 -> F32/BF16 GGUF and -> HF (F32), HF -> GGUF back; every tensor
// is compared value by value against the dequantized original (Q/K through the row permutation).
#include "rank/convert.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "rank/gguf_model.h"
#include "rank/model_file.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

std::vector<float> dequant_row(const TensorView& t, int64_t r) {
  const int64_t len = t.shape.back();
  std::vector<float> out(static_cast<size_t>(len));
  dequantize_row(t.dtype, t.data + r * dtype_row_bytes(t.dtype, len), out.data(), len);
  return out;
}

void expect_tokenizer_eq(const TokenizerData& a, const TokenizerData& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_TRUE(a.tokens == b.tokens);
  EXPECT_TRUE(a.token_types == b.token_types);
  EXPECT_TRUE(a.merges == b.merges);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.unk_id, b.unk_id);
  EXPECT_EQ(a.pad_id, b.pad_id);
  EXPECT_EQ(a.add_bos, b.add_bos);
  EXPECT_EQ(a.add_eos, b.add_eos);
  EXPECT_EQ(a.chat_template, b.chat_template);
}

void expect_config_eq(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate, b.intermediate);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_context, b.max_context);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
}

// Every tensor of `out` equals the dequantized tensor of `in` (converted by `round`), with Q/K rows taken
// through `row_map` when given.
template <typename Round>
void expect_tensors_eq(const ModelFile& in, const ModelFile& out, Round round, bool in_gguf_to_hf, bool permute) {
  ASSERT_EQ(in.tensors().size(), out.tensors().size());
  for (const TensorView& t : in.tensors()) {
    const TensorView* o = out.find(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    ASSERT_EQ(o->shape, t.shape) << t.name;
    int64_t heads = 0;
    if (permute && t.name.find(".attn_q.") != std::string::npos) heads = in.config().n_heads;
    if (permute && t.name.find(".attn_k.") != std::string::npos) heads = in.config().n_kv_heads;
    const int64_t rows = t.n_elems() / t.shape.back();
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t src = r;
      if (heads) src = in_gguf_to_hf ? gguf_to_hf_row(r, rows / heads) : hf_to_gguf_row(r, rows / heads);
      std::vector<float> a = dequant_row(t, src), b = dequant_row(*o, r);
      for (size_t k = 0; k < a.size(); ++k)
        if (round(a[k], t.shape.size()) != b[k]) ++bad;
    }
    EXPECT_EQ(bad, 0) << t.name;
  }
}

float exact(float x, size_t) { return x; }

TEST(ConvertRows, PermutationMatchesLlamaCpp) {
  // llama.cpp: permute(w, n_head) = w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2): with hd = 4 the GGUF rows of
  // one head are HF rows [0, 2, 1, 3].
  const int64_t expect[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(hf_to_gguf_row(r, 4), expect[r]);
  for (int64_t hd : {2, 4, 64}) {
    for (int64_t r = 0; r < 3 * hd; ++r) {
      EXPECT_EQ(gguf_to_hf_row(hf_to_gguf_row(r, hd), hd), r);
      EXPECT_EQ(hf_to_gguf_row(gguf_to_hf_row(r, hd), hd), r);
    }
  }
  EXPECT_EQ(parse_convert_format("hf-bf16"), ConvertFormat::HfBf16);
  EXPECT_THROW(parse_convert_format("q4"), UsageError);
}

TEST(Convert, RealModelRoundTrips) {
  TP_REQUIRE_REAL_MODEL();
  TempDir dir;
  auto src = open_model(test::real_model_path());

  // GGUF Q4_1 -> F32 GGUF: values equal to the dequantized originals, metadata copied.
  const std::string f32_path = dir.file("f32.gguf");
  convert_model(test::real_model_path(), f32_path, ConvertFormat::GgufF32);
  {
    auto f32 = open_model(f32_path);
    expect_config_eq(src->config(), f32->config());
    expect_tokenizer_eq(src->tokenizer(), f32->tokenizer());
    for (const auto& t : f32->tensors()) EXPECT_EQ(t.dtype, DType::F32) << t.name;
    expect_tensors_eq(*src, *f32, exact, false, false);
    const GgufFile& g = dynamic_cast<const GgufModel&>(*f32).gguf();
    const GgufFile& s = dynamic_cast<const GgufModel&>(*src).gguf();
    EXPECT_EQ(g.get_int("general.file_type"), 0);
    EXPECT_EQ(g.alignment(), 32u);
    EXPECT_EQ(g.metadata().size(), s.metadata().size());
    EXPECT_EQ(g.get_string("general.name"), s.get_string("general.name"));
  }

  // GGUF -> BF16 GGUF: 2-D weights rounded to bf16, norms stay F32.
  const std::string bf16_path = dir.file("bf16.gguf");
  convert_model(test::real_model_path(), bf16_path, ConvertFormat::GgufBf16);
  {
    auto bf = open_model(bf16_path);
    EXPECT_EQ(dynamic_cast<const GgufModel&>(*bf).gguf().get_int("general.file_type"), 32);
    EXPECT_EQ(bf->require("blk.0.attn_q.weight", {576, 576}).dtype, DType::BF16);
    EXPECT_EQ(bf->require("blk.0.attn_norm.weight", {576}).dtype, DType::F32);
    expect_tensors_eq(*src, *bf, [](float x, size_t dims) { return dims >= 2 ? bf16_to_f32(f32_to_bf16(x)) : x; }, false, false);
  }

  // GGUF -> F16 GGUF and -> HF BF16: 2-D weights rounded to the target type, norms F32.
  const auto round_f16 = [](float x, size_t dims) { return dims >= 2 ? f16_to_f32(f32_to_f16(x)) : x; };
  const auto round_bf16 = [](float x, size_t dims) { return dims >= 2 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  const std::string f16_path = dir.file("f16.gguf");
  convert_model(test::real_model_path(), f16_path, ConvertFormat::GgufF16);
  {
    auto h = open_model(f16_path);
    EXPECT_EQ(dynamic_cast<const GgufModel&>(*h).gguf().get_int("general.file_type"), 1);
    EXPECT_EQ(h->require("token_embd.weight", {49152, 576}).dtype, DType::F16);
    expect_tensors_eq(*src, *h, round_f16, false, false);
  }
  std::filesystem::remove(f16_path);
  const std::string hf_bf16_path = dir.file("hf_bf16");
  convert_model(test::real_model_path(), hf_bf16_path, ConvertFormat::HfBf16);
  {
    auto h = open_model(hf_bf16_path);
    EXPECT_EQ(h->require("blk.3.ffn_down.weight", {576, 1536}).dtype, DType::BF16);
    EXPECT_EQ(h->require("blk.3.ffn_norm.weight", {576}).dtype, DType::F32);
    expect_tensors_eq(*src, *h, round_bf16, true, true);
    expect_tokenizer_eq(src->tokenizer(), h->tokenizer());
  }
  std::filesystem::remove_all(hf_bf16_path);

  // GGUF -> HF F32: HF names, Q/K un-permuted, tokenizer and config read back equal.
  const std::string hf_path = dir.file("hf");
  convert_model(test::real_model_path(), hf_path, ConvertFormat::HfF32);
  auto hf = open_model(hf_path);
  EXPECT_EQ(hf->config().rope_style, RopeStyle::Neox);
  expect_config_eq(src->config(), hf->config());
  expect_tokenizer_eq(src->tokenizer(), hf->tokenizer());
  expect_tensors_eq(*src, *hf, exact, true, true);

  // HF -> GGUF F32: permuted back, identical to the direct F32 conversion.
  const std::string back_path = dir.file("back.gguf");
  convert_model(hf_path, back_path, ConvertFormat::GgufF32);
  auto back = open_model(back_path);
  auto f32 = open_model(f32_path);
  EXPECT_EQ(back->config().rope_style, RopeStyle::Interleaved);
  expect_config_eq(src->config(), back->config());
  expect_tokenizer_eq(src->tokenizer(), back->tokenizer());
  ASSERT_EQ(back->tensors().size(), f32->tensors().size());
  for (const auto& t : f32->tensors()) {
    const TensorView* b = back->find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    ASSERT_EQ(b->n_bytes, t.n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(b->data, t.data, size_t(t.n_bytes)), 0) << t.name;
  }
}

TEST(Convert, MissingInput) {
  TempDir dir;
  EXPECT_THROW(convert_model("/nonexistent.gguf", dir.file("o.gguf"), ConvertFormat::GgufF32), InputError);
}

}  // namespace
}  // namespace tp
