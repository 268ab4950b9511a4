// The CUDA backend (rank/cuda_backend.cpp) against the CPU backend on the same synthetic BF16 Llama: every
// step's logits, over a prefill, decode steps and a batched step mixing decode, a prefill chunk mid-block and a
// long context (split-K attention), with the KV pool in device memory. Skips with "no CUDA device" where none is
// visible (built only when the build has CUDA).
// Bound: NMSE (Σ(gpu − cpu)² / Σ cpu²) of each step's logits < 1e-4, greedy tokens equal unless the CPU's top-2
// gap is below kNearTie. Both sides round the GEMM inputs to BF16 and accumulate in F32; they differ in summation
// order (cuBLASLt tiles vs AVX-512 / oneDNN), expf / rsqrtf vs libm, and the online-softmax merge order, each a few
// F32 ulps per op, which a 2-layer model keeps far below 1e-4 (an error-analysis bound: first measured on a GPU).
// Also: weights the CUDA kernels cannot take are refused naming the format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "rank/backend.h"
#include "rank/cuda_backend.h"
#include "rank/llama_model.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"
#include "tests/util/top2_gap.h"

namespace tp {
namespace {

constexpr double kNmse = 1e-4;
constexpr float kNearTie = 1e-2f;

std::shared_ptr<Backend> cuda_or_skip() {
  try {
    return make_backend("cuda", 0, "test");
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find("no CUDA device") != std::string::npos) return nullptr;
    throw;
  }
}

#define TP_REQUIRE_CUDA_BACKEND(b)                           \
  const std::shared_ptr<Backend> b = cuda_or_skip();         \
  if (!b) GTEST_SKIP() << "no CUDA device"

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? num / den : num;
}

size_t argmax(const std::vector<float>& v) { return size_t(std::max_element(v.begin(), v.end()) - v.begin()); }

std::string synth_dir(const char* name, DType dtype) {
  SynthSpec spec;
  spec.n_layers = 2;
  spec.hidden = 256;
  spec.n_heads = 4;  // head_dim 64
  spec.n_kv_heads = 2;
  spec.intermediate = 384;
  spec.vocab = 500;
  spec.seed = 11;
  spec.dtype = dtype;
  const std::string dir = testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
  write_synthetic_model(dir, spec);
  return dir;
}

TEST(CudaBackend, GreedyStepsMatchTheCpuBackend) {
  TP_REQUIRE_CUDA_BACKEND(gpu);
  const auto f = open_model(synth_dir("cuda_synth", DType::BF16));
  LlamaModel on_cpu(*f, DType::BF16), on_gpu(*f, DType::BF16, nullptr, {}, gpu.get());
  LocalRunner a(on_cpu, 256, 16, KvDType::BF16), b(on_gpu, 256, 16, KvDType::BF16);
  EXPECT_FALSE(b.pool.host());
  std::vector<int32_t> toks;
  for (int i = 0; i < 37; ++i) toks.push_back(int32_t((i * 131 + 7) % 500));
  for (int step = 0; step < 12; ++step) {
    const std::vector<float> want = a.seq.feed(toks), got = b.seq.feed(toks);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(nmse(got, want), kNmse) << "step " << step;
    if (argmax(got) != argmax(want)) {
      EXPECT_LT(test::top2_gap(want), kNearTie) << "step " << step;
    }
    toks = {int32_t(argmax(want))};
  }
}

TEST(CudaBackend, BatchedStepWithSplitKMatchesTheCpuBackend) {
  TP_REQUIRE_CUDA_BACKEND(gpu);
  const auto f = open_model(synth_dir("cuda_synth_batch", DType::BF16));
  LlamaModel on_cpu(*f, DType::BF16), on_gpu(*f, DType::BF16, nullptr, {}, gpu.get());
  const KvPoolShape shape = on_cpu.kv_shape(80, 16, KvDType::BF16);
  KvPool cpu_pool(shape), gpu_pool(shape, {}, kv_memory_for(*gpu));
  // Step 1 fills three sequences; step 2 decodes one, continues one mid-block and runs a 700-token context.
  auto seq = [](int64_t id, int64_t start, int64_t n, int32_t first_block) {
    SeqPlan s;
    s.seq_id = id;
    s.start_pos = start;
    for (int64_t i = 0; i < n; ++i) s.tokens.push_back(int32_t((id * 97 + start + i * 31) % 500));
    const int64_t blocks = (start + n + 15) / 16;
    for (int64_t b = 0; b < blocks; ++b) s.block_table.push_back(first_block + int32_t(b));
    s.want_logits = true;
    return s;
  };
  for (const std::vector<SeqPlan>& step : {std::vector<SeqPlan>{seq(0, 0, 20, 0), seq(1, 0, 5, 10), seq(2, 0, 699, 20)},
                                           std::vector<SeqPlan>{seq(0, 20, 1, 0), seq(1, 5, 13, 10), seq(2, 699, 1, 20)}}) {
    std::vector<float> want, got;
    on_cpu.forward(step, cpu_pool, want);
    on_gpu.forward(step, gpu_pool, got);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(nmse(got, want), kNmse);
  }
}

TEST(CudaBackend, RefusesWeightsItHasNoKernelFor) {
  TP_REQUIRE_CUDA_BACKEND(gpu);
  const std::vector<float> w(size_t(8 * 32), 0.5f);
  try {
    gpu->upload(cpu::Weight(DType::F32, 8, 32, DType::F32, w.data(), 32 * 4));
    FAIL() << "an F32 weight was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype bf16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu->upload(cpu::Weight(DType::BF16, 8, 32, DType::F32, w.data(), 32 * 4))->n_bytes(), 8 * 32 * 2);
}

}  // namespace
}  // namespace tp
