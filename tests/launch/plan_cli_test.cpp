// `tpserve plan` as a user runs it: the table and --json for gpt-oss-120b and Llama-3.3-70B on 80 GB H100s
// (the seed's figures; the arithmetic itself is tests/kvstore/capacity_test), the real SmolLM2 model file
// (what the CPU engine reports at start-up), the model cards' consistency, and bad input.
// An "80 GB" H100 is passed as 80GiB: its memory is 80 x 2^30 bytes (nvidia-smi: 81559 MiB usable).
#include <gtest/gtest.h>

#include "tests/util/run_tpserve.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

using tp::test::Result;

Result run(const std::string& args) { return tp::test::run_tpserve(args); }

nlohmann::json run_json(const std::string& args) {
  const Result r = run("plan " + args + " --json");
  EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.out;
    return {};
  }
}

std::string source_dir() { return TPSERVE_SOURCE_DIR; }
std::string gguf() { return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

void expect_has(const std::string& out, const std::string& what) {
  EXPECT_NE(out.find(what), std::string::npos) << "missing: " << what << "\n" << out;
}

TEST(PlanCli, GptOssOneH100Mxfp4Table) {
  const Result r = run("plan --model gpt-oss-120b --gpu-mem 80GiB --gpus 1 --tp 1 --weights mxfp4");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_has(r.out, "116.83 B total, 5.13 B active per token, 114.70 B in experts");
  expect_has(r.out, "sliding window of 128 tokens in 18 of 36 layers");
  expect_has(r.out, "mxfp4 (4.25 bits) for 114.70 B expert params + bf16 for 2.13 B: 65.19 GB total, 65.19 GB per rank");
  expect_has(r.out, "73728 B (72.00 KiB) all layers, 36864 B (36.00 KiB) past the 128-token window");
  expect_has(r.out, "2048: 80.22 MB, 8192: 306.71 MB, 32768: 1.21 GB, 131072: 4.84 GB");
  expect_has(r.out, "17.49 GB per rank = 85.90 GB - 65.19 GB weights - 3.22 GB reserve");
  expect_has(r.out, "static 131072-token reservation: 3 per replica");
  expect_has(r.out, "paged at a mean 8192 tokens: 56 per replica");
  expect_has(r.out, "fits            yes");
  expect_has(r.out, "max concurrency: 3 at the max context of 131072 tokens");
}

TEST(PlanCli, GptOssOneH100Mxfp4Json) {
  const auto j = run_json("--model gpt-oss-120b --gpu-mem 80GiB --gpus 1 --tp 1 --weights mxfp4");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["kv"]["bytes_per_token"], 72 * 1024);       // seed: 72 KiB/token full
  EXPECT_EQ(j["kv"]["long_bytes_per_token"], 36 * 1024);  // seed: ≈ 36 KiB effective
  // Seed: ≈ 75 MB at 2k ... 4.8 GB at 128k (36 KiB x tokens; the sliding windows add a fixed 4.7 MB).
  const std::pair<const char*, double> seeds[] = {{"2048", 75e6}, {"8192", 300e6}, {"32768", 1.2e9}, {"131072", 4.8e9}};
  for (const auto& [tokens, seed] : seeds) {
    const double bytes = j["kv"]["bytes_per_sequence"][tokens].get<double>();
    EXPECT_GE(bytes, seed) << tokens;
    EXPECT_LE(bytes, seed * 1.07) << tokens;
  }
  EXPECT_EQ(j["weights"]["bytes_per_rank"], 65'190'340'224);
  const int64_t budget = j["kv"]["budget_bytes_per_rank"];
  EXPECT_GE(budget, 15'000'000'000);  // seed: 15–20 GB left for KV
  EXPECT_LE(budget, 20'000'000'000);
  EXPECT_EQ(j["concurrency"]["static_per_replica"], 3);  // seed: ≈ 3 users at a 128k reservation
  EXPECT_GE(j["concurrency"]["paged_per_replica"], 50);  // seed: 50–60 at 8k paged
  EXPECT_LE(j["concurrency"]["paged_per_replica"], 60);
  EXPECT_EQ(j["min_gpus_for_weights"], 1);  // seed: MXFP4 MoE weights fit one GPU
  EXPECT_EQ(j["fits"], true);
  EXPECT_TRUE(j["smallest_tp_that_fits"].is_null());
}

TEST(PlanCli, GptOssBf16NeedsThreeGpusAndTpFour) {
  const auto j = run_json("--model gpt-oss-120b --gpu-mem 80GiB --gpus 8 --tp 1 --weights bf16");
  ASSERT_TRUE(j.is_object());
  const double total = j["weights"]["bytes_total"].get<double>();
  EXPECT_NEAR(total / 234e9, 1.0, 0.005);  // seed: 117 B params in BF16 ≈ 234 GB
  EXPECT_EQ(j["min_gpus_for_weights"], 3);  // seed: 3 GPUs of 80 GB
  EXPECT_EQ(j["fits"], false);
  EXPECT_EQ(j["smallest_tp_that_fits"], 4);  // 3 does not divide the 64 heads
  EXPECT_EQ(j["setup"]["dp"], 8);
  const Result r = run("plan --model gpt-oss-120b --gpu-mem 80GiB --gpus 2 --tp 1 --weights bf16");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_has(r.out, "fits            no: weights 233.66 GB per rank + reserve 3.22 GB exceed 85.90 GB");
  expect_has(r.out, "need >= 3 GPUs");
  expect_has(r.out, "smallest tp     4 fits");
  expect_has(r.out, "needs 4 GPUs");
}

TEST(PlanCli, Llama70bKvAndReplication) {
  const auto oss = run_json("--model gpt-oss-120b --gpu-mem 80GiB --weights mxfp4");
  const auto j = run_json("--model Llama-3.3-70B --gpu-mem 80GiB --gpus 8 --tp 4");
  ASSERT_TRUE(j.is_object() && oss.is_object());
  EXPECT_EQ(j["kv"]["bytes_per_token"], 320 * 1024);  // seed: ≈ 320 KiB/token
  EXPECT_NEAR(j["kv"]["bytes_per_token"].get<double>() / oss["kv"]["long_bytes_per_token"].get<double>(), 9.0, 0.15);
  EXPECT_EQ(j["kv"]["local_kv_heads"], 2);
  EXPECT_EQ(j["kv"]["bytes_per_token_per_rank"], 80 * 1024);
  EXPECT_EQ(j["setup"]["dp"], 2);
  EXPECT_EQ(j["concurrency"]["paged_total"], 2 * j["concurrency"]["paged_per_replica"].get<int64_t>());
  EXPECT_EQ(j["fits"], true);
  // tp 16 > 8 KV heads: each rank holds one KV head, replicated on 2 ranks.
  const auto r16 = run_json("--model Llama-3.3-70B --gpu-mem 80GiB --gpus 16 --tp 16");
  EXPECT_EQ(r16["kv"]["local_kv_heads"], 1);
  EXPECT_EQ(r16["kv"]["replicated"], true);
  EXPECT_EQ(r16["kv"]["bytes_per_token_per_rank"], 40 * 1024);
  const Result t = run("plan --model Llama-3.3-70B --gpu-mem 80GiB --gpus 16 --tp 16");
  expect_has(t.out, "40960 B (40.00 KiB) (1 KV head, each replicated on 2 ranks)");
  // BF16 70B on one H100: does not fit; at the 128k context tp 4 is the smallest that does.
  const Result one = run("plan --model Llama-3.3-70B --gpu-mem 80GiB --gpus 1 --tp 1");
  ASSERT_EQ(one.code, 0) << one.out;
  expect_has(one.out, "KV capacity     none");
  expect_has(one.out, "smallest tp     4 fits");
}

// One source of truth: for every cache.dtype, `tpserve plan` on the real model prints exactly the capacity lines
// that the running engine prints at start-up (tpserve generate, 512 MiB, blocks of 16, max context 8192; bf16 is
// configs/default.yaml) — and those are the figures below — and the pool the rank allocated holds exactly
// that many blocks of that many bytes ("rank 0 ...: KV pool <dtype> N blocks × 16 tokens = B bytes").
// bf16 holds 2x the blocks of f32, fp8_e4m3 4x, int8 3.98x (its 720 B of scales per block).
TEST(PlanCli, RealModelFileMatchesEngineReportForEveryKvDtype) {
  struct Case {
    const char* dtype;
    const char* plan_name;  // what --kv-dtype is given
    int64_t block_bytes, n_blocks;
    std::string report;
  };
  const Case cases[] = {
      {"f32", "f32", 737280, 728,
       "KV cache per rank: 46080 B/token (2 x 30 layers x 3 KV heads x 64 x 4 B f32), block 16 tokens = 737280 B\n"
       "KV pool per rank: 728 blocks = 11648 tokens in 536870912 B (512.00 MiB)\n"
       "max concurrency: 1 at the max context of 8192 tokens, 5 at 2048, 1 at 8192\n"},
      {"bf16", "bf16", 368640, 1456,
       "KV cache per rank: 23040 B/token (2 x 30 layers x 3 KV heads x 64 x 2 B bf16), block 16 tokens = 368640 B\n"
       "KV pool per rank: 1456 blocks = 23296 tokens in 536870912 B (512.00 MiB)\n"
       "max concurrency: 2 at the max context of 8192 tokens, 11 at 2048, 2 at 8192\n"},
      {"fp8_e4m3", "fp8", 184320, 2912,
       "KV cache per rank: 11520 B/token (2 x 30 layers x 3 KV heads x 64 x 1 B fp8_e4m3), block 16 tokens = 184320 B\n"
       "KV pool per rank: 2912 blocks = 46592 tokens in 536870912 B (512.00 MiB)\n"
       "max concurrency: 5 at the max context of 8192 tokens, 22 at 2048, 5 at 8192\n"},
      {"int8", "int8", 185040, 2901,
       "KV cache per rank: 11520 B/token (2 x 30 layers x 3 KV heads x 64 x 1 B int8), + 720 B/block of scales (2 x 30 "
       "layers x 3 KV heads x 4 B), block 16 tokens = 185040 B\n"
       "KV pool per rank: 2901 blocks = 46416 tokens in 536870912 B (512.00 MiB)\n"
       "max concurrency: 5 at the max context of 8192 tokens, 22 at 2048, 5 at 8192\n"},
  };
  const std::string dir = testing::TempDir() + "/tp_plan_cli_kv";
  std::filesystem::create_directories(dir);
  for (const Case& c : cases) {
    std::string config = source_dir() + "/configs/default.yaml";
    if (std::string(c.dtype) != "bf16") {
      config = dir + "/" + c.dtype + ".yaml";
      std::ofstream(config) << "cache:\n  block_size: 16\n  memory_mb: 512\n  max_context: 8192\n  dtype: " << c.dtype
                            << "\n";
    }
    const Result engine = run("generate --config " + config + " --model " + gguf() + " --prompt hi --max-tokens 1 --threads 1");
    ASSERT_EQ(engine.code, 0) << c.dtype << "\n" << engine.out;
    std::string engine_report;
    for (const char* prefix : {"KV cache per rank:", "KV pool per rank:", "max concurrency:"}) {
      const size_t at = engine.out.find(prefix);
      ASSERT_NE(at, std::string::npos) << prefix << " missing from the engine's start-up report:\n" << engine.out;
      engine_report += engine.out.substr(at, engine.out.find('\n', at) + 1 - at);
    }
    EXPECT_EQ(engine_report, c.report) << c.dtype;
    expect_has(engine.out, "KV pool " + std::string(c.dtype) + " " + std::to_string(c.n_blocks) + " blocks × 16 tokens = " +
                               std::to_string(c.n_blocks * c.block_bytes) + " B");
    const std::string args = "--model " + gguf() + " --gpu-mem 4GiB --kv-dtype " + c.plan_name +
                             " --kv-mem 512MiB --context 8192";
    const auto j = run_json(args);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["report"], c.report) << c.dtype;
    EXPECT_EQ(j["kv"]["dtype"], c.dtype);
    EXPECT_EQ(j["kv"]["block_bytes"], c.block_bytes);
    EXPECT_EQ(j["kv"]["blocks_per_rank"], c.n_blocks);
    const Result r = run("plan " + args);
    ASSERT_EQ(r.code, 0) << r.out;
    expect_has(r.out, "  " + c.report.substr(0, c.report.find(", block 16")));
  }
  const auto j =
      run_json("--model " + gguf() + " --gpu-mem 4GiB --kv-dtype f32 --kv-mem 512MiB --context 8192 --weights bf16");
  EXPECT_EQ(j["model"]["params"], 134515008);  // every weight of the file, as the card says
  EXPECT_EQ(j["model"]["tied_embeddings"], true);
  EXPECT_EQ(j["weights"]["bytes_per_rank"], 2 * 134515008);
  // The HF directory gives the same shape; at tp 3 each rank holds one of the 3 KV heads.
  const auto hf = run_json("--model " + source_dir() + "/models/SmolLM2-135M-Instruct-hf --gpu-mem 4GiB --tp 3 --kv-dtype f32");
  EXPECT_EQ(hf["kv"]["bytes_per_token_per_rank"], 15360);
  EXPECT_EQ(hf["setup"]["gpus"], 3);
  // The card of the same model agrees with the file.
  const auto card = run_json("--model SmolLM2-135M --gpu-mem 4GiB --kv-dtype f32 --kv-mem 512MiB --context 8192");
  EXPECT_EQ(card["report"], cases[0].report);
  EXPECT_EQ(card["model"]["params"], j["model"]["params"]);
}

// A model file is planned as stored by default: its tensors' bytes (packed codes, scales, dense embedding and all),
// its parameters counted as values (a compressed-tensors weight_packed by its weight_shape) — for the fixtures'
// synthetic model (2 layers, hidden 256, 8 heads of 32, 4 KV heads, intermediate 512, vocab 512, untied):
// 2 × 512 × 256 + 2 × (256·256 + 2 · 128·256 + 256·256 + 3 · 512·256 + 2 · 256) + 256 = 1,443,072 parameters.
// The stored bytes are the safetensors file less its header (8 bytes + the JSON), as the format lays it out.
TEST(PlanCli, FileWeightsAsStored) {
  const std::string fx = source_dir() + "/tests/peers/fixtures/compressed_tensors/";
  auto data_bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    return int64_t(std::filesystem::file_size(path)) - 8 - int64_t(header);
  };
  int n_dirs = 0;
  for (const auto& e : std::filesystem::directory_iterator(fx)) {
    if (!std::filesystem::exists(e.path() / "config.json")) continue;
    ++n_dirs;
    const std::string scheme = e.path().filename().string(), dir = e.path().string();
    SCOPED_TRACE(scheme);
    if (scheme == "nvfp4_w4a4") {  // kept to be refused by name: plan opens the file as the loader does
      const Result r = run("plan --model " + dir + " --gpu-mem 4GiB");
      EXPECT_EQ(r.code, 1) << r.out;
      expect_has(r.out, "FP4 activations (W4A4) are not");
      continue;
    }
    const auto j = run_json("--model " + dir + " --gpu-mem 4GiB --tp 2");
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["model"]["params"], 1443072);
    EXPECT_EQ(j["weights"]["format"], "stored");
    const int64_t stored = data_bytes(dir + "/model.safetensors");
    EXPECT_EQ(j["weights"]["bytes_total"], stored);
    EXPECT_EQ(j["weights"]["bytes_per_rank"], (stored + 1) / 2);
    EXPECT_LT(stored, 2 * 1443072);  // below the BF16 bytes
    EXPECT_NEAR(j["weights"]["bits_per_param"].get<double>(), 8.0 * double(stored) / 1443072, 1e-9);
    const std::map<std::string, std::string> formats = {
        {"w4a16_g128_sym", "pack-quantized"},   {"w4a16_g128_lm_head", "pack-quantized"},
        {"w8a8_int8_dynamic", "int-quantized"}, {"fp8_block", "float-quantized"},
        {"nvfp4a16", "nvfp4-pack-quantized"},   {"mixed_precision_fp8_w4a16", "mixed-precision"}};
    if (const auto f = formats.find(scheme); f != formats.end()) {
      EXPECT_EQ(j["weights"]["stored_format"], "compressed-tensors " + f->second);
      const Result r = run("plan --model " + dir + " --gpu-mem 4GiB");
      expect_has(r.out, "weights         as stored, compressed-tensors " + f->second + " (");
      // --weights picks a format to plan the same shape in.
      EXPECT_EQ(run_json("--model " + dir + " --gpu-mem 4GiB --weights bf16")["weights"]["bytes_total"], 2 * 1443072);
    }
  }
  EXPECT_GE(n_dirs, 17);
  // The real GGUF file: its Q4_1 linears and Q8_0 embedding as they are.
  const auto g = run_json("--model " + gguf() + " --gpu-mem 4GiB");
  EXPECT_EQ(g["model"]["params"], 134515008);
  EXPECT_EQ(g["weights"]["stored_format"], "q4_1 + q8_0");
  EXPECT_LT(g["weights"]["bytes_total"].get<int64_t>(), int64_t(std::filesystem::file_size(gguf())));
  EXPECT_GT(g["weights"]["bytes_total"].get<int64_t>(), int64_t(std::filesystem::file_size(gguf())) - (4 << 20));
  // A GGUF file whose types no kernel keeps (tests/peers/fixtures/gguf/synth_lowbit.gguf: 3 layers, hidden 320, 4 KV
  // heads of 40, intermediate 768, vocab 512, untied): each linear counted in the type it is held in
  // (IQ4_XS as IQ4_NL), the token table as stored; bytes a row from the formats' block sizes.
  {
    std::ifstream in(source_dir() + "/tests/peers/fixtures/quant_lowbit.json");
    const auto types = nlohmann::json::parse(in).at("types");
    const std::map<std::string, std::pair<int, int>> held = {
        // file type -> (bytes, values) a block, as held
        {"F32", {4, 1}},      {"Q8_0", {34, 32}},   {"Q4_0", {18, 32}},  {"Q5_0", {22, 32}},  {"Q5_1", {24, 32}},
        {"IQ4_NL", {18, 32}}, {"IQ4_XS", {18, 32}}, {"Q2_K", {84, 256}}, {"Q3_K", {110, 256}}};
    const std::map<std::string, std::pair<int64_t, int64_t>> shapes = {
        // name suffix -> rows, row length
        {"attn_q.weight", {320, 320}},      {"attn_k.weight", {160, 320}},   {"attn_v.weight", {160, 320}},
        {"attn_output.weight", {320, 320}}, {"ffn_gate.weight", {768, 320}}, {"ffn_up.weight", {768, 320}},
        {"ffn_down.weight", {320, 768}},    {"attn_norm.weight", {1, 320}},  {"ffn_norm.weight", {1, 320}},
        {"output_norm.weight", {1, 320}},   {"output.weight", {512, 320}}};
    int64_t want = 0;
    for (const auto& [name, type] : types.items()) {
      SCOPED_TRACE(name);
      const std::string suffix = name.substr(name.rfind('.', name.size() - 8) + 1);
      if (name == "token_embd.weight") {
        ASSERT_EQ(type, "Q4_0");
        want += 512 * 320 / 32 * 18;
        continue;
      }
      ASSERT_TRUE(shapes.count(suffix) && held.count(type)) << type;
      const auto [rows, n] = shapes.at(suffix);
      want += rows * n / held.at(type).second * held.at(type).first;
    }
    const auto lb = run_json("--model " + source_dir() + "/tests/peers/fixtures/gguf/synth_lowbit.gguf --gpu-mem 4GiB");
    EXPECT_EQ(lb["weights"]["bytes_total"], want);
    EXPECT_EQ(lb["weights"]["stored_format"], "iq4_nl + iq4_xs as iq4_nl + q2_k + q3_k + q4_0 + q5_0 + q5_1 + q8_0");
  }
  // A weight_shape that is no shape: one clear line (the copy's q_proj shape [256, 256] overwritten with [-5, 256]).
  {
    const std::string bad = testing::TempDir() + "/tp_plan_bad_shape";
    std::filesystem::remove_all(bad);
    std::filesystem::copy(fx + "w4a16_g128_sym", bad);
    std::fstream f(bad + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    std::string h(header, '\0');
    f.read(h.data(), std::streamsize(header));
    const auto meta = nlohmann::json::parse(h);
    const int64_t at =
        8 + int64_t(header) + meta["model.layers.0.self_attn.q_proj.weight_shape"]["data_offsets"][0].get<int64_t>();
    const int64_t dims[2] = {-5, 256};
    f.seekp(at);
    f.write(reinterpret_cast<const char*>(dims), sizeof dims);
    f.close();
    const Result r = run("plan --model " + bad + " --gpu-mem 4GiB");
    EXPECT_EQ(r.code, 1) << r.out;
    expect_has(r.out, "blk.0.attn_q.weight_shape [-5, 256] is not a weight's shape");
  }
  // A card has no stored bytes.
  const Result card = run("plan --model SmolLM2-135M --gpu-mem 4GiB --weights stored");
  EXPECT_EQ(card.code, 2) << card.out;
  expect_has(card.out, "--weights stored needs a model file");
}

// The cards' parameter counts agree with their shapes (a typo in a card shows here).
TEST(PlanCli, CardsAreConsistent) {
  for (const char* name : {"Llama-3.3-70B", "Llama-3.1-8B", "Llama-3.1-405B", "Qwen2.5-7B", "SmolLM2-135M"}) {
    const auto j = run_json(std::string("--model ") + name + " --gpu-mem 80GiB --tp 1");
    ASSERT_TRUE(j.is_object()) << name;
    const auto& m = j["model"];
    const int64_t L = m["layers"], h = m["hidden"], a = m["heads"], k = m["kv_heads"], d = m["head_dim"],
                  f = m["intermediate"], v = m["vocab"];
    const int64_t per_layer = h * a * d * 2 + h * k * d * 2 + 3 * h * f + 2 * h;
    const int64_t params = L * per_layer + v * h * (m["tied_embeddings"].get<bool>() ? 1 : 2) + h;
    // Exact for Llama; Qwen2.5 adds Q/K/V biases (28 x 4608 = 0.002%).
    EXPECT_NEAR(double(m["params"].get<int64_t>()) / double(params), 1.0, 1e-4) << name;
    EXPECT_EQ(m["active_params"], m["params"]) << name;
  }
  const auto oss = run_json("--model gpt-oss-120b --gpu-mem 80GiB");
  const auto& m = oss["model"];
  const int64_t h = m["hidden"], f = m["intermediate"];
  // Per expert: gate_up [2f, h] + bias 2f, down [h, f] + bias h.
  EXPECT_EQ(m["expert_params"].get<int64_t>(), m["layers"].get<int64_t>() * m["experts"].get<int64_t>() * (3 * h * f + 2 * f + h));
  EXPECT_EQ(m["sliding_layers"], 18);
  EXPECT_EQ(m["sliding_window"], 128);
}

struct Bad {
  std::string args;
  int code;
  std::string expected;
};

TEST(PlanCli, BadInputGivesOneClearLine) {
  namespace fs = std::filesystem;
  const fs::path cards = fs::path(testing::TempDir()) / "tpserve_plan_cards";
  fs::create_directories(cards);
  { std::ofstream(cards / "typo.yaml") << "layers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nintermediate: 128\nvocab: 300\nparams: 1000\nlayres: 3\n"; }
  { std::ofstream(cards / "nokv.yaml") << "layers: 2\nhidden: 64\nheads: 4\nintermediate: 128\nvocab: 300\nparams: 1000\n"; }
  const std::string typo = (cards / "typo.yaml").string();
  const Bad cases[] = {
      {"plan --model gpt-oss-12b --gpu-mem 80GB", 1,
       "unknown model 'gpt-oss-12b': no such file or directory, and no card"},
      {"plan --model gpt-oss-12b --gpu-mem 80GB", 1,
       "cards: Llama-3.1-405B, Llama-3.1-8B, Llama-3.3-70B, Qwen2.5-7B, SmolLM2-135M, gpt-oss-120b"},
      {"plan --model /nonexistent/m.gguf --gpu-mem 80GB", 1, "model '/nonexistent/m.gguf': no such file or directory"},
      {"plan --model gpt-oss-120b --gpu-mem 80XB", 2, "--gpu-mem: '80XB' has an unknown unit 'XB'"},
      {"plan --model gpt-oss-120b --gpu-mem lots", 2, "--gpu-mem: 'lots' is not a size; use e.g. 80GB (GB = 1e9 bytes)"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --reserve 3Q", 2, "--reserve: '3Q'"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --tp 3 --gpus 4", 1,
       "tp=3 does not divide the 64 attention heads of gpt-oss-120b; valid: 1, 2, 4, 8, 16, 32, 64"},
      {"plan --model " + gguf() + " --gpu-mem 8GB --tp 2", 1, "tp=2 does not divide the 9 attention heads"},
      {"plan --model gpt-oss-120b", 2, "plan: --gpu-mem is required"},
      {"plan --gpu-mem 80GB", 2, "plan: --model is required"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --weights q4_k", 2, "weight format 'q4_k' is not one of: f32, bf16"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --kv-dtype int3", 2, "KV dtype 'int3' is not one of"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --tp 4 --gpus 2", 2, "--tp 4 needs 4 GPUs; --gpus is 2"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --tp 2 --dp 2 --gpus 3", 2, "--dp 2 x --tp 2 = 4 GPUs; --gpus is 3"},
      {"plan --model gpt-oss-120b --gpu-mem 80GB --tp two", 2, "--tp: expected an integer, got 'two'"},
      {"plan --model gpt-oss-120b --gpu-mem 0GB", 2, "--gpu-mem must be > 0"},
      {"plan --model " + typo + " --gpu-mem 80GB", 1, typo + ": layres: unknown key"},
      {"plan --model nokv --cards " + cards.string() + " --gpu-mem 80GB", 1, "nokv.yaml: kv_heads: missing"},
      {"plan --model gpt-oss-120b --cards " + cards.string() + " --gpu-mem 80GB", 1, "cards: nokv, typo"},
  };
  for (const Bad& b : cases) {
    const Result r = run(b.args);
    EXPECT_EQ(r.code, b.code) << b.args << "\n" << r.out;
    EXPECT_NE(r.out.find(b.expected), std::string::npos) << b.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line: " << r.out;
  }
}

}  // namespace
