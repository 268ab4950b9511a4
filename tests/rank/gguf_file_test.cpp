// GGUF reader: the real model's header, every metadata type, typed getters, and corrupt / truncated files
// (each must give one FormatError naming the file and the field, never a crash).
#include "rank/gguf_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/error.h"
#include "rank/gguf_model.h"
#include "rank/gguf_writer.h"
#include "rank/model_file.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

GgufValue u64(uint64_t v) {
  GgufValue r;
  r.type = GgufType::Uint64;
  r.u = v;
  return r;
}

// A tiny llama GGUF (1 layer, hidden 64, 2 heads, 1 kv head, vocab 32) with one tensor of each type.
void write_tiny_llama(const std::string& path, const std::string& arch = "llama") {
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string(arch));
  w.set("general.name", GgufValue::make_string("tiny"));
  w.set("llama.block_count", GgufValue::make_u32(1));
  w.set("llama.context_length", GgufValue::make_u32(128));
  w.set("llama.embedding_length", GgufValue::make_u32(64));
  w.set("llama.feed_forward_length", GgufValue::make_u32(96));
  w.set("llama.attention.head_count", GgufValue::make_u32(2));
  w.set("llama.attention.head_count_kv", GgufValue::make_u32(1));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::make_f32(1e-5f));
  std::vector<std::string> toks;
  for (int k = 0; k < 32; ++k) toks.push_back("t" + std::to_string(k));
  w.set("tokenizer.ggml.model", GgufValue::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::make_string("smollm"));
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(toks));
  std::vector<int32_t> types(32, 1);
  types[0] = 3;
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  w.set("tokenizer.ggml.merges", GgufValue::make_string_array({"t 0", "t 1"}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(0));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::make_u32(0));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(false));
  w.set("tokenizer.chat_template", GgufValue::make_string("{{ messages }}"));
  auto fill_pattern = [](uint8_t* dst, int64_t n) {
    for (int64_t k = 0; k < n; ++k) dst[k] = uint8_t(k * 7 + 3);
  };
  auto f32_fill = [](int64_t n) {
    return [n](uint8_t* dst) {
      for (int64_t k = 0; k < n; ++k) {
        float v = 0.01f * float(k);
        std::memcpy(dst + 4 * k, &v, 4);
      }
    };
  };
  auto pat = [fill_pattern](int64_t n) { return [fill_pattern, n](uint8_t* d) { fill_pattern(d, n); }; };
  w.add_tensor("token_embd.weight", GgmlType::Q8_0, {64, 32}, pat(32 * 2 * 34));
  w.add_tensor("output_norm.weight", GgmlType::F32, {64}, f32_fill(64));
  w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {64}, f32_fill(64));
  w.add_tensor("blk.0.attn_q.weight", GgmlType::F16, {64, 64}, [](uint8_t* d) {
    for (int k = 0; k < 64 * 64; ++k) {
      uint16_t h = f32_to_f16(0.001f * float(k % 97));
      std::memcpy(d + 2 * k, &h, 2);
    }
  });
  w.add_tensor("blk.0.attn_k.weight", GgmlType::BF16, {64, 32}, [](uint8_t* d) {
    for (int k = 0; k < 64 * 32; ++k) {
      uint16_t h = f32_to_bf16(0.5f - 0.001f * float(k % 89));
      std::memcpy(d + 2 * k, &h, 2);
    }
  });
  w.add_tensor("blk.0.attn_v.weight", GgmlType::Q4_0, {64, 32}, pat(32 * 2 * 18));
  w.add_tensor("blk.0.ffn_up.weight", GgmlType::Q4_1, {64, 96}, pat(96 * 2 * 20));
  w.write(path);
}

TEST(GgufFile, RealModelHeader) {
  TP_REQUIRE_REAL_MODEL();
  auto m = open_model(test::real_model_path());
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_GT(c.max_context, 0);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(m->find("output.weight"), nullptr);
  const TensorView& emb = m->require("token_embd.weight", {49152, 576});
  EXPECT_NE(emb.data, nullptr);
  m->require("blk.29.attn_q.weight", {576, 576});
  m->require("blk.29.attn_k.weight", {192, 576});
  m->require("blk.0.ffn_down.weight", {576, 1536});
  m->require("output_norm.weight", {576});
  EXPECT_EQ(m->require("blk.0.attn_norm.weight", {576}).dtype, DType::F32);
  EXPECT_EQ(m->require("blk.0.ffn_gate.weight", {1536, 576}).dtype, DType::Q4_1);
  EXPECT_THROW(m->require("blk.0.ffn_gate.weight", {576, 1536}), FormatError);
  EXPECT_THROW(m->require("blk.30.ffn_gate.weight", {1536, 576}), FormatError);
  const TokenizerData& t = m->tokenizer();
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.pre, "smollm");
  EXPECT_EQ(t.tokens.size(), 49152u);
  EXPECT_EQ(t.token_types.size(), 49152u);
  EXPECT_GT(t.merges.size(), 40000u);
  EXPECT_EQ(t.tokens[size_t(t.eos_id)], "<|im_end|>");
  EXPECT_EQ(t.token_types[size_t(t.eos_id)], TokenType::Control);
  EXPECT_NE(t.chat_template.find("im_start"), std::string::npos);
}

TEST(GgufFile, AllMetadataTypesRoundTrip) {
  TempDir dir;
  GgufWriter w;
  GgufValue v;
  const GgufType scalars[] = {GgufType::Uint8, GgufType::Int8, GgufType::Uint16, GgufType::Int16, GgufType::Uint32,
                              GgufType::Int32, GgufType::Uint64, GgufType::Int64};
  for (GgufType t : scalars) {
    GgufValue x;
    x.type = t;
    x.u = 7;
    x.i = -7;
    w.set("k." + gguf_type_name(t), x);
  }
  GgufValue f32 = GgufValue::make_f32(1.5f), f64;
  f64.type = GgufType::Float64;
  f64.f = 2.25;
  w.set("k.f32", f32);
  w.set("k.f64", f64);
  w.set("k.bool", GgufValue::make_bool(true));
  w.set("k.str", GgufValue::make_string("hello"));
  w.set("k.strs", GgufValue::make_string_array({"a", "", "ccc"}));
  w.set("k.ints", GgufValue::make_i32_array({1, -2, 3}));
  GgufValue nested;
  nested.type = GgufType::Array;
  nested.elem_type = GgufType::Array;
  nested.arr = {GgufValue::make_i32_array({1, 2}), GgufValue::make_i32_array({})};
  w.set("k.nested", nested);
  w.set("k.big", u64(uint64_t(1) << 63));
  const std::string path = dir.file("meta.gguf");
  w.write(path);

  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensor_infos().size(), 0u);
  EXPECT_EQ(f.get_int("k.uint8"), 7);
  EXPECT_EQ(f.get_int("k.int8"), -7);
  EXPECT_EQ(f.get_int("k.uint16"), 7);
  EXPECT_EQ(f.get_int("k.int16"), -7);
  EXPECT_EQ(f.get_int("k.uint32"), 7);
  EXPECT_EQ(f.get_int("k.int32"), -7);
  EXPECT_EQ(f.get_int("k.uint64"), 7);
  EXPECT_EQ(f.get_int("k.int64"), -7);
  EXPECT_EQ(f.find("k.int16")->type, GgufType::Int16);
  EXPECT_FLOAT_EQ(float(f.get_float("k.f32")), 1.5f);
  EXPECT_DOUBLE_EQ(f.get_float("k.f64"), 2.25);
  EXPECT_TRUE(f.get_bool("k.bool"));
  EXPECT_EQ(f.get_string("k.str"), "hello");
  EXPECT_EQ(f.get_string_array("k.strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("k.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_float_array("k.ints"), (std::vector<double>{1, -2, 3}));
  const GgufValue* n = f.find("k.nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->arr.size(), 2u);
  EXPECT_EQ(n->arr[0].arr.size(), 2u);
  EXPECT_EQ(n->arr[0].arr[1].i, 2);
  EXPECT_EQ(n->arr[1].arr.size(), 0u);
  EXPECT_EQ(f.get_int_or("k.absent", 42), 42);
  EXPECT_EQ(f.get_string_or("k.absent", "x"), "x");
  // Typed errors.
  EXPECT_THROW(f.get_string("k.int32"), FormatError);
  EXPECT_THROW(f.get_int("k.str"), FormatError);
  EXPECT_THROW(f.get_int("k.big"), FormatError);
  EXPECT_THROW(f.get_bool("k.uint8"), FormatError);
  EXPECT_THROW(f.get_string_array("k.ints"), FormatError);
  EXPECT_THROW(f.get_int_array("k.strs"), FormatError);
  EXPECT_THROW(f.get_string_or("k.int32", "x"), FormatError);
  try {
    f.get_int("k.missing");
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": k.missing: missing key");
  }
}

TEST(GgufFile, TinyModelTensors) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  auto m = open_model(path);
  EXPECT_EQ(m->config().n_layers, 1);
  EXPECT_EQ(m->config().head_dim, 32);
  EXPECT_EQ(m->config().vocab, 32);
  EXPECT_TRUE(m->config().tied_embeddings);
  const TensorView& q = m->require("blk.0.attn_q.weight", {64, 64});
  EXPECT_EQ(q.dtype, DType::F16);
  EXPECT_EQ(q.n_bytes, 64 * 64 * 2);
  EXPECT_EQ(m->require("blk.0.attn_k.weight", {32, 64}).dtype, DType::BF16);
  EXPECT_EQ(m->require("blk.0.attn_v.weight", {32, 64}).dtype, DType::Q4_0);
  EXPECT_EQ(m->require("blk.0.ffn_up.weight", {96, 64}).dtype, DType::Q4_1);
  EXPECT_EQ(m->require("token_embd.weight", {32, 64}).dtype, DType::Q8_0);
  const TensorView& norm = m->require("output_norm.weight", {64});
  float v;
  std::memcpy(&v, norm.data + 4 * 5, 4);
  EXPECT_FLOAT_EQ(v, 0.05f);
  for (const auto& t : m->tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;
  EXPECT_EQ(m->tokenizer().tokens.size(), 32u);
  EXPECT_EQ(m->tokenizer().token_types[0], TokenType::Control);
  EXPECT_EQ(m->tokenizer().merges, (std::vector<std::string>{"t 0", "t 1"}));
  EXPECT_EQ(m->tokenizer().chat_template, "{{ messages }}");
}

// Every prefix of a valid file is rejected with a FormatError naming the file.
TEST(GgufFile, TruncatedAtEveryCutPoint) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  std::vector<uint8_t> bytes = test::read_bytes(path);
  GgufFile full(path);
  size_t end = 0;
  for (const auto& t : full.tensor_infos()) end = std::max(end, size_t(full.data_offset() + t.offset + t.n_bytes));
  for (size_t cut = 0; cut < end; ++cut) {
    try {
      GgufFile f("cut.gguf", bytes.data(), cut);
      FAIL() << "cut at " << cut << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cut.gguf: ", 0), 0u) << e.what();
    }
  }
}

TEST(GgufFile, RealModelTruncated) {
  TP_REQUIRE_REAL_MODEL();
  MappedFile map(test::real_model_path());
  const size_t cuts[] = {0, 3, 4, 7, 8, 15, 23, 24, 100, 1000, 10000, 100000, 1000000, 1500000, 2000000,
                         5000000, map.size() / 2, map.size() - 1};
  for (size_t cut : cuts) {
    EXPECT_THROW(GgufFile("cut.gguf", map.data(), cut), FormatError) << "cut " << cut;
  }
  try {
    GgufFile("m.gguf", map.data(), map.size() - 1);
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("beyond end of file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor_infos["), std::string::npos) << e.what();
  }
}

// Random byte corruption either parses or throws FormatError: never a crash or another error type.
TEST(GgufFile, CorruptedBytes) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  const std::vector<uint8_t> orig = test::read_bytes(path);
  GgufFile full(path);
  const size_t header_end = full.data_offset();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = orig;
    int n_flips = 1 + int(rng() % 4);
    for (int k = 0; k < n_flips; ++k) b[rng() % header_end] = uint8_t(rng());
    try {
      GgufFile f("bad.gguf", b.data(), b.size());
      GgufModel m(std::make_unique<GgufFile>("bad.gguf", b.data(), b.size()));
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  return size_t(it - hay.begin());
}

TEST(GgufFile, UnsupportedTensorType) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  std::vector<uint8_t> b = test::read_bytes(path);
  // tensor info: name, n_dims (u32), ne (u64 x n_dims), type (u32)
  size_t pos = find_bytes(b, "blk.0.attn_v.weight") + std::strlen("blk.0.attn_v.weight") + 4 + 2 * 8;
  uint32_t iq3_xxs = 18;  // a type no kernel or requantizer of ours reads
  std::memcpy(b.data() + pos, &iq3_xxs, 4);
  try {
    GgufFile f("iq3.gguf", b.data(), b.size());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.attn_v.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unsupported tensor type 18"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q5_1=7"), std::string::npos) << msg;  // the supported ones listed
  }
}

// A K-quant tensor's rows must be whole 256-weight super-blocks: attn_v (rows of 64) retyped as Q2_K / Q3_K / Q4_K /
// Q5_K / Q6_K / IQ4_XS.
TEST(GgufFile, KQuantRowNotWholeSuperBlocks) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  std::vector<uint8_t> b = test::read_bytes(path);
  size_t pos = find_bytes(b, "blk.0.attn_v.weight") + std::strlen("blk.0.attn_v.weight") + 4 + 2 * 8;
  for (uint32_t type : {10u, 11u, 12u, 13u, 14u, 23u}) {
    std::memcpy(b.data() + pos, &type, 4);
    try {
      GgufFile f("k.gguf", b.data(), b.size());
      FAIL() << "accepted type " << type;
    } catch (const FormatError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("blk.0.attn_v.weight"), std::string::npos) << msg;
      EXPECT_NE(msg.find("not a multiple of the block size 256"), std::string::npos) << msg;
    }
  }
}

TEST(GgufFile, BadTensorOffsetNamesField) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_tiny_llama(path);
  std::vector<uint8_t> b = test::read_bytes(path);
  size_t pos = find_bytes(b, "output_norm.weight") + std::strlen("output_norm.weight") + 4 + 8 + 4;
  uint64_t off = uint64_t(1) << 40;
  std::memcpy(b.data() + pos, &off, 8);
  try {
    GgufFile f("off.gguf", b.data(), b.size());
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("off.gguf: tensor_infos[1] 'output_norm.weight'.offset: data range [", 0), 0u) << msg;
    EXPECT_NE(msg.find("beyond end of file (size " + std::to_string(b.size()) + ")"), std::string::npos) << msg;
  }
}

TEST(GgufFile, HugeCountsRejectedWithoutAllocating) {
  std::vector<uint8_t> b(64, 0);
  uint32_t magic = kGgufMagic, ver = 3;
  uint64_t n_tensors = 0, n_kv = uint64_t(1) << 60;
  std::memcpy(b.data(), &magic, 4);
  std::memcpy(b.data() + 4, &ver, 4);
  std::memcpy(b.data() + 8, &n_tensors, 8);
  std::memcpy(b.data() + 16, &n_kv, 8);
  EXPECT_THROW(GgufFile("huge.gguf", b.data(), b.size()), FormatError);
  n_kv = 1;
  std::memcpy(b.data() + 16, &n_kv, 8);
  uint64_t key_len = uint64_t(1) << 62;  // key string length
  std::memcpy(b.data() + 24, &key_len, 8);
  EXPECT_THROW(GgufFile("huge.gguf", b.data(), b.size()), FormatError);
  ver = 1;
  std::memcpy(b.data() + 4, &ver, 4);
  EXPECT_THROW(GgufFile("v1.gguf", b.data(), b.size()), FormatError);
}

TEST(OpenModel, UnsupportedArchitecture) {
  TempDir dir;
  const std::string path = dir.file("mistral.gguf");
  write_tiny_llama(path, "mistral");
  try {
    open_model(path);
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": general.architecture: unsupported architecture 'mistral'");
  }
}

TEST(OpenModel, MissingFileAndNotGguf) {
  try {
    open_model("/nonexistent/model.gguf");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot open model '/nonexistent/model.gguf': ", 0), 0u) << e.what();
  }
  TempDir dir;
  test::write_string(dir.file("x.bin"), "not a model at all");
  EXPECT_THROW(open_model(dir.file("x.bin")), FormatError);
  test::write_string(dir.file("empty.bin"), "");
  EXPECT_THROW(open_model(dir.file("empty.bin")), FormatError);
  EXPECT_THROW(open_model(dir.path()), InputError);  // a directory without config.json
}

}  // namespace
}  // namespace tp
