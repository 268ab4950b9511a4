// HF directory loader: config.json, tensor renaming, sharded index, tokenizer.json / tokenizer_config.json.
#include "rank/hf_dir.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "hidden_size": 8,
  "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "max_position_embeddings": 64, "vocab_size": 6, "tie_word_embeddings": true})";

const char* kTokenizer = R"({"version": "1.0",
  "added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 5, "content": "<tool>", "special": false}],
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
                    {"type": "ByteLevel", "add_prefix_space": false}]},
  "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3, "Ġ": 4},
            "merges": ["a b", ["ab", "Ġ"]]}})";

const char* kTokConfig = R"({"bos_token": "<s>", "eos_token": {"content": "<s>"}, "add_bos_token": true,
  "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})";

SafetensorsOut f32_tensor(const std::string& name, std::vector<int64_t> shape, float base) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, DType::F32, shape, [n, base](uint8_t* dst) {
            for (int64_t k = 0; k < n; ++k) {
              float v = base + float(k);
              std::memcpy(dst + 4 * k, &v, 4);
            }
          }};
}

void write_dir(const TempDir& dir, bool sharded) {
  test::write_string(dir.file("config.json"), kConfig);
  test::write_string(dir.file("tokenizer.json"), kTokenizer);
  test::write_string(dir.file("tokenizer_config.json"), kTokConfig);
  std::vector<SafetensorsOut> a = {f32_tensor("model.embed_tokens.weight", {6, 8}, 0),
                                   f32_tensor("model.layers.0.self_attn.q_proj.weight", {8, 8}, 100)};
  std::vector<SafetensorsOut> b = {f32_tensor("model.layers.0.self_attn.k_proj.weight", {4, 8}, 200),
                                   f32_tensor("model.layers.0.input_layernorm.weight", {8}, 300),
                                   f32_tensor("model.norm.weight", {8}, 400)};
  if (sharded) {
    write_safetensors(dir.file("model-00001-of-00002.safetensors"), a);
    write_safetensors(dir.file("model-00002-of-00002.safetensors"), b);
    test::write_string(dir.file("model.safetensors.index.json"),
                       R"({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.k_proj.weight": "model-00002-of-00002.safetensors",
        "model.layers.0.input_layernorm.weight": "model-00002-of-00002.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  } else {
    a.insert(a.end(), b.begin(), b.end());
    write_safetensors(dir.file("model.safetensors"), a);
  }
}

TEST(HfNames, MapBothWays) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
      {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight"},
      {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},
      {"model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight"},
      {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
      {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight"},
      {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
      {"model.layers.7.input_layernorm.weight", "blk.7.attn_norm.weight"},
      {"model.layers.7.post_attention_layernorm.weight", "blk.7.ffn_norm.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (auto [hf, canon] : cases) {
    EXPECT_EQ(hf_to_canonical_name(hf), canon);
    EXPECT_EQ(canonical_to_hf_name(canon), hf);
  }
  EXPECT_EQ(hf_to_canonical_name("model.layers.x.mlp.up_proj.weight"), "model.layers.x.mlp.up_proj.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.0.self_attn.rotary_emb.inv_freq"),
            "model.layers.0.self_attn.rotary_emb.inv_freq");
}

void check_dir(const ModelFile& m) {
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.n_layers, 1);
  EXPECT_EQ(c.hidden, 8);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.intermediate, 16);
  EXPECT_EQ(c.vocab, 6);
  EXPECT_EQ(c.max_context, 64);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  const TensorView& k = m.require("blk.0.attn_k.weight", {4, 8});
  float v;
  std::memcpy(&v, k.data + 4 * 31, 4);
  EXPECT_EQ(v, 231.0f);
  m.require("token_embd.weight", {6, 8});
  m.require("blk.0.attn_q.weight", {8, 8});
  m.require("blk.0.attn_norm.weight", {8});
  m.require("output_norm.weight", {8});
  EXPECT_EQ(m.tensors().size(), 5u);
  const TokenizerData& t = m.tokenizer();
  EXPECT_EQ(t.tokens, (std::vector<std::string>{"<s>", "a", "b", "ab", "Ġ", "<tool>"}));
  EXPECT_EQ(t.token_types, (std::vector<TokenType>{TokenType::Control, TokenType::Normal, TokenType::Normal,
                                                   TokenType::Normal, TokenType::Normal, TokenType::UserDefined}));
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "ab Ġ"}));
  EXPECT_EQ(t.pre, "smollm");
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.bos_id, 0);
  EXPECT_EQ(t.eos_id, 0);
  EXPECT_EQ(t.unk_id, -1);
  EXPECT_TRUE(t.add_bos);
  EXPECT_FALSE(t.add_eos);
  EXPECT_EQ(t.chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
}

TEST(HfDir, SingleFile) {
  TempDir dir;
  write_dir(dir, false);
  check_dir(*open_model(dir.path()));
}

TEST(HfDir, MissingTokenizerIsReportedAsSuch) {
  // Once reported, much later, as "tokenizer pre-type 'default' not supported".
  TempDir dir;
  write_dir(dir, false);
  std::filesystem::remove(dir.file("tokenizer.json"));
  const auto m = open_model(dir.path());  // shape and weights are there: `tpserve plan` can use it
  EXPECT_EQ(m->config().n_layers, 1);
  try {
    m->tokenizer();
    ADD_FAILURE() << "a directory without tokenizer.json gave a tokenizer";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path() + ": no tokenizer.json: the model directory needs the tokenizer.json "
                                                  "of its model (from the repository it came from) to encode and decode text");
  }
}

TEST(HfDir, Sharded) {
  TempDir dir;
  write_dir(dir, true);
  check_dir(*open_model(dir.path()));
  // A weight_map entry whose shard lacks the tensor.
  test::write_string(dir.file("model.safetensors.index.json"),
                     R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  try {
    open_model(dir.path());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  test::write_string(dir.file("model.safetensors.index.json"), R"({"weight_map": {"model.norm.weight": "nope.safetensors"}})");
  EXPECT_THROW(open_model(dir.path()), InputError);
}

TEST(HfDir, UnsupportedArchitecture) {
  TempDir dir;
  write_dir(dir, false);
  test::write_string(dir.file("config.json"), R"({"architectures": ["MistralForCausalLM"], "hidden_size": 8})");
  try {
    open_model(dir.path());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture 'MistralForCausalLM'"), std::string::npos) << e.what();
  }
}

TEST(HfDir, BadConfigValues) {
  TempDir dir;
  write_dir(dir, false);
  test::write_string(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "x"})");
  EXPECT_THROW(open_model(dir.path()), FormatError);
  test::write_string(dir.file("config.json"), "{not json");
  EXPECT_THROW(open_model(dir.path()), FormatError);
  // A rope_type that is not a string: a FormatError naming it (was nlohmann's type_error, an internal error).
  test::write_string(dir.file("config.json"),
                     R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "hidden_size": 8,)"
                     R"( "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 4, "rope_parameters": {"rope_type": 7}})");
  try {
    read_hf_config(dir.path());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_parameters.rope_type: expected a string, found 7"), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, PreTokenizerForms) {
  TempDir dir;
  test::write_string(dir.file("tokenizer.json"),
                     R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).pre, "gpt2");
  test::write_string(dir.file("tokenizer.json"),
                     R"({"pre_tokenizer": null, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).pre, "default");
  test::write_string(dir.file("tokenizer.json"),
                     R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {"a": 0}}})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).pre, "default");
  // Fields of other types than these forms have (found by tests/fuzz/hf_config_fuzz.cpp; json::value threw): not
  // these forms, so the default pre-tokenizer / no chat template.
  test::write_string(dir.file("tokenizer.json"),
                     R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": "yes"},)"
                     R"( {"type": "ByteLevel"}]}, "model": {"type": "BPE", "vocab": {"a": 0}}})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).pre, "default");
  test::write_string(dir.file("tokenizer.json"), R"({"pre_tokenizer": {"type": 3}, "model": {"type": "BPE", "vocab": {"a": 0}}})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).pre, "default");
  test::write_string(dir.file("tokenizer_config.json"),
                     R"({"chat_template": [{"name": 5, "template": "x"}, {"name": "default", "template": "y"}]})");
  EXPECT_EQ(read_hf_tokenizer(dir.path()).chat_template, "y");
}

TEST(HfTokenizer, RejectsGapsAndBadForms) {
  TempDir dir;
  test::write_string(dir.file("tokenizer.json"), R"({"added_tokens": [{"id": 0, "content": "a", "special": true}],)"
                                                 R"( "model": {"type": "BPE", "vocab": {"a": 0, "b": 2}}})");
  try {
    read_hf_tokenizer(dir.path());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 1 not in vocab nor added_tokens"), std::string::npos) << e.what();
  }
  test::write_string(dir.file("tokenizer.json"), R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  EXPECT_THROW(read_hf_tokenizer(dir.path()), FormatError);
  test::write_string(dir.file("tokenizer.json"), R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})");
  EXPECT_THROW(read_hf_tokenizer(dir.path()), FormatError);
  test::write_string(dir.file("tokenizer.json"), R"({"model": {"type": "BPE", "vocab": {"a": 999999999}}})");
  EXPECT_THROW(read_hf_tokenizer(dir.path()), FormatError);
  test::write_string(dir.file("tokenizer.json"), R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  test::write_string(dir.file("tokenizer_config.json"), R"({"bos_token": "<nope>"})");
  EXPECT_THROW(read_hf_tokenizer(dir.path()), FormatError);
}

}  // namespace
}  // namespace tp
