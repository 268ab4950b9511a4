// cache.gpu_memory_utilization arithmetic: KV budget = floor(u × total) − weights − activation peak, the pool
// in whole blocks, the report in `tpserve plan`'s words, and the refusal of a model that leaves no block.
#include "kvstore/gpu_memory_plan.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace tp {
namespace {

// SmolLM2-135M per rank at tp 1, bf16 KV: 2 x 30 layers x 3 KV heads x 64 x 2 B = 23040 B/token.
KvFootprint smol_fp() {
  ModelShape s;
  s.name = "smol";
  s.n_layers = 30;
  s.hidden = 576;
  s.n_heads = 9;
  s.n_kv_heads = 3;
  s.head_dim = 64;
  s.intermediate = 1536;
  s.vocab = 49152;
  return kv_footprint(s, 3, kv_cost(KvDType::BF16));
}

struct Case {
  int64_t total;
  double util;
  int64_t weights, activations, block_size;
  int64_t budget, n_blocks;
};
class GpuMemoryPlanTable : public ::testing::TestWithParam<Case> {};

TEST_P(GpuMemoryPlanTable, BudgetAndBlocks) {
  const Case c = GetParam();
  const KvFootprint fp = smol_fp();
  const GpuMemoryPlan p = plan_gpu_memory(c.total, c.util, c.weights, c.activations, fp, c.block_size);
  EXPECT_EQ(p.usable_bytes, int64_t(double(c.total) * c.util));
  EXPECT_EQ(p.kv_budget_bytes, c.budget);
  EXPECT_EQ(p.pool.n_blocks, c.n_blocks);
  EXPECT_EQ(p.pool.block_bytes, fp.block_bytes(c.block_size));
  EXPECT_EQ(p.pool.token_capacity, c.n_blocks * c.block_size);
  EXPECT_EQ(p.fits(), c.n_blocks > 0);
}

constexpr int64_t kG = 1000000000;
INSTANTIATE_TEST_SUITE_P(
    All, GpuMemoryPlanTable,
    ::testing::Values(
        // 10 GB at 0.5: 5e9 - 1e9 weights - 1e9 activations = 3e9; block 16 = 368640 B -> 8138 blocks
        Case{10 * kG, 0.5, 1 * kG, 1 * kG, 16, 3 * kG, 3 * kG / 368640},
        // H200 (143.77 GB) at the default 0.9, 270 MB of bf16 weights, 1.2 GB activations
        Case{143771058176, 0.9, 270000000, 1200000000, 16, 129393952358 - 270000000 - 1200000000,
             (129393952358 - 270000000 - 1200000000) / 368640},
        // util 1: everything; block 1: exact tokens
        Case{1000000, 1.0, 0, 0, 1, 1000000, 1000000 / 23040},
        // exactly one block
        Case{368640 + 100, 1.0, 100, 0, 16, 368640, 1},
        // one byte short of a block: none
        Case{368640 + 99, 1.0, 100, 0, 16, 368639, 0},
        // weights exceed the usable part: negative budget, no blocks
        Case{10 * kG, 0.1, 2 * kG, 0, 16, -1 * kG, 0}));

TEST(GpuMemoryPlan, ReportUsesThePlannersWords) {
  const KvFootprint fp = smol_fp();
  const GpuMemoryPlan p = plan_gpu_memory(10 * kG, 0.5, 1 * kG, 1 * kG, fp, 16);
  const std::string r = gpu_memory_report(p, fp, 8192);
  EXPECT_NE(r.find("GPU memory per rank: 0.5 x 10.00 GB = 5.00 GB for weights + activations + KV\n"), std::string::npos) << r;
  EXPECT_NE(r.find("KV capacity: 3.00 GB per rank = 5.00 GB - 1.00 GB weights - 1.00 GB activations\n"), std::string::npos) << r;
  // then capacity_report's lines, as the engine and `tpserve plan` print them
  EXPECT_NE(r.find(capacity_report(fp, p.kv_budget_bytes, 16, 8192)), std::string::npos) << r;
  EXPECT_NE(r.find("KV pool per rank: 8138 blocks"), std::string::npos) << r;
}

TEST(GpuMemoryPlan, ModelThatDoesNotFitIsRefusedWithTheNumbers) {
  const KvFootprint fp = smol_fp();
  const GpuMemoryPlan p = plan_gpu_memory(80 * kG, 0.1, 7500000000, 1 * kG, fp, 16);
  EXPECT_FALSE(p.fits());
  try {
    check_gpu_memory_plan(p, "cfg.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "cfg.yaml: cache.gpu_memory_utilization: 0.1 x 80.00 GB = 8.00 GB leaves no KV block: 7.50 GB weights + "
                 "1.00 GB activations; one block of 16 tokens needs 368.64 KB (use a higher utilization, a larger tp, "
                 "or a smaller dtype)");
  }
  EXPECT_NO_THROW(check_gpu_memory_plan(plan_gpu_memory(80 * kG, 0.9, 7500000000, 1 * kG, fp, 16), "cfg.yaml"));
}

TEST(GpuMemoryPlan, BadArgumentsAreRefused) {
  const KvFootprint fp = smol_fp();
  EXPECT_THROW(plan_gpu_memory(0, 0.9, 0, 0, fp, 16), InputError);
  EXPECT_THROW(plan_gpu_memory(kG, 0.0, 0, 0, fp, 16), InputError);
  EXPECT_THROW(plan_gpu_memory(kG, 1.01, 0, 0, fp, 16), InputError);
  EXPECT_THROW(plan_gpu_memory(kG, 0.9, -1, 0, fp, 16), InputError);
  EXPECT_THROW(plan_gpu_memory(kG, 0.9, 0, 0, fp, 0), InputError);
}

}  // namespace
}  // namespace tp
