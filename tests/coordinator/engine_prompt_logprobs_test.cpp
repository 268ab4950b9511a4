// Engine tests for prompt logprobs (echo + logprobs, vLLM's prompt_logprobs), max_tokens 0 and logit_bias,
// over a fake executor that writes every planned token into its KV slot and answers each prompt target with
// a logprob that encodes where it was computed: logprob = -(its position), rank = target id + 1. So the
// engine's vector is right only if every chunk's targets and positions line up with the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "coordinator/engine.h"

namespace tp {
namespace {

class PromptSimExecutor final : public StepExecutor {
 public:
  void execute(StepPlan& plan, StepResult& result) override {
    result = {};
    for (const SeqPlan& sp : plan.seqs) {
      starts[sp.seq_id].push_back(sp.start_pos);
      chunk_sizes[sp.seq_id].push_back(int64_t(sp.tokens.size()));
      if (!sp.prompt_targets.empty()) {
        PromptLogprobs p{sp.seq_id, sp.start_pos + 1, {}};
        for (size_t i = 0; i < sp.prompt_targets.size(); ++i) {
          TokenLogprobs t;
          t.logprob = -float(sp.start_pos + 1 + int64_t(i));
          t.rank = sp.prompt_targets[i] + 1;
          for (int32_t k = 0; k < sp.prompt_logprobs; ++k) {
            t.top_ids.push_back(k);
            t.top_logprobs.push_back(-1.0f);
          }
          p.entries.push_back(t);
        }
        result.prompt_logprobs.push_back(std::move(p));
      }
      if (!sp.want_logits) continue;
      ++n_sampled;
      bias[sp.seq_id] = sp.logit_bias;
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(7);
    }
  }
  void shutdown() override {}

  std::map<int64_t, std::vector<int64_t>> starts, chunk_sizes;  // seq id -> each plan's start_pos / size
  std::map<int64_t, std::vector<LogitBias>> bias;                // seq id -> its latest sampling plan's bias
  int64_t n_sampled = 0;
};

EngineConfig config(int32_t n_blocks = 256, int64_t budget = 16) {
  EngineConfig e;
  e.scheduler.n_blocks = n_blocks;
  e.scheduler.block_size = 4;
  e.scheduler.max_context = 2048;
  e.scheduler.max_num_seqs = 8;
  e.scheduler.max_num_batched_tokens = budget;
  e.max_queued_requests = 100;
  e.vocab = 1000;
  return e;
}

struct Outputs {
  std::map<std::pair<int64_t, int32_t>, std::vector<RequestOutput>> all;  // (request, choice) -> outputs
  OutputCallback sink() {
    return [this](const RequestOutput& o) { all[{o.request_id, o.index}].push_back(o); };
  }
  std::vector<RequestOutput>& of(int64_t r, int32_t i) { return all[{r, i}]; }
  // The choice's outputs that carried prompt logprobs.
  std::vector<const RequestOutput*> with_prompt_lp(int64_t r, int32_t i) {
    std::vector<const RequestOutput*> out;
    for (const RequestOutput& o : of(r, i))
      if (o.prompt_logprobs) out.push_back(&o);
    return out;
  }
};

Request req(std::vector<int32_t> prompt, int64_t max_tokens, int32_t prompt_logprobs, OutputCallback cb, int32_t n = 1) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.prompt_logprobs = prompt_logprobs;
  r.n = n;
  r.on_output = std::move(cb);
  return r;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t salt = 0) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + salt) % 900));
  return p;
}

// Every position after the first has the logprob computed for it, of the right target.
void expect_complete(const std::vector<TokenLogprobs>& lp, const std::vector<int32_t>& prompt, int32_t k) {
  ASSERT_EQ(lp.size(), prompt.size());
  for (size_t pos = 1; pos < prompt.size(); ++pos) {
    EXPECT_EQ(lp[pos].logprob, -float(pos)) << pos;
    EXPECT_EQ(lp[pos].rank, prompt[pos] + 1) << pos;
    EXPECT_EQ(int32_t(lp[pos].top_ids.size()), k) << pos;
  }
}

TEST(EnginePromptLogprobs, CoverEveryPositionAcrossChunks) {
  PromptSimExecutor ex;
  Engine e(config(), ex);
  Outputs out;
  const std::vector<int32_t> prompt = prompt_of(40);
  const int64_t id = e.submit(req(prompt, 3, 2, out.sink()));
  e.run_until_idle();
  const auto carried = out.with_prompt_lp(id, 0);
  ASSERT_EQ(carried.size(), 1u);                      // once, with the first token
  EXPECT_EQ(carried[0]->new_tokens.size(), 1u);
  expect_complete(*carried[0]->prompt_logprobs, prompt, 2);
  EXPECT_EQ(ex.chunk_sizes[0], (std::vector<int64_t>{16, 16, 8, 1, 1}));  // budget 16, then two decodes
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(EnginePromptLogprobs, MaxTokensZeroPrefillsOnlyAndFinishesWithLength) {
  PromptSimExecutor ex;
  Engine e(config(), ex);
  Outputs out;
  const std::vector<int32_t> prompt = prompt_of(23);
  const int64_t id = e.submit(req(prompt, 0, 0, out.sink()));
  const int64_t plain = e.submit(req(prompt_of(5, 3), 0, -1, out.sink()));  // no logprobs: still finishes
  e.run_until_idle();
  EXPECT_EQ(ex.n_sampled, 0);
  for (const int64_t r : {id, plain}) {
    const auto& o = out.of(r, 0);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].finished);
    EXPECT_EQ(o[0].finish_reason, FinishReason::Length);
    EXPECT_TRUE(o[0].new_tokens.empty());
    EXPECT_EQ(o[0].n_generated, 0);
  }
  ASSERT_TRUE(out.of(id, 0)[0].prompt_logprobs);
  expect_complete(*out.of(id, 0)[0].prompt_logprobs, prompt, 0);
  EXPECT_FALSE(out.of(plain, 0)[0].prompt_logprobs);
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(EnginePromptLogprobs, EveryChoiceGetsThemOnce) {
  PromptSimExecutor ex;
  Engine e(config(), ex);
  Outputs out;
  const std::vector<int32_t> prompt = prompt_of(10);
  const int64_t id = e.submit(req(prompt, 2, 1, out.sink(), 3));
  e.run_until_idle();
  for (int32_t i = 0; i < 3; ++i) {
    const auto carried = out.with_prompt_lp(id, i);
    ASSERT_EQ(carried.size(), 1u) << i;
    expect_complete(*carried[0]->prompt_logprobs, prompt, 1);
  }
  // The shared part [0, 9) is prefilled once; each choice computes the last prompt token, then decodes.
  EXPECT_EQ(ex.chunk_sizes[0], (std::vector<int64_t>{9, 1, 1}));
  // max_tokens 0 with n = 2: both choices finish after the prompt, with the logprobs.
  const int64_t zero = e.submit(req(prompt, 0, 1, out.sink(), 2));
  e.run_until_idle();
  for (int32_t i = 0; i < 2; ++i) {
    ASSERT_EQ(out.of(zero, i).size(), 1u);
    EXPECT_EQ(out.of(zero, i)[0].finish_reason, FinishReason::Length);
    ASSERT_TRUE(out.of(zero, i)[0].prompt_logprobs);
    expect_complete(*out.of(zero, i)[0].prompt_logprobs, prompt, 1);
  }
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(EnginePromptLogprobs, PromptIsRecomputedNotServedFromThePrefixCache) {
  PromptSimExecutor ex;
  Engine e(config(256, 64), ex);
  Outputs out;
  const std::vector<int32_t> prompt = prompt_of(30);
  e.submit(req(prompt, 2, -1, out.sink()));
  e.run_until_idle();
  const int64_t with_lp = e.submit(req(prompt, 2, 0, out.sink()));
  e.run_until_idle();
  const int64_t again = e.submit(req(prompt, 2, -1, out.sink()));
  e.run_until_idle();
  // Sequence ids follow request ids here (n = 1): the second starts at 0, the third at a cached block.
  EXPECT_EQ(ex.starts[with_lp].front(), 0);
  expect_complete(*out.with_prompt_lp(with_lp, 0).at(0)->prompt_logprobs, prompt, 0);
  EXPECT_EQ(ex.starts[again].front(), 28);  // 7 whole blocks of 4 hit (at least one token is computed)
}

TEST(EnginePromptLogprobs, ChunksAreCappedAtMaxPromptLogprobRows) {
  PromptSimExecutor ex;
  Engine e(config(1024, 2048), ex);
  Outputs out;
  const int64_t lp = e.submit(req(prompt_of(1200), 1, 0, out.sink()));
  e.run_until_idle();
  const int64_t plain = e.submit(req(prompt_of(1200, 5), 1, -1, out.sink()));
  e.run_until_idle();
  EXPECT_EQ(ex.chunk_sizes[lp], (std::vector<int64_t>{kMaxPromptLogprobRows, kMaxPromptLogprobRows,
                                                      1200 - 2 * kMaxPromptLogprobRows}));
  EXPECT_EQ(ex.chunk_sizes[plain], (std::vector<int64_t>{1200}));
  expect_complete(*out.with_prompt_lp(lp, 0).at(0)->prompt_logprobs, prompt_of(1200), 0);
}

// A sequence preempted in the middle of its prompt recomputes it; each position's logprob is kept from the
// first time and the vector is still complete and in order.
TEST(EnginePromptLogprobs, SurvivePreemptionMidPrompt) {
  PromptSimExecutor ex;
  Engine e(config(14, 8), ex);  // 14 blocks x 4 = 56 positions, 8 tokens a step
  Outputs out;
  const int64_t a = e.submit(req(prompt_of(6, 1), 44, -1, out.sink()));  // grows to 49 positions (13 blocks)
  for (int i = 0; i < 20; ++i) e.step();                                   // A holds 7 blocks
  const std::vector<int32_t> prompt = prompt_of(40, 2);                    // B needs 10 more: it cannot finish
  const int64_t b = e.submit(req(prompt, 2, 3, out.sink()));
  e.run_until_idle();
  EXPECT_GT(e.metrics().n_preemptions, 0);
  EXPECT_GT(ex.starts[b].size(), 4u);
  EXPECT_GE(std::count(ex.starts[b].begin(), ex.starts[b].end(), 0), 2);  // admitted, preempted, readmitted
  const auto carried = out.with_prompt_lp(b, 0);
  ASSERT_EQ(carried.size(), 1u);
  expect_complete(*carried[0]->prompt_logprobs, prompt, 3);
  EXPECT_EQ(out.of(a, 0).back().n_generated, 44);
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(EnginePromptLogprobs, LogitBiasReachesTheSamplingPlan) {
  PromptSimExecutor ex;
  Engine e(config(), ex);
  Outputs out;
  Request r = req(prompt_of(20), 2, -1, out.sink());
  r.logit_bias = {{5, 1.5f}, {999, -100.0f}};
  const int64_t id = e.submit(std::move(r));
  e.run_until_idle();
  EXPECT_EQ(ex.bias[id], (std::vector<LogitBias>{{5, 1.5f}, {999, -100.0f}}));
}

}  // namespace
}  // namespace tp
