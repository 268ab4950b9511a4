// kvstore/capacity: the arithmetic behind `tpserve plan` and the engine's start-up report, checked against
// hand-worked numbers and against the seed's figures (gpt-oss-120b, Llama-3.3-70B, an 80 GB H100).
//
// Which per-token number each seed figure uses:
//   "72 KiB/token full"      all 36 layers: 2 x 36 x 8 x 64 x 2 B = 73,728 B.
//   "≈ 36 KiB effective"     past the 128-token window only the 18 full-attention layers grow: 36,864 B.
//   "75 MB at 2k, 300 MB at 8k, 1.2 GB at 32k, 4.8 GB at 128k"
//                            36 KiB x tokens in SI units (36,864 x 2048 = 75.5 MB); the exact footprint adds the
//                            sliding layers' fixed 18 x 2,048 B x 128 = 4.7 MB (6% at 2k, < 2% from 8k on).
//   "Llama-3.3-70B ≈ 320 KiB/token, ≈ 9x gpt-oss's"  327,680 B / 36,864 B = 8.9 (the effective figure).
//   "≈ 3 users at 128k vs 50–60 at 8k paged" with 15–20 GB of KV on an 80 GB (80 GiB) H100 after MXFP4
//                            weights (65.2 GB) and our default 3 GiB reserve: 17.5 GB.
//   "117B params in BF16 ≈ 234 GB → 3 GPUs of 80 GB"  ceil(233.7 GB / usable per GPU) = 3.
#include "kvstore/capacity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

// The shapes of configs/models/gpt-oss-120b.yaml, Llama-3.3-70B.yaml and SmolLM2-135M.yaml.
ModelShape gpt_oss_120b() {
  ModelShape s;
  s.name = "gpt-oss-120b";
  s.n_layers = 36;
  s.hidden = 2880;
  s.n_heads = 64;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.intermediate = 2880;
  s.vocab = 201088;
  s.max_context = 131072;
  s.n_params = 116829156672;
  s.n_active_params = 5132849472;
  s.n_expert_params = 114701598720;
  s.n_experts = 128;
  s.n_experts_per_token = 4;
  s.n_sliding_layers = 18;
  s.sliding_window = 128;
  return s;
}

ModelShape llama_33_70b() {
  ModelShape s;
  s.name = "Llama-3.3-70B";
  s.n_layers = 80;
  s.hidden = 8192;
  s.n_heads = 64;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.intermediate = 28672;
  s.vocab = 128256;
  s.max_context = 131072;
  s.n_params = 70553706496;
  s.n_active_params = s.n_params;
  return s;
}

ModelShape smollm2_135m() {
  ModelShape s;
  s.name = "SmolLM2-135M";
  s.n_layers = 30;
  s.hidden = 576;
  s.n_heads = 9;
  s.n_kv_heads = 3;
  s.head_dim = 64;
  s.intermediate = 1536;
  s.vocab = 49152;
  s.max_context = 8192;
  s.tied_embeddings = true;
  s.n_params = 134515008;
  s.n_active_params = s.n_params;
  return s;
}

// |actual / expected - 1| <= rel
void expect_rel(double actual, double expected, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(actual / expected - 1.0), rel) << what << ": " << actual << " vs " << expected;
}

TEST(ParseByteSize, SiAndBinaryUnits) {
  struct Case {
    const char* text;
    int64_t bytes;
  };
  const Case cases[] = {
      {"80GB", 80'000'000'000},      {"80GiB", 80 * kGiB},        {"15G", 15'000'000'000},
      {"512MiB", 512 * kMiB},        {"512mib", 512 * kMiB},      {"80 GB", 80'000'000'000},
      {"1.5TB", 1'500'000'000'000},  {"1.5GiB", 3 * kGiB / 2},    {"4096", 4096},
      {"4096B", 4096},               {"64K", 64'000},             {"64KiB", 64 * kKiB},
      {"2Ti", int64_t(2) << 40},     {" 3GiB ", 3 * kGiB},        {"0", 0},
  };
  for (const Case& c : cases) EXPECT_EQ(parse_byte_size(c.text, "--gpu-mem"), c.bytes) << c.text;
}

TEST(ParseByteSize, GarbageIsAClearError) {
  for (const char* bad : {"", "abc", "GB", "80XB", "-5GB", "1e9", "1.2.3GB", "80 G B", "nan", "inf", "0x10",
                          "99999999999TB"}) {
    try {
      parse_byte_size(bad, "--gpu-mem");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--gpu-mem: '" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("GB = 1e9 bytes"), std::string::npos) << m;
      EXPECT_NE(m.find("GiB = 2^30 bytes"), std::string::npos) << m;
    }
  }
}

TEST(FormatBytes, SiAndBinary) {
  EXPECT_EQ(format_si_bytes(512), "512 B");
  EXPECT_EQ(format_si_bytes(75'497'472), "75.50 MB");
  EXPECT_EQ(format_si_bytes(65'190'340'224), "65.19 GB");
  EXPECT_EQ(format_binary_bytes(73'728), "72.00 KiB");
  EXPECT_EQ(format_binary_bytes(80 * kGiB), "80.00 GiB");
}

TEST(KvFootprint, GptOssFullAndEffectivePerToken) {
  const KvFootprint fp = kv_footprint(gpt_oss_120b(), 8, 2);
  EXPECT_EQ(fp.layer_bytes_per_token, 2 * 8 * 64 * 2);
  EXPECT_EQ(fp.bytes_per_token, 73'728);      // 2 x 36 x 8 x 64 x 2 B
  EXPECT_EQ(fp.bytes_per_token, 72 * kKiB);   // seed: 72 KiB/token full
  EXPECT_EQ(fp.long_bytes_per_token, 36 * kKiB);  // seed: ≈ 36 KiB effective (18 full layers)
  // Effective per token at 128k: the sliding layers' window is amortized away (< 0.2%).
  expect_rel(double(kv_bytes_for_context(fp, 131072)) / 131072, 36.0 * 1024, 0.002, "effective at 128k");
}

TEST(KvFootprint, GptOssSeedContextFigures) {
  const KvFootprint fp = kv_footprint(gpt_oss_120b(), 8, 2);
  const int64_t sliding_per_token = 18 * fp.layer_bytes_per_token;
  struct Seed {
    int64_t tokens;
    double seed_bytes;   // the seed's figure (SI)
    double total_rel;    // how far the exact footprint may be from it: the fixed window part, stated above
  };
  const Seed seeds[] = {{2048, 75e6, 0.07}, {8192, 300e6, 0.03}, {32768, 1.2e9, 0.02}, {131072, 4.8e9, 0.01}};
  for (const Seed& s : seeds) {
    const std::string what = std::to_string(s.tokens) + " tokens";
    // The seed's figure is 36 KiB x tokens (its rounding: within 1%).
    expect_rel(double(fp.long_bytes_per_token * s.tokens), s.seed_bytes, 0.01, what + " at 36 KiB/token");
    // Exact: full layers hold every token, the sliding layers the last 128.
    const int64_t exact = fp.long_bytes_per_token * s.tokens + sliding_per_token * std::min<int64_t>(s.tokens, 128);
    EXPECT_EQ(kv_bytes_for_context(fp, s.tokens), exact) << what;
    expect_rel(double(exact), s.seed_bytes, s.total_rel, what + " exact");
  }
  EXPECT_EQ(kv_bytes_for_context(fp, 2048), 80'216'064);  // 75.5 MB + 4.7 MB of windows
  // Below the window every layer holds every token.
  EXPECT_EQ(kv_bytes_for_context(fp, 100), 100 * fp.bytes_per_token);
  EXPECT_EQ(kv_bytes_for_context(fp, 0), 0);
}

TEST(KvFootprint, Llama70bIsAbout9xGptOss) {
  const KvFootprint llama = kv_footprint(llama_33_70b(), 8, 2);
  EXPECT_EQ(llama.bytes_per_token, 320 * kKiB);  // 2 x 80 x 8 x 128 x 2 = 327,680 B
  EXPECT_EQ(llama.long_bytes_per_token, llama.bytes_per_token);
  const KvFootprint oss = kv_footprint(gpt_oss_120b(), 8, 2);
  const double ratio = double(llama.long_bytes_per_token) / double(oss.long_bytes_per_token);
  EXPECT_NEAR(ratio, 9.0, 0.15);  // 8.89
  EXPECT_EQ(kv_bytes_for_context(llama, 131072), int64_t(327680) * 131072);
}

TEST(KvFootprint, PerRankWithReplication) {
  // The caller passes the local KV heads (parallel/tp_layout): tp 4 -> 2 of 8; tp 16 -> 1, replicated twice.
  const ModelShape s = llama_33_70b();
  EXPECT_EQ(kv_footprint(s, 2, 2).bytes_per_token, 80 * kKiB);
  EXPECT_EQ(kv_footprint(s, 1, 2).bytes_per_token, 40 * kKiB);
  // SmolLM2 at tp 3: one of 3 KV heads; F32 as our CPU engine stores K/V.
  EXPECT_EQ(kv_footprint(smollm2_135m(), 3, 4).bytes_per_token, 46'080);
  EXPECT_EQ(kv_footprint(smollm2_135m(), 1, 4).bytes_per_token, 15'360);
  EXPECT_EQ(kv_footprint(smollm2_135m(), 1, 1).bytes_per_token, 3'840);  // fp8
}

TEST(KvBytesForContext, RoundsUpToBlocks) {
  const KvFootprint dense = kv_footprint(smollm2_135m(), 3, 4);
  EXPECT_EQ(kv_bytes_for_context(dense, 17, 16), 32 * dense.bytes_per_token);
  EXPECT_EQ(kv_bytes_for_context(dense, 16, 16), 16 * dense.bytes_per_token);
  EXPECT_EQ(kv_bytes_for_context(dense, 1, 16), 16 * dense.bytes_per_token);
  // A 128-token window straddles at most 9 blocks of 16: sliding layers hold min(blocks, 9) blocks.
  const KvFootprint oss = kv_footprint(gpt_oss_120b(), 8, 2);
  const int64_t sliding = 18 * oss.layer_bytes_per_token;
  EXPECT_EQ(kv_bytes_for_context(oss, 8192, 16), oss.long_bytes_per_token * 8192 + sliding * 144);
  EXPECT_EQ(kv_bytes_for_context(oss, 100, 16), oss.bytes_per_token * 112);
}

TEST(Weights, FormatsAndBits) {
  EXPECT_EQ(parse_plan_format("MXFP4"), PlanFormat::MXFP4);
  EXPECT_EQ(plan_format_bits(PlanFormat::MXFP4), 4.25);
  EXPECT_EQ(plan_format_bits(PlanFormat::INT4), 4.5);
  EXPECT_EQ(plan_format_name(PlanFormat::FP8), "fp8");
  try {
    parse_plan_format("q4_k");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'q4_k' is not one of: f32, bf16, fp8, int8, int4, mxfp4"), std::string::npos)
        << e.what();
  }
}

TEST(KvCost, EveryCacheDtypeAndThePlannerNames) {
  struct Case {
    const char* name;
    const char* canonical;
    int64_t dtype_bytes, scale_bytes;
  };
  for (const Case& c : {Case{"bf16", "bf16", 2, 0}, Case{"F32", "f32", 4, 0}, Case{"fp8_e4m3", "fp8_e4m3", 1, 0},
                        Case{"fp8", "fp8_e4m3", 1, 0}, Case{"int8", "int8", 1, 4}, Case{"f16", "f16", 2, 0}}) {
    const KvCost k = parse_kv_cost(c.name);
    EXPECT_EQ(k.name, c.canonical) << c.name;
    EXPECT_EQ(k.dtype_bytes, c.dtype_bytes) << c.name;
    EXPECT_EQ(k.scale_bytes, c.scale_bytes) << c.name;
  }
  // The pool's dtypes cost what common/kv_dtype.h says; int8 with tensor scales (a checkpoint's k_scale /
  // v_scale) has no block scales.
  for (KvDType t : kKvDTypes) {
    EXPECT_EQ(kv_cost(t).dtype_bytes, kv_dtype_bytes(t));
    EXPECT_EQ(kv_cost(t).name, kv_dtype_name(t));
  }
  EXPECT_EQ(kv_cost(KvDType::INT8, true).scale_bytes, 0);
  EXPECT_EQ(kv_cost(KvDType::FP8_E4M3, true).scale_bytes, 0);
  try {
    parse_kv_cost("int3");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "KV dtype 'int3' is not one of: bf16, f32, fp8_e4m3, int8, fp8 (= fp8_e4m3), f16");
  }
}

// The claim, at the budget of configs/default.yaml (512 MiB per rank, blocks of 16, SmolLM2 at tp 1):
// bf16 holds exactly 2x the blocks of F32, fp8 exactly 4x, int8 4x less its scales (720 B per 184320 B block:
// 2901 blocks = 3.985x).
TEST(KvPoolPlan, SmolLm2EveryDtypeIn512MiB) {
  struct Case {
    KvDType dtype;
    int64_t block_bytes, n_blocks;
  };
  for (const Case& c : {Case{KvDType::F32, 737'280, 728}, Case{KvDType::BF16, 368'640, 1456},
                        Case{KvDType::FP8_E4M3, 184'320, 2912}, Case{KvDType::INT8, 185'040, 2901}}) {
    const KvFootprint fp = kv_footprint(smollm2_135m(), 3, kv_cost(c.dtype));
    const KvPoolPlan p = kv_pool_plan(fp, 512 * kMiB, 16);
    EXPECT_EQ(p.block_bytes, c.block_bytes) << kv_dtype_name(c.dtype);
    EXPECT_EQ(p.n_blocks, c.n_blocks) << kv_dtype_name(c.dtype);
    // The pool's own layout (K and V of every layer) gives the same block bytes.
    const KvBlockLayout l{c.dtype, 16, 3, 64, false};
    EXPECT_EQ(2 * 30 * l.block_bytes(), p.block_bytes) << kv_dtype_name(c.dtype);
  }
  const KvFootprint int8 = kv_footprint(smollm2_135m(), 3, kv_cost(KvDType::INT8));
  EXPECT_EQ(int8.bytes_per_token, 11'520);
  EXPECT_EQ(int8.scale_bytes_per_block, 720);
  // A sequence pays the scales of every block it holds: 17 tokens = 2 blocks.
  EXPECT_EQ(kv_bytes_for_context(int8, 17, 16), 32 * 11'520 + 2 * 720);
  EXPECT_EQ(kv_bytes_for_context(int8, 17, 1), 17 * 11'520 + 17 * 720);
  EXPECT_EQ(concurrency(int8, 512 * kMiB, 2048, 16).n_seqs, 2901 / 128);
}

TEST(KvBytesForContext, SlidingLayersPayTheirBlockScales) {
  const KvFootprint oss = kv_footprint(gpt_oss_120b(), 8, kv_cost(KvDType::INT8));
  EXPECT_EQ(oss.layer_scale_bytes_per_block, 2 * 8 * 4);
  // 18 full layers hold all 512 blocks, 18 sliding layers the 9 a 128-token window straddles.
  const int64_t layer_block = oss.layer_bytes_per_token * 16 + 64;
  EXPECT_EQ(kv_bytes_for_context(oss, 8192, 16), 18 * layer_block * 512 + 18 * layer_block * 9);
}

TEST(Weights, GptOssBf16NeedsThreeGpusMxfp4FitsOne) {
  const ModelShape s = gpt_oss_120b();
  const WeightBytes bf16 = weight_bytes(s, PlanFormat::BF16, 1);
  EXPECT_EQ(bf16.total_bytes, 2 * s.n_params);
  expect_rel(double(bf16.total_bytes), 234e9, 0.005, "117B params in bf16");  // seed: ≈ 234 GB
  EXPECT_EQ(min_gpus_for_weights(bf16.total_bytes, 80'000'000'000, 0), 3);   // seed: 3 GPUs of 80 GB
  EXPECT_EQ(min_gpus_for_weights(bf16.total_bytes, 80 * kGiB, 3 * kGiB), 3);
  EXPECT_EQ(weight_bytes(s, PlanFormat::BF16, 4).per_rank_bytes, (bf16.total_bytes + 3) / 4);

  // MXFP4 experts (4.25 bits) + the other 2.13 B params in bf16, as gpt-oss ships: 65.19 GB.
  const WeightBytes mx = weight_bytes(s, PlanFormat::MXFP4, 1);
  EXPECT_EQ(mx.n_format_params, s.n_expert_params);
  EXPECT_EQ(mx.n_bf16_params, 2'127'557'952);
  EXPECT_EQ(mx.total_bytes, 114'701'598'720 / 8 * 17 / 4 + 2 * int64_t(2'127'557'952));
  EXPECT_EQ(mx.total_bytes, 65'190'340'224);
  EXPECT_EQ(min_gpus_for_weights(mx.total_bytes, 80 * kGiB, 3 * kGiB), 1);
  EXPECT_EQ(min_gpus_for_weights(mx.total_bytes, 80'000'000'000, 0), 1);
  EXPECT_EQ(min_gpus_for_weights(1, kGiB, kGiB), -1);
}

TEST(Weights, DenseQuantizesAllButEmbeddingsAndNorms) {
  const ModelShape s = llama_33_70b();
  const int64_t embed = int64_t(2) * 128256 * 8192, norms = (2 * 80 + 1) * 8192;
  EXPECT_EQ(s.n_embedding_and_norm_params(), embed + norms);
  const WeightBytes fp8 = weight_bytes(s, PlanFormat::FP8, 1);
  EXPECT_EQ(fp8.n_format_params, s.n_params - embed - norms);
  EXPECT_EQ(fp8.total_bytes, fp8.n_format_params + 2 * (embed + norms));
  const WeightBytes int4 = weight_bytes(s, PlanFormat::INT4, 2);
  EXPECT_EQ(int4.total_bytes, (int4.n_format_params * 9 + 15) / 16 + 2 * (embed + norms));
  EXPECT_EQ(int4.per_rank_bytes, (int4.total_bytes + 1) / 2);
  EXPECT_EQ(weight_bytes(s, PlanFormat::F32, 1).total_bytes, 4 * s.n_params);
  // Tied embeddings count once.
  const ModelShape smol = smollm2_135m();
  EXPECT_EQ(smol.n_embedding_and_norm_params(), 49152 * 576 + 61 * 576);
}

// A model file's own bytes: per rank the share of them, bits a parameter their mean; a card (no bytes) refused.
TEST(Weights, StoredIsTheFilesBytes) {
  ModelShape s;
  s.n_params = 1000;
  s.stored_bytes = 1501;
  EXPECT_EQ(parse_plan_format("Stored"), PlanFormat::Stored);
  const WeightBytes w = weight_bytes(s, PlanFormat::Stored, 2);
  EXPECT_EQ(w.total_bytes, 1501);
  EXPECT_EQ(w.per_rank_bytes, 751);
  EXPECT_EQ(w.n_format_params, 1000);
  EXPECT_EQ(w.n_bf16_params, 0);
  EXPECT_DOUBLE_EQ(w.bits_per_param, 12.008);
  EXPECT_DOUBLE_EQ(weight_bytes(s, PlanFormat::INT4, 1).bits_per_param, 4.5);
  s.stored_bytes = 0;
  EXPECT_THROW(weight_bytes(s, PlanFormat::Stored, 1), InputError);
}

TEST(Concurrency, H100StaticVsPaged) {
  // gpt-oss-120b on one 80 GB H100 (80 GiB), MXFP4 weights, default 3 GiB reserve, bf16 KV, blocks of 16.
  const ModelShape s = gpt_oss_120b();
  const int64_t budget = kv_budget_bytes(80 * kGiB, weight_bytes(s, PlanFormat::MXFP4, 1).per_rank_bytes, 3 * kGiB);
  EXPECT_EQ(budget, 17'487'780'224);
  EXPECT_GE(budget, 15'000'000'000);  // seed: 15–20 GB left for KV
  EXPECT_LE(budget, 20'000'000'000);
  const KvFootprint fp = kv_footprint(s, 8, 2);
  const Concurrency reserve_128k = concurrency(fp, budget, 131072, 16);
  const Concurrency paged_8k = concurrency(fp, budget, 8192, 16);
  EXPECT_EQ(reserve_128k.n_seqs, 3);   // seed: ≈ 3 users at a 128k reservation
  EXPECT_GE(paged_8k.n_seqs, 50);      // seed: 50–60 at 8k paged
  EXPECT_LE(paged_8k.n_seqs, 60);
  EXPECT_EQ(paged_8k.n_seqs, budget / paged_8k.bytes_per_seq);
  // The seed's whole 15–20 GB range stays within ≈ 3–4 users at 128k and 48–65 at 8k.
  EXPECT_EQ(concurrency(fp, 15'000'000'000, 131072, 16).n_seqs, 3);
  EXPECT_EQ(concurrency(fp, 20'000'000'000, 131072, 16).n_seqs, 4);
  EXPECT_EQ(concurrency(fp, 0, 8192, 16).n_seqs, 0);
  EXPECT_EQ(concurrency(fp, -5, 8192, 16).n_seqs, 0);
}

TEST(KvPoolPlan, SmolLm2F32In512MiB) {
  // What the CPU engine builds with configs/default.yaml: 512 MiB per rank, blocks of 16, F32 K/V.
  const KvFootprint fp = kv_footprint(smollm2_135m(), 3, 4);
  const KvPoolPlan p = kv_pool_plan(fp, 512 * kMiB, 16);
  EXPECT_EQ(p.block_bytes, 737'280);
  EXPECT_EQ(p.n_blocks, 728);  // floor(536,870,912 / 737,280)
  EXPECT_EQ(p.token_capacity, 11'648);
  EXPECT_EQ(concurrency(fp, 512 * kMiB, 8192, 16).n_seqs, 1);
  EXPECT_EQ(concurrency(fp, 512 * kMiB, 2048, 16).n_seqs, 5);
  // For a dense model, sequences by bytes = sequences by blocks.
  for (int64_t n : {1, 100, 2048, 3000, 8192})
    EXPECT_EQ(concurrency(fp, 512 * kMiB, n, 16).n_seqs, p.n_blocks / ((n + 15) / 16)) << n;
  EXPECT_EQ(kv_pool_plan(fp, -1, 16).n_blocks, 0);
}

TEST(CapacityReport, EngineStartUpLines) {
  const KvFootprint fp = kv_footprint(smollm2_135m(), 3, 4);
  EXPECT_EQ(capacity_report(fp, 512 * kMiB, 16, 8192),
            "KV cache per rank: 46080 B/token (2 x 30 layers x 3 KV heads x 64 x 4 B), block 16 tokens = 737280 B\n"
            "KV pool per rank: 728 blocks = 11648 tokens in 536870912 B (512.00 MiB)\n"
            "max concurrency: 1 at the max context of 8192 tokens, 5 at 2048, 1 at 8192\n");
  EXPECT_EQ(capacity_report(kv_footprint(smollm2_135m(), 3, kv_cost(KvDType::BF16)), 512 * kMiB, 16, 8192),
            "KV cache per rank: 23040 B/token (2 x 30 layers x 3 KV heads x 64 x 2 B bf16), block 16 tokens = 368640 B\n"
            "KV pool per rank: 1456 blocks = 23296 tokens in 536870912 B (512.00 MiB)\n"
            "max concurrency: 2 at the max context of 8192 tokens, 11 at 2048, 2 at 8192\n");
  EXPECT_EQ(capacity_report(kv_footprint(smollm2_135m(), 3, kv_cost(KvDType::INT8)), 512 * kMiB, 16, 8192),
            "KV cache per rank: 11520 B/token (2 x 30 layers x 3 KV heads x 64 x 1 B int8), + 720 B/block of scales "
            "(2 x 30 layers x 3 KV heads x 4 B), block 16 tokens = 185040 B\n"
            "KV pool per rank: 2901 blocks = 46416 tokens in 536870912 B (512.00 MiB)\n"
            "max concurrency: 5 at the max context of 8192 tokens, 22 at 2048, 5 at 8192\n");
  const std::string oss = capacity_report(kv_footprint(gpt_oss_120b(), 8, 2), 17'487'780'224, 16, 131072);
  EXPECT_NE(oss.find("73728 B/token"), std::string::npos) << oss;
  EXPECT_NE(oss.find("36864 B/token past the 128-token window of 18 sliding layers"), std::string::npos) << oss;
  EXPECT_NE(oss.find("max concurrency: 3 at the max context of 131072 tokens"), std::string::npos) << oss;
}

TEST(ModelShapeFrom, ModelConfigIsDense) {
  ModelConfig c;
  c.name = "m";
  c.n_layers = 30;
  c.hidden = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.intermediate = 1536;
  c.vocab = 49152;
  c.max_context = 8192;
  c.tied_embeddings = true;
  const ModelShape s = model_shape_from(c, 134515008);
  EXPECT_EQ(s.n_params, 134515008);
  EXPECT_EQ(s.n_active_params, 134515008);
  EXPECT_FALSE(s.is_moe());
  EXPECT_EQ(s.n_sliding_layers, 0);
  EXPECT_EQ(kv_footprint(s, 3, 4).bytes_per_token, 46080);
}

}  // namespace
}  // namespace tp
