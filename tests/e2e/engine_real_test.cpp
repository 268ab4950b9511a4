// The engine on the real model (SmolLM2-135M-Instruct, Q4_1 GGUF, F32 runtime, tp = 1): 64 concurrent
// requests of mixed lengths — half of them behind a shared ~100-token system prompt, some prompts repeated —
// must each give exactly the greedy tokens the same prompt gives alone (DESIGN §5: a batched run equals the
// requests run one at a time). Reference: LocalRunner (one sequence, its own pool) per unique prompt.
// Then the same load on a KV pool small enough to force preemption (recompute) must give the same tokens.
// After each run: zero blocks in use, BlockManager invariants hold, prefix-hit tokens > 0.
//
// The same with the KV pool in bf16 (cache.dtype's default): the reference runs alone on a bf16 pool too.
// And the same on the Q8_0 GGUF (F32 pool), the weights kept in Q8_0 blocks.
//
// Greedy rule (DESIGN §5): the batched forward may take oneDNN GEMM where a lone decode takes the GEMV
// (m >= 16 vs m = 1), which can differ in the last float bits. A divergence at generated token j passes
// only if the reference's top-2 logit gap there is below the tie gap (a genuine near-tie); the comparison of
// that request stops there, and the test reports how many such ties it accepted. F32 pool: kTieGap. bf16
// pool: kBf16TieGap — a last-bit difference in a K or V element can round it to the neighbouring bf16 value
// (a 2^-8 relative step), so the same near-ties are looser; the stored bytes of a prefix-cache hit or a
// recompute after preemption are otherwise those of the first computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "coordinator/engine.h"
#include "coordinator/tokenizer.h"
#include "kernels/cpu/linear.h"
#include "kvstore/capacity.h"
#include "launch/worker_executor.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/sampler.h"
#include "rank/sequence_runner.h"
#include "tests/util/top2_gap.h"

namespace tp {
namespace {

constexpr int64_t kRequests = 64;
constexpr int64_t kMaxGen = 16;         // tokens per request at most (CI time)
constexpr float kTieGap = 1e-4f;        // F32 near-tie, as tests/e2e/oracle_test.cpp
constexpr float kBf16TieGap = 2e-2f;    // bf16 pool: one bf16 rounding step of some K/V elements
constexpr int32_t kBlockSize = 16;

std::string source_dir() {
  const char* env = std::getenv("TPSERVE_SOURCE_DIR");
  return env && *env ? env : TPSERVE_SOURCE_DIR;
}

struct Reference {
  std::vector<int32_t> tokens;  // [n <= kMaxGen] greedy
  std::vector<float> gap;       // [n] top-2 logit gap where each was chosen
};

using test::top2_gap;

struct Load {
  std::vector<std::vector<int32_t>> prompts;  // unique prompts
  struct Item {
    size_t prompt;
    int64_t max_tokens;
    bool ignore_eos;
  };
  std::vector<Item> items;  // [kRequests]
};

Load make_load(const Tokenizer& tok) {
  const std::string system =
      "<|im_start|>system\nYou are a careful assistant for a small hardware shop. You answer questions about "
      "tools, screws, paint and garden supplies. Keep every answer short, friendly and factual; when you do not "
      "know a price, say so and suggest asking at the counter. Never invent stock levels. The shop opens at eight in "
      "the morning and closes at six in the evening, and it is closed on public holidays.<|im_end|>\n";
  const char* questions[] = {"Do you sell brass hinges?", "What paint works on metal gates outside?",
                             "How long is the warranty on the cordless drill?",
                             "Which screws should I use for oak decking boards?",
                             "Can I rent a lawn mower for a weekend?",
                             "What is the difference between a claw hammer and a framing hammer?",
                             "My tap drips. Which washer do I need?",
                             "How many litres of paint cover a 12 square metre wall?"};
  const char* plain[] = {"The capital of France is", "Once upon a time, in a quiet village by the sea,",
                         "1, 2, 3, 4, 5,", "def fibonacci(n):",
                         "A recipe for pancakes needs flour, eggs, milk and",
                         "Photosynthesis is the process by which plants",
                         "Dear hiring manager, I am writing to apply for the position of",
                         "The best way to learn a new language is to practise every day, read books, watch films "
                         "and talk with native speakers. Another good idea is"};
  Load load;
  for (const char* q : questions)
    load.prompts.push_back(tok.encode(system + "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n",
                                      tok.add_bos(), true));
  for (const char* p : plain) load.prompts.push_back(tok.encode(p, tok.add_bos(), true));
  for (int64_t i = 0; i < kRequests; ++i)
    load.items.push_back({size_t((i * 7) % int64_t(load.prompts.size())), 4 + (i * 5) % (kMaxGen - 3), i % 2 == 0});
  return load;
}

// What request `it` must produce given the reference: the first max_tokens, cut after an EOG unless ignored.
std::vector<int32_t> expected(const Reference& ref, const Load::Item& it, const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (int64_t j = 0; j < it.max_tokens; ++j) {
    out.push_back(ref.tokens[size_t(j)]);
    if (!it.ignore_eos && tok.is_eog(ref.tokens[size_t(j)])) break;
  }
  return out;
}

struct RunStats {
  int64_t n_ties = 0;
  double seconds = 0;
  EngineMetrics metrics;
};

RunStats run_engine(LlamaModel& model, const Tokenizer& tok, const Load& load, const std::vector<Reference>& refs,
                    int32_t n_blocks, int64_t max_num_batched_tokens, KvDType kv_dtype, float tie_gap) {
  KvPool pool(model.kv_shape(n_blocks, kBlockSize, kv_dtype));
  Worker worker(model, pool, nullptr);
  WorkerExecutor executor(worker);
  EngineConfig cfg;
  cfg.scheduler.n_blocks = n_blocks;
  cfg.scheduler.block_size = kBlockSize;
  cfg.scheduler.max_num_seqs = kRequests;
  cfg.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  cfg.scheduler.max_context = 512;
  cfg.vocab = model.config().vocab;
  cfg.is_eog = [&tok](int32_t t) { return tok.is_eog(t); };
  cfg.kv_footprint = kv_footprint(model_shape_from(model.config(), 0), model.layout().kv_heads.size(), kv_cost(kv_dtype));
  Engine engine(cfg, executor);
  EXPECT_NE(engine.startup_report().find(std::to_string(n_blocks) + " blocks"), std::string::npos)
      << engine.startup_report();

  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, FinishReason> reason;
  std::vector<int64_t> ids;
  for (const Load::Item& it : load.items) {
    Request r;
    r.prompt = load.prompts[it.prompt];
    r.max_tokens = it.max_tokens;
    r.ignore_eos = it.ignore_eos;
    r.sampling.temperature = 0;
    r.on_output = [&](const RequestOutput& o) {
      got[o.request_id].insert(got[o.request_id].end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) reason[o.request_id] = o.finish_reason;
    };
    ids.push_back(engine.submit(std::move(r)));
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (engine.has_work()) {
    engine.step();
    engine.scheduler().block_manager().check_invariants();
  }
  RunStats stats;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.metrics = engine.metrics();
  EXPECT_EQ(engine.scheduler().block_manager().n_in_use(), 0);
  EXPECT_EQ(stats.metrics.n_blocks_in_use, 0);

  for (size_t i = 0; i < ids.size(); ++i) {
    const Load::Item& it = load.items[i];
    const Reference& ref = refs[it.prompt];
    const std::vector<int32_t> want = expected(ref, it, tok);
    const std::vector<int32_t>& have = got[ids[i]];
    EXPECT_TRUE(reason[ids[i]] == FinishReason::Length || reason[ids[i]] == FinishReason::Stop) << "request " << i;
    size_t j = 0;
    while (j < want.size() && j < have.size() && have[j] == want[j]) ++j;
    if (j == want.size() && have.size() == want.size()) continue;
    if (j < want.size() && j < have.size() && ref.gap[j] < tie_gap) {
      ++stats.n_ties;  // a genuine near-tie: the continuation may differ from here on
      continue;
    }
    ADD_FAILURE() << "request " << i << " (prompt " << it.prompt << ", " << load.prompts[it.prompt].size()
                  << " tokens) diverges at generated token " << j << ": got "
                  << (j < have.size() ? std::to_string(have[j]) : "<end>") << ", alone "
                  << (j < want.size() ? std::to_string(want[j]) : "<end>") << " (reference top-2 gap "
                  << (j < want.size() ? ref.gap[j] : 0.0f) << ")";
  }
  return stats;
}

void check_batched_equals_alone(KvDType kv_dtype, float tie_gap,
                                const std::string& model_file = "SmolLM2-135M-Instruct.Q4_1.gguf") {
  const std::string path = source_dir() + "/models/" + model_file;
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run launch/setup";
  cpu::set_num_threads(1);  // ctest runs tests side by side on 2 cores: never oversubscribe (DESIGN §4)
  auto file = open_model(path);
  LlamaModel model(*file, DType::F32);
  const Tokenizer tok(file->tokenizer());
  const Load load = make_load(tok);

  // Reference: every unique prompt alone, as many greedy tokens as its longest request needs, with the
  // top-2 gaps.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> n_gen(load.prompts.size(), 0);
  for (const Load::Item& it : load.items) n_gen[it.prompt] = std::max(n_gen[it.prompt], it.max_tokens);
  std::vector<Reference> refs;
  for (size_t p = 0; p < load.prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = load.prompts[p];
    LocalRunner run(model, int64_t(prompt.size()) + kMaxGen, kBlockSize, kv_dtype);
    Reference ref;
    const std::vector<float>* logits = &run.seq.feed(prompt);
    for (int64_t j = 0; j < n_gen[p]; ++j) {
      const int32_t next = argmax(logits->data(), int64_t(logits->size()));
      ref.tokens.push_back(next);
      ref.gap.push_back(top2_gap(*logits));
      if (j + 1 < n_gen[p]) logits = &run.seq.feed({next});
    }
    refs.push_back(std::move(ref));
  }
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t longest = 0;
  for (const auto& p : load.prompts) longest = std::max<int64_t>(longest, int64_t(p.size()));
  const auto& p0 = load.prompts[0];
  const auto& p1 = load.prompts[1];
  const size_t shared = size_t(std::mismatch(p0.begin(), p0.end(), p1.begin(), p1.end()).first - p0.begin());
  ASSERT_GE(shared, 80u) << "the shared system prompt should be about 100 tokens";

  // 1. A pool that holds everything: 64 x ceil((longest + 16) / 16) blocks.
  const int32_t roomy = int32_t(kRequests * ((longest + kMaxGen + kBlockSize - 1) / kBlockSize));
  const RunStats a = run_engine(model, tok, load, refs, roomy, 256, kv_dtype, tie_gap);
  EXPECT_EQ(a.metrics.n_preemptions, 0);
  EXPECT_GT(a.metrics.prefix_hit_tokens, 0);
  EXPECT_EQ(a.metrics.n_finished, kRequests);

  // 2. A pool of 3 longest requests: preemption by recompute must happen and change nothing.
  const int32_t tight = int32_t(3 * ((longest + kMaxGen + kBlockSize - 1) / kBlockSize));
  const RunStats b = run_engine(model, tok, load, refs, tight, 256, kv_dtype, tie_gap);
  EXPECT_GT(b.metrics.n_preemptions, 0);
  EXPECT_GT(b.metrics.prefix_hit_tokens, 0);
  EXPECT_EQ(b.metrics.n_finished, kRequests);

  std::printf(
      "%s pool, reference (%zu prompts alone): %.2f s\n"
      "roomy  pool %5d blocks: %.2f s, %lld steps, %lld computed tokens, prefix hits %lld / %lld tokens, "
      "%lld preemptions, %lld near-ties\n"
      "tight  pool %5d blocks: %.2f s, %lld steps, %lld computed tokens, prefix hits %lld / %lld tokens, "
      "%lld preemptions, %lld near-ties\n",
      std::string(kv_dtype_name(kv_dtype)).c_str(), load.prompts.size(), ref_s, roomy, a.seconds, (long long)a.metrics.n_steps,
      (long long)a.metrics.n_computed_tokens, (long long)a.metrics.prefix_hit_tokens,
      (long long)a.metrics.prefix_query_tokens, (long long)a.metrics.n_preemptions, (long long)a.n_ties, tight,
      b.seconds, (long long)b.metrics.n_steps, (long long)b.metrics.n_computed_tokens,
      (long long)b.metrics.prefix_hit_tokens, (long long)b.metrics.prefix_query_tokens,
      (long long)b.metrics.n_preemptions, (long long)b.n_ties);
}

TEST(EngineReal, BatchedEqualsAloneWithPrefixSharingAndPreemption) { check_batched_equals_alone(KvDType::F32, kTieGap); }

TEST(EngineReal, Bf16PoolBatchedEqualsAloneWithPrefixSharingAndPreemption) {
  check_batched_equals_alone(KvDType::BF16, kBf16TieGap);
}

// Q8_0 weights (kept quantized: kernels/cpu/gemm_gguf): the format whose decode kernel once summed in another
// order at m = 1 than in a batch — a lone sequence then diverged from the same one in a batch.
TEST(EngineReal, Q8_0BatchedEqualsAloneWithPrefixSharingAndPreemption) {
  check_batched_equals_alone(KvDType::F32, kTieGap, "SmolLM2-135M-Instruct.Q8_0.gguf");
}

}  // namespace
}  // namespace tp
