// rank/weight_loader: GGUF block-quantized tensors kept as their blocks (the default) or dequantized.
//   - a kept slice holds exactly the file's blocks: dequantized, it equals the dequantize path's F32 values
//     bit for bit, rows and block-aligned columns alike;
//   - a fused layer over mixed block types (Q5_0 q|k, Q8_0 v, as llama-quantize's Q4_K_M mix makes for
//     SmolLM2) gives one weight per run of the same type;
//   - a row-parallel slice off the blocks is refused naming the tensor and the TP degrees that fit; the
//     dequantize path slices anywhere;
//   - a block whose scale is not finite is refused naming the tensor, row and block;
//   - the real Q4_1 model keeps Q4_1 / Q8_0 blocks and its resident bytes are those of the blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "rank/gguf_writer.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"
#include "rank/weight_loader.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

constexpr int64_t kHidden = 384, kHeads = 3, kInter = 768, kVocab = 16;

// Blocks of type t for [rows, cols] with random codes and finite F16 scales in [0.005, 0.02].
std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = rows * dtype_row_bytes(t, cols), bb = dtype_block_bytes(t);
  std::vector<uint8_t> b(static_cast<size_t>(n));
  for (auto& v : b) v = uint8_t(rng());
  for (int64_t k = 0; k < n / bb; ++k) {
    uint8_t* blk = b.data() + k * bb;
    const auto [at, n_f16] = block_f16s(t);
    for (int j = 0; j < n_f16; ++j) {
      const uint16_t h = f32_to_f16(0.005f + 0.015f * float(rng() % 1000) / 1000.0f);
      std::memcpy(blk + at + 2 * j, &h, 2);
    }
  }
  return b;
}

// A one-layer llama GGUF (hidden 384, 3 heads of 128, intermediate 768): q|k Q5_0, v Q8_0, o Q4_0, gate Q4_1,
// up Q8_0, down Q4_K (768 = 3 × 256; the 384-column tensors cannot be K-quants) or down_type; with nan_scale v's row 2,
// block 1 has a NaN scale; with bad_down_f16 >= 0 down's row 2, block 1 has an infinite F16 at that byte.
void write_mixed_model(const std::string& path, bool nan_scale = false, DType down_type = DType::Q4_K,
                       int bad_down_f16 = -1) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("llama.block_count", GgufValue::make_u32(1));
  w.set("llama.context_length", GgufValue::make_u32(64));
  w.set("llama.embedding_length", GgufValue::make_u32(uint32_t(kHidden)));
  w.set("llama.feed_forward_length", GgufValue::make_u32(uint32_t(kInter)));
  w.set("llama.attention.head_count", GgufValue::make_u32(uint32_t(kHeads)));
  w.set("llama.attention.head_count_kv", GgufValue::make_u32(uint32_t(kHeads)));
  w.set("llama.vocab_size", GgufValue::make_u32(uint32_t(kVocab)));
  auto add = [&](const std::string& name, DType t, int64_t rows, int64_t cols, uint32_t seed, bool bad = false,
                 int bad_at = 0, uint16_t bad_bits = 0x7e00) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(random_blocks(t, rows, cols, seed));
    if (bad)  // row 2, block 1: the F16 at bad_at NaN (or bad_bits)
      std::memcpy(bytes->data() + 2 * dtype_row_bytes(t, cols) + dtype_block_bytes(t) + bad_at, &bad_bits, 2);
    w.add_tensor(name, dtype_to_ggml(t), {cols, rows}, [bytes](uint8_t* d) { std::memcpy(d, bytes->data(), bytes->size()); });
  };
  auto vec = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, GgmlType::F32, {n}, [n](uint8_t* d) {
      for (int64_t k = 0; k < n; ++k) {
        const float one = 1.0f;
        std::memcpy(d + 4 * k, &one, 4);
      }
    });
  };
  add("token_embd.weight", DType::Q8_0, kVocab, kHidden, 1);
  vec("output_norm.weight", kHidden);
  vec("blk.0.attn_norm.weight", kHidden);
  vec("blk.0.ffn_norm.weight", kHidden);
  add("blk.0.attn_q.weight", DType::Q5_0, kHidden, kHidden, 2);
  add("blk.0.attn_k.weight", DType::Q5_0, kHidden, kHidden, 3);
  add("blk.0.attn_v.weight", DType::Q8_0, kHidden, kHidden, 4, nan_scale);
  add("blk.0.attn_output.weight", DType::Q4_0, kHidden, kHidden, 5);
  add("blk.0.ffn_gate.weight", DType::Q4_1, kInter, kHidden, 6);
  add("blk.0.ffn_up.weight", DType::Q8_0, kInter, kHidden, 7);
  add("blk.0.ffn_down.weight", down_type, kHidden, kInter, 8, bad_down_f16 >= 0, bad_down_f16, 0x7c00);
  w.write(path);
}

std::vector<float> dequantized(const cpu::Weight& w) {
  std::vector<float> out(size_t(w.n_out() * w.n_in()));
  if (w.dense()) {
    EXPECT_EQ(w.dtype(), DType::F32);
    std::memcpy(out.data(), w.data(), out.size() * sizeof(float));
  } else {
    dequantize_rows(w.packed(), 0, w.n_out(), out.data());
  }
  return out;
}

const WeightLoadOptions kKeep{DType::F32, true};
const WeightLoadOptions kDequantize{DType::F32, false};

TEST(WeightLoader, MixedBlockTypesGiveOneWeightPerRunAndKeepTheBlocks) {
  TempDir dir;
  write_mixed_model(dir.file("m.gguf"));
  auto f = open_model(dir.file("m.gguf"));
  // tp 3, rank 1: head 1's rows of q, k, v.
  const std::vector<RowSlice> qkv = {{"blk.0.attn_q.weight", kHidden, {128, 256}},
                                     {"blk.0.attn_k.weight", kHidden, {128, 256}},
                                     {"blk.0.attn_v.weight", kHidden, {128, 256}}};
  const auto kept = load_linear(*f, kKeep, kHidden, {0, kHidden}, qkv);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].format(), WeightFormat::GgufQ5_0);
  EXPECT_EQ(kept[0].n_out(), 256);
  EXPECT_EQ(kept[1].format(), WeightFormat::GgufQ8_0);
  EXPECT_EQ(kept[1].n_out(), 128);
  EXPECT_EQ(kept[0].n_bytes(), 256 * dtype_row_bytes(DType::Q5_0, kHidden));
  const auto dense = load_linear(*f, kDequantize, kHidden, {0, kHidden}, qkv);
  ASSERT_EQ(dense.size(), 1u);
  std::vector<float> a = dequantized(kept[0]), b = dequantized(kept[1]), d = dequantized(dense[0]);
  a.insert(a.end(), b.begin(), b.end());
  ASSERT_EQ(a.size(), d.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], d[i]) << i;
}

TEST(WeightLoader, RowParallelSliceOnBlocksKeepsTheColumnsBlocks) {
  TempDir dir;
  write_mixed_model(dir.file("m.gguf"));
  auto f = open_model(dir.file("m.gguf"));
  const std::vector<RowSlice> down = {{"blk.0.ffn_down.weight", kHidden, {0, kHidden}}};
  const Range cols{256, 512};  // tp 3, rank 1 of 768 columns: one Q4_K super-block
  const auto kept = load_linear(*f, kKeep, kInter, cols, down);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].format(), WeightFormat::GgufQ4_K);
  EXPECT_EQ(kept[0].n_in(), 256);
  const auto dense = load_linear(*f, kDequantize, kInter, cols, down);
  const auto a = dequantized(kept[0]), d = dequantized(dense[0]);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], d[i]) << i;
}

TEST(WeightLoader, SliceOffTheBlocksIsRefusedNamingTheDegreesThatFit) {
  TempDir dir;
  write_mixed_model(dir.file("m.gguf"));
  auto f = open_model(dir.file("m.gguf"));
  const std::vector<RowSlice> down = {{"blk.0.ffn_down.weight", kHidden, {0, kHidden}}};
  try {
    load_linear(*f, kKeep, kInter, {0, 384}, down);  // a half: 1.5 super-blocks
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.ffn_down.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q4_k blocks of 256 columns"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 384) of 768"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tp degrees that slice it on its blocks: 1, 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.quantized: dequantize"), std::string::npos) << msg;
  }
  // Dequantized, any column range loads.
  const auto dense = load_linear(*f, kDequantize, kInter, {0, 384}, down);
  ASSERT_EQ(dense.size(), 1u);
  EXPECT_EQ(dense[0].n_in(), 384);
}

TEST(WeightLoader, NonFiniteBlockScaleIsRefusedNamingTensorRowAndBlock) {
  TempDir dir;
  write_mixed_model(dir.file("m.gguf"), /*nan_scale=*/true);
  auto f = open_model(dir.file("m.gguf"));
  try {
    load_linear(*f, kKeep, kHidden, {0, kHidden}, {{"blk.0.attn_v.weight", kHidden, {0, kHidden}}});
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.attn_v.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q8_0 block whose scale is NaN (row 2, block 1)"), std::string::npos) << msg;
  }
  // Rows without the bad block load.
  EXPECT_NO_THROW(load_linear(*f, kKeep, kHidden, {0, kHidden}, {{"blk.0.attn_v.weight", kHidden, {3, kHidden}}}));
}

// Every kept block type's scale and min scale (block_f16s) is checked: an infinite one is refused naming the tensor,
// the row and the block. (Q5_1's and Q5_K's min scales were once not checked: an infinite one loaded.)
TEST(WeightLoader, NonFiniteScaleOrMinOfEveryKeptTypeIsRefused) {
  struct Case {
    DType t;
    int at, n;  // the block's F16 scales, as llama.cpp's block structs have them
  };
  for (const Case c :
       {Case{DType::Q8_0, 0, 1}, Case{DType::Q4_0, 0, 1}, Case{DType::Q4_1, 0, 2}, Case{DType::Q5_0, 0, 1},
        Case{DType::Q5_1, 0, 2}, Case{DType::Q2_K, 80, 2}, Case{DType::Q3_K, 108, 1}, Case{DType::Q4_K, 0, 2},
        Case{DType::Q5_K, 0, 2}, Case{DType::Q6_K, 208, 1}, Case{DType::IQ4_NL, 0, 1}})
    for (int k = 0; k < c.n; ++k) {
      const DType t = c.t;
      const std::string what = std::string(dtype_name(t)) + (k ? " min scale" : " scale");
      TempDir dir;
      write_mixed_model(dir.file("m.gguf"), false, t, c.at + 2 * k);
      auto f = open_model(dir.file("m.gguf"));
      const std::vector<RowSlice> down = {{"blk.0.ffn_down.weight", kHidden, {0, kHidden}}};
      try {
        load_linear(*f, kKeep, kInter, {0, kInter}, down);
        ADD_FAILURE() << what << ": accepted";
      } catch (const FormatError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("blk.0.ffn_down.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string(dtype_name(t)) + " block whose " + (k ? "min scale" : "scale") +
                           " is inf (row 2, block 1)"),
                  std::string::npos)
            << msg;
      }
    }
}

TEST(WeightLoader, MixedModelRunsKeptAndDequantizedAlike) {
  TempDir dir;
  write_mixed_model(dir.file("m.gguf"));
  auto f = open_model(dir.file("m.gguf"));
  LlamaModel kept(*f, kKeep), dense(*f, kDequantize);
  EXPECT_LT(double(kept.resident_weight_bytes()), 0.25 * double(dense.resident_weight_bytes()));
}

// compressed-tensors weight-only formats take x rounded to BF16 at the BF16 runtime (PackedWeight::act_bf16, as the
// dense BF16 weights do) and F32 x at the F32 runtime; formats with quantized activations keep their own rule.
TEST(WeightLoader, WeightOnlyCompressedTensorsTakeBf16ActivationsAtTheBf16Runtime) {
  const std::string dir = std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/compressed_tensors/";
  const std::vector<std::pair<std::string, bool>> schemes = {
      {"w4a16_g128_sym", true},  {"w4a16_g64_gidx", true},     {"w8a16_g128", true}, {"nvfp4a16", true},
      {"mxfp4a16", true},        {"fp8_weight_only", true},    {"w8a8_int8_dynamic", false},
      {"fp8_dynamic", false},    {"fp8_static", false}};
  const std::vector<RowSlice> q = {{"blk.0.attn_q.weight", 256, {0, 256}}};  // the fixtures' hidden size: 256
  for (const auto& [scheme, weight_only] : schemes)
    for (DType runtime : {DType::BF16, DType::F32}) {
      auto f = open_model(dir + scheme);
      const auto ws = load_linear(*f, {runtime, true}, 256, {0, 256}, q);
      ASSERT_EQ(ws.size(), 1u) << scheme;
      ASSERT_NE(ws[0].format(), WeightFormat::BF16) << scheme;
      ASSERT_NE(ws[0].format(), WeightFormat::F32) << scheme;
      EXPECT_EQ(ws[0].packed().act_bf16, weight_only && runtime == DType::BF16)
          << scheme << " at runtime " << dtype_name(runtime);
    }
}

// Loads tensor `name` [n_out, n_in], columns `cols`, kept (as it is held: format `held`) and dequantized, and checks
// every kept value against the exact one: |kept - exact| <= bound(exact value, its 32-column block's largest |x|).
template <typename Bound>
void expect_held_near_exact(const ModelFile& f, const std::string& name, int64_t n_out, int64_t n_in, Range cols,
                            WeightFormat held, Bound bound) {
  SCOPED_TRACE(name + " columns from " + std::to_string(cols.begin));
  const auto kept = load_linear(f, kKeep, n_in, cols, {{name, n_out, {0, n_out}}});
  const auto dense = load_linear(f, kDequantize, n_in, cols, {{name, n_out, {0, n_out}}});
  ASSERT_EQ(kept[0].format(), held);
  ASSERT_EQ(dense[0].format(), WeightFormat::F32);
  const PackedWeight& p = kept[0].packed();
  std::vector<float> q(size_t(p.n_out * p.n_in));
  dequantize_rows(p, 0, p.n_out, q.data());
  const auto* exact = static_cast<const float*>(dense[0].data());
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t b = 0; b < cols.size() / 32; ++b) {
      float amax = 0;
      for (int64_t c = 32 * b; c < 32 * b + 32; ++c) amax = std::max(amax, std::fabs(exact[r * cols.size() + c]));
      for (int64_t c = 32 * b; c < 32 * b + 32; ++c) {
        const float e = exact[r * cols.size() + c];
        ASSERT_LE(std::fabs(q[size_t(r * cols.size() + c)] - e), bound(e, amax)) << "row " << r << " column " << c;
      }
    }
}

// Logits rel. L2 of model a against model b on one prompt.
double logits_rel_l2(LlamaModel&& a, LlamaModel&& b) {
  const std::vector<int32_t> prompt = {1, 200, 17, 300, 42, 9, 511, 64};
  LocalRunner ra(a, 16), rb(b, 16);
  const std::vector<float> la = ra.seq.feed(prompt), lb = rb.seq.feed(prompt);
  EXPECT_EQ(la.size(), lb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < la.size(); ++i) num += double(la[i] - lb[i]) * (la[i] - lb[i]), den += double(lb[i]) * lb[i];
  return std::sqrt(num / den);
}

// Logits rel. L2 of a GGUF file run with its blocks kept against a synthetic model's F32 source.
double rel_l2_to_source(const ModelFile& f, const SynthSpec& s) {
  const TempDir dir;
  write_synthetic_model(dir.path() + "/src", s);
  auto src = open_model(dir.path() + "/src");
  return logits_rel_l2(LlamaModel(f, kKeep), LlamaModel(*src, kDequantize));
}

// A Q5_K_M file (llama.cpp's, committed: tests/peers/fixtures/gguf/synth_q5_k_m.gguf) loads with its Q5_K / Q5_1 / Q6_K
// / Q8_0 weights kept as they are; dequantized to the runtime dtype with model.quantized: dequantize. Made by
//   tpserve synth --out S --layers 2 --hidden 320 --heads 8 --kv-heads 4 --intermediate 768 --vocab 512 --seed 5
//   tpserve convert --in S --out S.f32.gguf --to gguf-f32
//   llama-quantize S.f32.gguf synth_q5_k_m.gguf Q5_K_M    (320-column linears fall back to Q5_1; ffn_down of layer 0
//                                                          is Q5_K, of layer 1 Q6_K; the lm_head Q8_0)
// Its logits stay near the F32 source's, remade here by the same synth [measured rel. L2 0.091 (0.092 dequantized to
// F32 instead); with the fifth bits of Q5_K's odd sub-blocks read from the even ones' mask — one tensor of the
// file — 0.48] -> 0.15.
TEST(WeightLoader, Q5KMFileKeepsItsQ5Weights) {
  auto f = open_model(std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/gguf/synth_q5_k_m.gguf");
  std::map<DType, int> types;
  for (const TensorView& t : f->tensors()) types[t.dtype]++;
  EXPECT_GT(types[DType::Q5_1], 0);
  EXPECT_EQ(types[DType::Q5_K], 1);
  EXPECT_EQ(types[DType::Q6_K], 1);
  const auto down1 = load_linear(*f, kKeep, 768, {0, 768}, {{"blk.1.ffn_down.weight", 320, {0, 320}}});
  EXPECT_EQ(down1[0].format(), WeightFormat::GgufQ6_K);
  // Q5_K (ffn_down of layer 0), whole and as a row-parallel slice on its super-blocks (columns [512, 768) of 768); Q5_1
  // (attn_q), whole and sliced on its blocks: each as it is.
  const auto exactly = [](float, float) { return 0.0f; };
  expect_held_near_exact(*f, "blk.0.ffn_down.weight", 320, 768, {0, 768}, WeightFormat::GgufQ5_K, exactly);
  expect_held_near_exact(*f, "blk.0.ffn_down.weight", 320, 768, {512, 768}, WeightFormat::GgufQ5_K, exactly);
  expect_held_near_exact(*f, "blk.0.attn_q.weight", 320, 320, {0, 320}, WeightFormat::GgufQ5_1, exactly);
  expect_held_near_exact(*f, "blk.1.attn_q.weight", 320, 320, {160, 320}, WeightFormat::GgufQ5_1, exactly);

  SynthSpec s;
  s.n_layers = 2, s.hidden = 320, s.n_heads = 8, s.n_kv_heads = 4, s.intermediate = 768, s.vocab = 512, s.seed = 5;
  const double rel = rel_l2_to_source(*f, s);
  std::printf("[weight_loader] synthetic Q5_K_M vs its F32 source: logits rel. L2 %.4f\n", rel);
  EXPECT_LT(rel, 0.15);
}

// The types of Q2_K, Q3_K_M and IQ4_XS files (tests/peers/fixtures/gguf/synth_lowbit.gguf, llama-quantize's; how:
// tests/peers/make_lowbit_fixture.sh) load, held as rank/gguf_requantize.h says (the others kept):
//   - Q3_K (ffn_down of layer 1) kept as it is: whole, and sliced on super-blocks; a slice off them is refused naming
//     the type;
//   - IQ4_NL (every attn_q) kept as it is;
//   - IQ4_XS (ffn_down of layer 2) as IQ4_NL with d · (ls − 32) rounded to F16: each value within 2^-11 of itself;
//   - Q2_K (ffn_down of layer 0) kept as it is: whole, and a slice off its super-blocks refused;
// and the model's logits stay near its F32 source's [measured rel. L2 0.197; Q3_K's third bit read from the next
// plane's mask (one tensor): 0.45] -> 0.25, and near its exact decode run dense in F32 (what the held types and
// the kernels' activation rounding add) [measured 0.0136 with Q2_K held as Q8_0 and Q3_K as Q6_K; Q6_K's second and
// fourth planes swapped and IQ4's codes reversed: 0.70] -> 0.03.
TEST(WeightLoader, LowBitFileHoldsItsTypesAsKeptOnes) {
  auto f = open_model(std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/gguf/synth_lowbit.gguf");
  std::map<DType, int> types;
  for (const TensorView& t : f->tensors()) types[t.dtype]++;
  EXPECT_EQ(types[DType::Q2_K], 1);
  EXPECT_EQ(types[DType::Q3_K], 1);
  EXPECT_EQ(types[DType::IQ4_XS], 1);
  EXPECT_EQ(types[DType::IQ4_NL], 3);
  const auto exactly = [](float, float) { return 0.0f; };
  expect_held_near_exact(*f, "blk.1.ffn_down.weight", 320, 768, {0, 768}, WeightFormat::GgufQ3_K, exactly);
  expect_held_near_exact(*f, "blk.1.ffn_down.weight", 320, 768, {256, 768}, WeightFormat::GgufQ3_K, exactly);
  expect_held_near_exact(*f, "blk.0.attn_q.weight", 320, 320, {0, 320}, WeightFormat::GgufIq4Nl, exactly);
  expect_held_near_exact(*f, "blk.2.attn_q.weight", 320, 320, {160, 320}, WeightFormat::GgufIq4Nl, exactly);
  const auto f16_scale = [](float e, float) { return std::fabs(e) * 0x1p-11f + 1e-12f; };
  expect_held_near_exact(*f, "blk.2.ffn_down.weight", 320, 768, {0, 768}, WeightFormat::GgufIq4Nl, f16_scale);
  expect_held_near_exact(*f, "blk.2.ffn_down.weight", 320, 768, {384, 768}, WeightFormat::GgufIq4Nl, f16_scale);
  expect_held_near_exact(*f, "blk.0.ffn_down.weight", 320, 768, {0, 768}, WeightFormat::GgufQ2_K, exactly);
  try {
    load_linear(*f, kKeep, 768, {384, 768}, {{"blk.0.ffn_down.weight", 320, {0, 320}}});
    FAIL() << "a Q2_K slice off its super-blocks was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("q2_k blocks of 256 columns"), std::string::npos) << e.what();
  }
  try {
    load_linear(*f, kKeep, 768, {0, 384}, {{"blk.1.ffn_down.weight", 320, {0, 320}}});
    FAIL() << "a Q3_K slice off its super-blocks was accepted";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.1.ffn_down.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q3_k blocks of 256 columns"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 384) of 768"), std::string::npos) << msg;
  }

  SynthSpec s;
  s.n_layers = 3, s.hidden = 320, s.n_heads = 8, s.n_kv_heads = 4, s.intermediate = 768, s.vocab = 512, s.seed = 7;
  const double rel = rel_l2_to_source(*f, s);
  const double held = logits_rel_l2(LlamaModel(*f, kKeep), LlamaModel(*f, kDequantize));
  std::printf(
      "[weight_loader] synthetic low-bit mix vs its F32 source: logits rel. L2 %.4f; vs its exact decode %.4f\n", rel,
      held);
  EXPECT_LT(rel, 0.25);
  EXPECT_LT(held, 0.03);
}

TEST(WeightLoader, RealQ4_1ModelKeepsItsBlocks) {
  TP_REQUIRE_REAL_MODEL();
  auto f = open_model(test::real_model_path());
  const ModelConfig& c = f->config();
  const auto qkv = load_linear(*f, kKeep, c.hidden, {0, c.hidden},
                               {{"blk.0.attn_q.weight", c.hidden, {0, c.hidden}},
                                {"blk.0.attn_k.weight", c.n_kv_heads * c.head_dim, {0, c.n_kv_heads * c.head_dim}}});
  ASSERT_EQ(qkv.size(), 1u);
  EXPECT_EQ(qkv[0].format(), WeightFormat::GgufQ4_1);
  const auto head = load_linear(*f, kKeep, c.hidden, {0, c.hidden}, {{"token_embd.weight", c.vocab, {0, 64}}});
  EXPECT_EQ(head[0].format(), WeightFormat::GgufQ8_0);  // the tied lm_head: the embedding's Q8_0 blocks

  LlamaModel kept_model(*f, WeightLoadOptions{DType::BF16, true});
  LlamaModel bf16_model(*f, WeightLoadOptions{DType::BF16, false});
  const double ratio = double(bf16_model.resident_weight_bytes()) / double(kept_model.resident_weight_bytes());
  std::printf("[weight_loader] SmolLM2 Q4_1 resident: kept %.1f MiB, dequantized to BF16 %.1f MiB (%.2fx)\n",
              double(kept_model.resident_weight_bytes()) / (1 << 20),
              double(bf16_model.resident_weight_bytes()) / (1 << 20), ratio);
  // Exactly the file's bytes: every linear's blocks, the tied lm_head's Q8_0 copy of token_embd, the mapped
  // embedding rows (token_embd again: read through the mapping) and the F32 norms. The Q4_1 linears are 1/3.2
  // of their BF16 bytes; the Q8_0 lm_head 1/1.88; the mapped embedding counts the same in both (2.36x in all).
  int64_t file_bytes = 0;
  for (const TensorView& t : f->tensors()) file_bytes += t.n_bytes * (t.name == "token_embd.weight" ? 2 : 1);
  EXPECT_EQ(kept_model.resident_weight_bytes(), file_bytes);
  EXPECT_GT(ratio, 2.3);
}

}  // namespace
}  // namespace tp
