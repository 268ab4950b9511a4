// compressed-tensors loading (rank/compressed_tensors.h): the config parsed field by field and every unknown or
// unsupported field / value refused naming it; scheme matching (exact name > regex > class, ignore); the TP
// slices of the committed llm-compressor checkpoints equal the same rows / columns of the whole weight
// (dequantized), for every format; cuts inside a group refused with the tp degrees that fit; an act-order slice
// keeps its columns' groups; sharded safetensors load the same weights; KV cache scales are exposed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/packed_weight.h"
#include "rank/compressed_tensors.h"
#include "rank/hf_dir.h"
#include "rank/model_file.h"
#include "rank/safetensors_file.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fixture(const std::string& scheme) {
  return std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/compressed_tensors/" + scheme;
}

const char* kW4a16 = R"({
  "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
  "global_compression_ratio": null, "ignore": ["lm_head"], "kv_cache_scheme": null, "sparsity_config": {},
  "transform_config": {}, "version": "0.19.0",
  "config_groups": {"group_0": {"format": "pack-quantized", "input_activations": null, "output_activations": null,
    "targets": ["Linear"], "weights": {"actorder": null, "block_structure": null, "dynamic": false,
    "group_size": 128, "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "scale_dtype": null,
    "strategy": "group", "symmetric": true, "type": "int", "zp_dtype": null}}}})";

TEST(CtConfig, ParsesW4A16) {
  const CtConfig c = parse_ct_config(kW4a16, "config.json");
  EXPECT_EQ(c.format, CtFormat::PackQuantized);
  ASSERT_EQ(c.schemes.size(), 1u);
  const CtScheme& s = c.schemes[0];
  ASSERT_TRUE(s.weights);
  EXPECT_EQ(s.weights->num_bits, 4);
  EXPECT_EQ(s.weights->strategy, CtStrategy::Group);
  EXPECT_EQ(s.weights->group_size, 128);
  EXPECT_FALSE(s.input_activations);
  EXPECT_EQ(c.ignore, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(ct_scheme_for(c, "model.layers.0.self_attn.q_proj"), &s);
  EXPECT_EQ(ct_scheme_for(c, "lm_head"), nullptr);
}

// Replaces the value at a JSON pointer of kW4a16 (or removes it when `value` is empty) and expects a
// FormatError whose message holds every string of `want`.
struct Bad {
  std::string pointer, value;
  std::vector<std::string> want;
};

TEST(CtConfig, RefusesWhatItDoesNotKnow) {
  const std::vector<Bad> cases = {
      {"/quant_method", "\"gptq\"", {"quantization_config.quant_method", "gptq"}},
      {"/format", "\"marlin-24\"", {"quantization_config.format", "marlin-24"}},
      {"/format", "\"mxfp8-quantized\"", {"quantization_config.format", "mxfp8-quantized"}},
      {"/config_groups/group_0/format", "\"sparse-24-bitmask\"", {"config_groups.group_0.format", "sparse-24-bitmask"}},
      {"/quantization_status", "\"frozen\"", {"quantization_status", "frozen"}},
      {"/new_field_from_a_newer_tool", "1", {"quantization_config.new_field_from_a_newer_tool", "unknown field"}},
      {"/config_groups/group_0/weights/strategy", "\"attn_head\"", {"group_0.weights.strategy", "attn_head"}},
      {"/config_groups/group_0/weights/type", "\"mx\"", {"group_0.weights.type", "mx"}},
      {"/config_groups/group_0/weights/num_bits", "5", {"group_0.weights.num_bits", "5-bit"}},
      {"/config_groups/group_0/weights/actorder", "\"sideways\"", {"group_0.weights.actorder", "sideways"}},
      {"/config_groups/group_0/weights/dynamic", "\"sometimes\"", {"group_0.weights.dynamic", "sometimes"}},
      {"/config_groups/group_0/weights/group_size", "0", {"group_0.weights.group_size"}},
      {"/config_groups/group_0/weights/hadamard", "true", {"group_0.weights.hadamard", "unknown field"}},
      {"/config_groups/group_0/weights/scale_dtype", "\"torch.float4_e2m1\"", {"scale_dtype", "float4_e2m1"}},
      {"/config_groups/group_0/output_activations", R"({"num_bits": 8})", {"group_0.output_activations"}},
      {"/config_groups/group_0/input_activations", R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true, "symmetric": false})",
       {"group_0.input_activations.symmetric", "asymmetric"}},
      {"/config_groups/group_0/input_activations", R"({"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": true})",
       {"group_0.input_activations.strategy", "per-batch"}},
      {"/config_groups/group_0/input_activations", R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"})",
       {"group_0.input_activations.num_bits", "FP4 activations"}},
      {"/config_groups/group_0/targets", "[\"re:(unclosed\"]", {"group_0.targets", "(unclosed"}},
      // ignore's regexes are checked as targets' are (an invalid one threw std::regex_error at the first lookup);
      // patterns that would hang or overflow the stack are refused (found by tests/fuzz/ct_config_fuzz.cpp):
      {"/ignore", "[\"re:(unclosed\"]", {"quantization_config.ignore", "(unclosed", "does not compile"}},
      {"/config_groups/group_0/targets", "[\"re:(.*)*(.*)*x$\"]", {"group_0.targets", "exponential time"}},
      {"/ignore", "[\"re:(a|ab)+c\"]", {"quantization_config.ignore", "repeats or alternates"}},
      {"/config_groups/group_0/targets", "[\"re:" + std::string(20000, '(') + "a" + std::string(20000, ')') + "\"]",
       {"group_0.targets", "40001 characters (at most 512)"}},
      {"/config_groups/group_0/targets", "[\"re:" + std::string(17, '(') + "a" + std::string(17, ')') + "\"]",
       {"group_0.targets", "nested more than 16 deep"}},
      {"/config_groups/group_0/targets", "[\"re:a{2,1000}\"]", {"group_0.targets", "repetition count over 256"}},
      {"/config_groups/group_0/targets", "[\"re:.*+mlp\\\\..*_proj$\"]", {"group_0.targets", "a repetition of a repetition"}},
      {"/ignore", "[\"re:a{2}*b\"]", {"quantization_config.ignore", "a repetition of a repetition"}},
      {"/sparsity_config", R"({"format": "sparse-bitmask"})", {"sparsity_config", "sparse"}},
      {"/transform_config", R"({"config_groups": {"u": {}}})", {"transform_config"}},
      {"/kv_cache_scheme", R"({"num_bits": 4, "type": "int"})", {"kv_cache_scheme.num_bits", "4-bit"}},
      {"/config_groups", "\"W4A16\"", {"config_groups"}},
  };
  for (const Bad& b : cases) {
    json j = json::parse(kW4a16);
    j[json::json_pointer(b.pointer)] = json::parse(b.value);
    try {
      parse_ct_config(j.dump(), "config.json");
      ADD_FAILURE() << b.pointer << " = " << b.value << " was accepted";
    } catch (const FormatError& e) {
      for (const std::string& w : b.want) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what() << " lacks " << w;
    }
  }
}

TEST(CtConfig, MatchingPrecedenceAndIgnore) {
  json j = json::parse(kW4a16);
  json g = j["config_groups"]["group_0"];
  j["config_groups"]["by_class"] = g;
  j["config_groups"]["by_regex"] = g;
  j["config_groups"]["by_name"] = g;
  j["config_groups"]["by_regex"]["targets"] = {"re:.*mlp\\..*"};
  j["config_groups"]["by_name"]["targets"] = {"model.layers.1.mlp.up_proj"};
  j["config_groups"].erase("group_0");
  j["config_groups"]["by_class"]["targets"] = {"Linear"};
  j["ignore"] = {"lm_head", "re:.*layers\\.3\\..*"};
  const CtConfig c = parse_ct_config(j.dump(), "config.json");
  auto name_of = [&](const std::string& m) {
    const CtScheme* s = ct_scheme_for(c, m);
    return s ? s->name : std::string("(dense)");
  };
  EXPECT_EQ(name_of("model.layers.1.mlp.up_proj"), "by_name");
  EXPECT_EQ(name_of("model.layers.1.mlp.down_proj"), "by_regex");
  EXPECT_EQ(name_of("model.layers.1.self_attn.q_proj"), "by_class");
  EXPECT_EQ(name_of("model.layers.3.mlp.up_proj"), "(dense)");
  EXPECT_EQ(name_of("lm_head"), "(dense)");
  // re: is Python's re.match: anchored at the start only.
  EXPECT_EQ(name_of("xmodel.layers.1.mlp.up_proj"), "by_regex");  // ".*mlp" matches from the start anyway
}

// Targets of real checkpoints pass the regex limits (regex_target_problem) and match as Python's re.match would.
TEST(CtConfig, RealWorldRegexTargetsAccepted) {
  const std::vector<std::pair<std::string, std::string>> cases = {  // target, a module it matches
      {"re:.*lm_head", "lm_head"},
      {"re:.*mlp.gate$", "model.layers.0.mlp.gate"},
      {"re:.*self_attn.(q|k|v)_proj$", "model.layers.2.self_attn.k_proj"},
      {"re:model.layers.\\d+.mlp.experts.\\d+.(gate|up|down)_proj$", "model.layers.3.mlp.experts.17.up_proj"},
      {"re:^model\\.layers\\.(0|1|2|31)\\..*", "model.layers.31.mlp.down_proj"},
      {"re:(?:vision_tower|multi_modal_projector).*", "vision_tower.blocks.0.attn"},
      {"re:.*layers\\.[0-9]{1,2}\\.mlp\\.(gate|up)_proj", "model.layers.10.mlp.gate_proj"},
      {"re:.*[(].*", "a(b"},  // a '(' inside a bracket expression is a literal, not a group
      {"re:(model\\.layers\\.\\d+\\.)?mlp\\..*", "model.layers.4.mlp.down_proj"},  // optional, not repeated
  };
  for (const auto& [target, module] : cases) {
    json j = json::parse(kW4a16);
    j["config_groups"]["group_0"]["targets"] = {target};
    j["ignore"] = json::array();
    const CtConfig c = parse_ct_config(j.dump(), "config.json");
    EXPECT_NE(ct_scheme_for(c, module), nullptr) << target << " on " << module;
  }
}

TEST(CtNames, CanonicalNamesOfQuantizedTensors) {
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.q_proj.weight_packed"), "blk.3.attn_q.weight_packed");
  EXPECT_EQ(hf_to_canonical_name("model.layers.0.mlp.down_proj.weight_zero_point"), "blk.0.ffn_down.weight_zero_point");
  EXPECT_EQ(hf_to_canonical_name("model.layers.2.self_attn.k_scale"), "blk.2.attn_k_scale");
  EXPECT_EQ(hf_to_canonical_name("lm_head.weight_scale"), "output.weight_scale");
  EXPECT_EQ(canonical_to_hf_name("blk.1.ffn_gate.input_scale"), "model.layers.1.mlp.gate_proj.input_scale");
  EXPECT_EQ(ct_module_name("blk.1.attn_output.weight"), "model.layers.1.self_attn.o_proj");
}

// Dequantized rows [r0, r1) × columns [c0, c1) of the whole tensor `name`.
std::vector<float> window(const ModelFile& f, const std::string& name, int64_t n_out, int64_t n_in, Range rows, Range cols) {
  const CtScheme* s = ct_quantized_scheme(f, *f.quantization(), name);
  EXPECT_NE(s, nullptr) << name;
  const PackedWeight w = ct_load_slice(f, *s, n_in, {0, n_in}, {{name, n_out, {0, n_out}}});
  std::vector<float> all(size_t(n_out * n_in)), out;
  dequantize_rows(w, 0, n_out, all.data());
  for (int64_t r = rows.begin; r < rows.end; ++r)
    for (int64_t c = cols.begin; c < cols.end; ++c) out.push_back(all[size_t(r * n_in + c)]);
  return out;
}

std::vector<float> slice(const ModelFile& f, const std::string& name, int64_t n_out, int64_t n_in, Range rows, Range cols) {
  const CtScheme* s = ct_quantized_scheme(f, *f.quantization(), name);
  const PackedWeight w = ct_load_slice(f, *s, n_in, cols, {{name, n_out, rows}});
  std::vector<float> out(size_t(rows.size() * cols.size()));
  dequantize_rows(w, 0, rows.size(), out.data());
  return out;
}

// Every scheme: column-parallel rows (q_proj, k_proj at tp 2 and 4 — k's 128 rows cut at 64 / 32, inside the
// 128-row FP8 blocks) and row-parallel columns (o_proj at tp 2, down_proj at tp 2 and 4 where the groups allow).
TEST(CtSlices, EqualTheWholeWeightsRowsAndColumns) {
  const char* schemes[] = {"w4a16_g128_sym", "w4a16_g128_asym",    "w4a16_g128_lm_head",       "w4a16_g64_gidx",
                           "w8a16_g128",     "w8a16_channel_asym", "w8a8_int8_dynamic",        "fp8_dynamic",
                           "fp8_static",     "fp8_block",          "fp8_weight_only",          "nvfp4a16",
                           "mxfp4a16",       "mixed_w8a16_w4a16",  "mixed_precision_fp8_w4a16"};
  for (const char* scheme : schemes) {
    SCOPED_TRACE(scheme);
    auto f = open_model(fixture(scheme));
    for (int tp : {2, 4}) {
      for (int rank = 0; rank < tp; ++rank) {
        const Range qr{256 / tp * rank, 256 / tp * (rank + 1)}, kr{128 / tp * rank, 128 / tp * (rank + 1)};
        EXPECT_EQ(slice(*f, "blk.0.attn_q.weight", 256, 256, qr, {0, 256}), window(*f, "blk.0.attn_q.weight", 256, 256, qr, {0, 256}));
        EXPECT_EQ(slice(*f, "blk.0.attn_k.weight", 128, 256, kr, {0, 256}), window(*f, "blk.0.attn_k.weight", 128, 256, kr, {0, 256}));
        const Range dc{512 / tp * rank, 512 / tp * (rank + 1)};
        EXPECT_EQ(slice(*f, "blk.0.ffn_down.weight", 256, 512, {0, 256}, dc), window(*f, "blk.0.ffn_down.weight", 256, 512, {0, 256}, dc));
        const Range oc{256 / tp * rank, 256 / tp * (rank + 1)};
        const bool g128 = std::string(scheme) == "w4a16_g128_sym" || std::string(scheme) == "w4a16_g128_asym" ||
                          std::string(scheme) == "w4a16_g128_lm_head" || std::string(scheme) == "fp8_block" ||
                          std::string(scheme) == "w8a16_g128";
        if (tp == 4 && g128) {  // 64 columns: inside a 128-column group
          try {
            slice(*f, "blk.0.attn_output.weight", 256, 256, {0, 256}, oc);
            ADD_FAILURE() << "a cut inside a group was accepted";
          } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("at tp 1, 2"), std::string::npos) << e.what();
          }
        } else {
          EXPECT_EQ(slice(*f, "blk.0.attn_output.weight", 256, 256, {0, 256}, oc),
                    window(*f, "blk.0.attn_output.weight", 256, 256, {0, 256}, oc));
        }
      }
    }
  }
}

// A quantized lm_head (llm-compressor with nothing ignored: lm_head.weight_packed beside the dense embedding) is
// "output.weight" with its scheme, vocab-parallel: each rank's vocabulary rows with their scales.
TEST(CtSlices, QuantizedLmHeadSlicesByVocabRows) {
  auto f = open_model(fixture("w4a16_g128_lm_head"));
  EXPECT_FALSE(f->config().tied_embeddings);
  ASSERT_NE(ct_quantized_scheme(*f, *f->quantization(), "output.weight"), nullptr);
  EXPECT_EQ(ct_quantized_scheme(*f, *f->quantization(), "token_embd.weight"), nullptr);
  for (int tp : {1, 2, 3}) {
    const int64_t per = (512 + tp - 1) / tp;
    for (int rank = 0; rank < tp; ++rank) {
      const Range v{per * rank, std::min<int64_t>(512, per * (rank + 1))};
      EXPECT_EQ(slice(*f, "output.weight", 512, 256, v, {0, 256}), window(*f, "output.weight", 512, 256, v, {0, 256}))
          << "tp " << tp << " rank " << rank;
    }
  }
}

// An act-order slice keeps only the groups its columns use, renumbered, with those groups' scales.
TEST(CtSlices, ActOrderSliceKeepsItsGroups) {
  auto f = open_model(fixture("w4a16_g64_gidx"));
  const CtScheme* s = ct_quantized_scheme(*f, *f->quantization(), "blk.0.ffn_down.weight");
  ASSERT_NE(s, nullptr);
  const PackedWeight w = ct_load_slice(*f, *s, 512, {100, 164}, {{"blk.0.ffn_down.weight", 256, {0, 256}}});
  EXPECT_EQ(w.n_in, 64);
  ASSERT_EQ(w.g_idx.size(), 64u);
  EXPECT_GT(w.g_idx_groups, 1);   // 64 columns from a random order touch several of the 8 groups
  EXPECT_LE(w.g_idx_groups, 8);
  EXPECT_EQ(int64_t(w.scales.size()), 256 * w.g_idx_groups);
}

TEST(CtSlices, StacksFusedPartsAndRefusesMissingTensors) {
  auto f = open_model(fixture("fp8_static"));
  const CtScheme* s = ct_quantized_scheme(*f, *f->quantization(), "blk.0.attn_q.weight");
  ASSERT_NE(s, nullptr);
  // q|k|v of one layer share the input (and its static scale): one weight, per-tensor scales made per row.
  ASSERT_TRUE(ct_can_stack(*f, "blk.0.attn_q.weight", "blk.0.attn_k.weight"));
  const PackedWeight w = ct_load_slice(*f, *s, 256, {0, 256},
                                       {{"blk.0.attn_q.weight", 256, {0, 256}}, {"blk.0.attn_k.weight", 128, {0, 128}},
                                        {"blk.0.attn_v.weight", 128, {0, 128}}});
  EXPECT_EQ(w.n_out, 512);
  EXPECT_EQ(w.scales.size(), 512u);
  EXPECT_EQ(w.act, ActQuant::Fp8Static);
  EXPECT_GT(w.act_scale, 0.0f);
  EXPECT_THROW(ct_load_slice(*f, *s, 256, {0, 256}, {{"blk.9.attn_q.weight", 256, {0, 256}}}), FormatError);
}

// A checkpoint split into two shards with an index loads the same tensors; KV cache scales are exposed.
TEST(CtSharded, ShardsAndKvScales) {
  test::TempDir dir;
  const std::string src = fixture("w4a16_g128_asym"), dst = dir.file("model");
  fs::create_directories(dst);
  SafetensorsFile whole(src + "/model.safetensors");
  std::vector<SafetensorsOut> a, b;
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  size_t k = 0;
  for (const SafetensorsTensor& t : whole.tensors()) {
    SafetensorsOut o{t.name, t.dtype, t.shape, [p = t.data, n = t.n_bytes](uint8_t* d) { std::memcpy(d, p, size_t(n)); }, t.raw};
    const bool first = k++ % 2 == 0;
    (first ? a : b).push_back(o);
    index["weight_map"][t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  for (const std::string kv : {"k_scale", "v_scale"}) {
    const float v = kv == "k_scale" ? 0.25f : 0.5f;
    const std::string name = "model.layers.0.self_attn." + kv;
    b.push_back({name, DType::F32, {}, [v](uint8_t* d) { std::memcpy(d, &v, 4); }});
    index["weight_map"][name] = "model-00002-of-00002.safetensors";
  }
  write_safetensors(dst + "/model-00001-of-00002.safetensors", a);
  write_safetensors(dst + "/model-00002-of-00002.safetensors", b);
  test::write_string(dst + "/model.safetensors.index.json", index.dump());
  json cfg = json::parse(std::ifstream(src + "/config.json"));
  cfg["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                                                   {"dynamic", false}, {"symmetric", true}};
  test::write_string(dst + "/config.json", cfg.dump());

  auto one = open_model(src);
  auto sharded = open_model(dst);
  ASSERT_NE(sharded->quantization(), nullptr);
  ASSERT_TRUE(sharded->quantization()->kv_cache_scheme);
  EXPECT_EQ(sharded->quantization()->kv_cache_scheme->type, CtType::Float);
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"}) {
    const int64_t n_in = std::string(name).find("down") != std::string::npos ? 512 : 256;
    EXPECT_EQ(window(*one, name, 256, n_in, {0, 256}, {0, n_in}), window(*sharded, name, 256, n_in, {0, 256}, {0, n_in}));
  }
  const auto kv = kv_cache_scales(*sharded, 0);
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->k_scale, 0.25f);
  EXPECT_EQ(kv->v_scale, 0.5f);
  EXPECT_FALSE(kv_cache_scales(*sharded, 1));
  EXPECT_FALSE(kv_cache_scales(*one, 0));
  // Every layer's, for the pool: none without them; refused when some layer lacks them, naming it.
  EXPECT_FALSE(kv_cache_scales_all(*one, 2));
  const auto first = kv_cache_scales_all(*sharded, 1);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first, std::vector<float>{0.25f});
  EXPECT_EQ(first->second, std::vector<float>{0.5f});
  try {
    kv_cache_scales_all(*sharded, 2);
    ADD_FAILURE() << "scales for layer 0 only were accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.k_scale: KV cache scales are given for layer 0 but "
                                         "not for layer 1"),
              std::string::npos)
        << e.what();
  }
}

// NVFP4 with FP4 activations (W4A4) as llm-compressor writes it: refused at open, naming the field.
TEST(CtRefused, Fp4ActivationsCheckpoint) {
  try {
    open_model(fixture("nvfp4_w4a4"));
    ADD_FAILURE() << "a W4A4 checkpoint was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("input_activations.num_bits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FP4 activations"), std::string::npos) << e.what();
  }
}

// A mixed-precision checkpoint: each group keeps its own format.
TEST(CtConfig, MixedPrecisionGroupsKeepTheirFormats) {
  auto f = open_model(fixture("mixed_precision_fp8_w4a16"));
  const CtConfig& c = *f->quantization();
  EXPECT_TRUE(c.mixed_precision);
  const CtScheme* attn = ct_quantized_scheme(*f, c, "blk.0.attn_q.weight");
  const CtScheme* mlp = ct_quantized_scheme(*f, c, "blk.0.ffn_up.weight");
  ASSERT_TRUE(attn && mlp);
  EXPECT_EQ(attn->format, CtFormat::NaiveQuantized);
  EXPECT_EQ(mlp->format, CtFormat::PackQuantized);
  EXPECT_EQ(ct_quantized_scheme(*f, c, "output.weight"), nullptr);  // lm_head ignored: dense
}

// An FP8 weight holding E4M3's NaN code is refused at load, naming the tensor and the element.
TEST(CtRefused, Fp8NaNWeight) {
  test::TempDir dir;
  const std::string src = fixture("fp8_weight_only"), dst = dir.file("model");
  fs::create_directories(dst);
  fs::copy_file(src + "/config.json", dst + "/config.json");
  std::vector<uint8_t> bytes = test::read_bytes(src + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json h = json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n)));
  const uint64_t begin = h["model.layers.1.self_attn.o_proj.weight"]["data_offsets"][0].get<uint64_t>();
  bytes[8 + n + begin + 3 * 256 + 7] = 0xff;  // [3, 7]
  test::write_bytes(dst + "/model.safetensors", bytes);
  auto f = open_model(dst);
  const CtScheme* s = ct_quantized_scheme(*f, *f->quantization(), "blk.1.attn_output.weight");
  ASSERT_NE(s, nullptr);
  try {
    ct_load_slice(*f, *s, 256, {0, 256}, {{"blk.1.attn_output.weight", 256, {0, 256}}});
    ADD_FAILURE() << "a NaN weight was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("o_proj.weight: holds NaN at [3, 7]"), std::string::npos) << e.what();
  }
}

// A raw (integer) tensor is refused where a float one is required.
TEST(CtRaw, RequireRefusesRawTensors) {
  auto f = open_model(fixture("w8a8_int8_dynamic"));
  try {
    f->require("blk.0.attn_q.weight", {256, 256});
    ADD_FAILURE() << "an I8 tensor was accepted as a float tensor";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("I8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tp
