// Engine tests for n > 1 choices, penalties' history and logprobs routing, over a fake executor that
// simulates the KV cache: it writes every planned token into its slot (block table + copy-on-write copies)
// and "samples" from what the block table reads back. So a choice that shares the prompt's blocks produces
// the same tokens as a solo request with its seed only if forks, copies and tables are right.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "coordinator/engine.h"

namespace tp {
namespace {

class KvSimExecutor final : public StepExecutor {
 public:
  KvSimExecutor(int32_t n_blocks, int32_t block_size) : bs_(block_size), slots_(size_t(n_blocks) * block_size, -1) {}

  void execute(StepPlan& plan, StepResult& result) override {
    result = {};
    for (const BlockCopy& c : plan.block_copies)
      for (int32_t i = 0; i < bs_; ++i) slots_[size_t(c.dst * bs_ + i)] = slots_[size_t(c.src * bs_ + i)];
    bool any_logprobs = false;
    for (const SeqPlan& sp : plan.seqs) {
      n_tokens += int64_t(sp.tokens.size());
      for (size_t i = 0; i < sp.tokens.size(); ++i) slot(sp, sp.start_pos + int64_t(i)) = sp.tokens[i];
      if (!sp.want_logits) continue;
      histories[sp.seq_id].push_back(sp.history);
      // The "model": a hash of every token the sequence's table reads back, and the seed.
      uint64_t h = sp.sampling.seed * 0x9e3779b97f4a7c15ull;
      const int64_t n = sp.start_pos + int64_t(sp.tokens.size());
      for (int64_t p = 0; p < n; ++p) h = (h ^ uint64_t(slot(sp, p) + 7)) * 0x100000001b3ull;
      const int32_t token = int32_t(h % 40);  // never 49 (eog in these tests)
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(token);
      std::optional<TokenLogprobs> lp;
      if (sp.sampling.logprobs >= 0) {
        lp = TokenLogprobs{-0.25f * float(token), {token}, {-0.25f * float(token)}};
        any_logprobs = true;
      }
      result.logprobs.push_back(lp);
    }
    if (!any_logprobs) result.logprobs.clear();
  }
  void shutdown() override {}

  int64_t n_tokens = 0;
  std::map<int64_t, std::vector<std::vector<int32_t>>> histories;  // seq id -> history of each sampling plan

 private:
  int32_t& slot(const SeqPlan& sp, int64_t pos) {
    const int32_t b = sp.block_table.at(size_t(pos / bs_));
    return slots_.at(size_t(b) * bs_ + size_t(pos % bs_));
  }
  int32_t bs_;
  std::vector<int32_t> slots_;
};

EngineConfig config(int32_t n_blocks = 64) {
  EngineConfig e;
  e.scheduler.n_blocks = n_blocks;
  e.scheduler.block_size = 4;
  e.scheduler.max_context = 64;
  e.scheduler.max_num_seqs = 8;
  e.scheduler.max_num_batched_tokens = 64;
  e.max_queued_requests = 100;
  e.vocab = 100;
  e.is_eog = [](int32_t t) { return t == 49; };
  return e;
}

Request req(int64_t n_prompt, int64_t max_tokens, uint64_t seed, int32_t n, OutputCallback cb) {
  Request r;
  for (int64_t i = 0; i < n_prompt; ++i) r.prompt.push_back(int32_t(50 + (i * 7) % 40));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = seed;
  r.n = n;
  r.on_output = std::move(cb);
  return r;
}

struct Collected {
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> tokens;   // (request, index) -> tokens
  std::map<std::pair<int64_t, int32_t>, std::vector<RequestOutput>> finished;
  std::map<std::pair<int64_t, int32_t>, std::vector<TokenLogprobs>> logprobs;
  std::vector<int32_t>& toks(int64_t r, int32_t i) { return tokens[{r, i}]; }
  std::vector<RequestOutput>& fin(int64_t r, int32_t i) { return finished[{r, i}]; }
  std::vector<TokenLogprobs>& lps(int64_t r, int32_t i) { return logprobs[{r, i}]; }
  OutputCallback sink() {
    return [this](const RequestOutput& o) {
      auto& t = tokens[{o.request_id, o.index}];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      auto& l = logprobs[{o.request_id, o.index}];
      l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
      if (o.finished) finished[{o.request_id, o.index}].push_back(o);
    };
  }
};

// Tokens a solo request (n = 1) with this seed produces on a fresh engine.
std::vector<int32_t> solo(int64_t n_prompt, int64_t max_tokens, uint64_t seed) {
  KvSimExecutor ex(64, 4);
  Engine e(config(), ex);
  Collected c;
  const int64_t id = e.submit(req(n_prompt, max_tokens, seed, 1, c.sink()));
  e.run_until_idle();
  return c.toks(id, 0);
}

TEST(EngineChoices, ShareThePromptBlocksAndMatchSoloRuns) {
  KvSimExecutor ex(64, 4);
  Engine e(config(), ex);
  Collected c;
  const int64_t id = e.submit(req(10, 6, 100, 3, c.sink()));
  e.step();  // prefill of tokens [0, 9), then the fork
  ASSERT_EQ(e.last_step().scheduled.size(), 1u);
  EXPECT_EQ(e.last_step().scheduled[0].second, 9);
  ASSERT_EQ(e.last_step().forked.size(), 2u);
  const BlockManager& bm = e.scheduler().block_manager();
  const int64_t parent = e.last_step().scheduled[0].first;
  for (int64_t child : e.last_step().forked) EXPECT_EQ(bm.block_table(child), bm.block_table(parent));
  EXPECT_EQ(bm.n_in_use(), 3);  // ceil(9 / 4): shared, not copied
  e.step();  // every choice computes token 9 on its own copy of the last (partial) block
  EXPECT_EQ(e.last_step().scheduled.size(), 3u);
  EXPECT_TRUE(e.last_step().forked.empty());
  EXPECT_GE(bm.n_in_use(), 3 + 2);  // the shared blocks + a copy-on-write copy of the last one per child
  e.run_until_idle();

  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c.toks(id, i), solo(10, 6, 100 + uint64_t(i))) << "choice " << i;
    ASSERT_EQ(c.fin(id, i).size(), 1u) << "choice " << i;
    EXPECT_EQ(c.fin(id, i)[0].finish_reason, FinishReason::Length);
    EXPECT_EQ(c.fin(id, i)[0].n_generated, 6);
  }
  EXPECT_NE(c.toks(id, 0), c.toks(id, 1));
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.n_prompt_tokens, 10);            // counted once per request
  EXPECT_EQ(m.n_computed_tokens, 9 + 3 * 6);   // the shared 9 once; token 9 and 5 decodes per choice
  EXPECT_EQ(m.n_generation_tokens, 18);
  EXPECT_EQ(m.n_finished, 3);
  EXPECT_EQ(bm.n_in_use(), 0);
  bm.check_invariants();
}

TEST(EngineChoices, PreemptionUnderPressureKeepsEveryChoiceExact) {
  // 12 blocks x 4 tokens: 3 requests x 4 choices growing to 12 + 16 positions cannot all fit.
  KvSimExecutor ex(12, 4);
  Engine e(config(12), ex);
  Collected c;
  std::vector<int64_t> ids;
  for (int r = 0; r < 3; ++r) ids.push_back(e.submit(req(12 + r, 16, 7 + uint64_t(r) * 10, 4, c.sink())));
  e.run_until_idle();
  EXPECT_GT(e.metrics().n_preemptions, 0);
  for (int r = 0; r < 3; ++r)
    for (int32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(c.toks(ids[size_t(r)], i), solo(12 + r, 16, 7 + uint64_t(r) * 10 + uint64_t(i)))
          << "request " << r << " choice " << i;
      EXPECT_EQ(c.fin(ids[size_t(r)], i).size(), 1u);
    }
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
  e.scheduler().block_manager().check_invariants();
}

TEST(EngineChoices, OneTokenPromptAndStaticReservationSplitIntoIndependentChoices) {
  for (bool is_static : {false, true}) {
    EngineConfig cfg = config();
    if (is_static) cfg.scheduler.reservation = KvReservation::Static;
    KvSimExecutor ex(64, 4);
    Engine e(cfg, ex);
    Collected c;
    const int64_t n_prompt = is_static ? 6 : 1;
    const int64_t id = e.submit(req(n_prompt, 5, 3, 3, c.sink()));
    e.run_until_idle();
    for (int32_t i = 0; i < 3; ++i) {
      EXPECT_EQ(c.toks(id, i), solo(n_prompt, 5, 3 + uint64_t(i))) << "static " << is_static << " choice " << i;
      EXPECT_EQ(c.fin(id, i).size(), 1u);
    }
    EXPECT_EQ(e.metrics().n_prompt_tokens, n_prompt);
    EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
  }
}

TEST(EngineChoices, AbortOneChoiceOrAllIncludingPendingForks) {
  KvSimExecutor ex(64, 4);
  EngineConfig cfg = config();
  cfg.scheduler.max_num_batched_tokens = 8;  // a 20-token prompt prefills in 3 steps: forks stay pending
  Engine e(cfg, ex);
  Collected c;
  const int64_t a = e.submit(req(20, 8, 1, 3, c.sink()));
  e.step();
  e.abort(a);  // choices 1 and 2 were never forked: they finish too
  e.step();
  for (int32_t i = 0; i < 3; ++i) {
    ASSERT_EQ(c.fin(a, i).size(), 1u) << i;
    EXPECT_EQ(c.fin(a, i)[0].finish_reason, FinishReason::Abort);
    EXPECT_EQ(c.fin(a, i)[0].n_generated, 0);
  }
  EXPECT_FALSE(e.has_work());

  const int64_t b = e.submit(req(20, 8, 1, 3, c.sink()));
  e.step();
  e.abort(b, 2);  // a pending choice alone
  e.run_until_idle();
  EXPECT_EQ(c.fin(b, 2)[0].finish_reason, FinishReason::Abort);
  EXPECT_TRUE(c.toks(b, 2).empty());
  for (int32_t i = 0; i < 2; ++i) EXPECT_EQ(c.toks(b, i), solo(20, 8, 1 + uint64_t(i))) << i;

  const int64_t d = e.submit(req(6, 8, 5, 3, c.sink()));
  e.step();
  e.step();  // forked and sampling
  e.abort(d, 1);
  e.run_until_idle();
  EXPECT_EQ(c.fin(d, 1)[0].finish_reason, FinishReason::Abort);
  EXPECT_LT(c.toks(d, 1).size(), 8u);
  EXPECT_EQ(c.toks(d, 0), solo(6, 8, 5));
  EXPECT_EQ(c.toks(d, 2), solo(6, 8, 7));
  e.abort(d);  // finished: ignored
  e.step();
  for (int32_t i = 0; i < 3; ++i) EXPECT_EQ(c.fin(d, i).size(), 1u);
  EXPECT_EQ(e.metrics().n_aborted, 3 + 1 + 1);
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(EngineChoices, RejectsNOutsideOneToMaxNumSeqs) {
  KvSimExecutor ex(64, 4);
  Engine e(config(), ex);
  for (int32_t n : {0, -1, 9}) {
    try {
      e.submit(req(4, 2, 0, n, {}));
      ADD_FAILURE() << "n = " << n << " accepted";
    } catch (const InputError& err) {
      EXPECT_NE(std::string(err.what()).find("n must be in [1, 8]"), std::string::npos) << err.what();
    }
  }
  EXPECT_FALSE(e.has_work());
}

TEST(EngineChoices, PenaltyHistoryAndLogprobsReachTheirRequests) {
  KvSimExecutor ex(64, 4);
  Engine e(config(), ex);
  Collected c;
  Request p = req(5, 3, 9, 2, c.sink());
  p.sampling.repetition_penalty = 1.3f;
  p.sampling.logprobs = 2;
  const int64_t ip = e.submit(std::move(p));
  const int64_t iq = e.submit(req(5, 3, 9, 1, c.sink()));  // no penalties, no logprobs
  e.run_until_idle();
  // Every sampling plan of a penalized sequence carries its whole history; the others carry none.
  for (const auto& [seq, hs] : ex.histories) {
    const bool penalized = seq != 2;  // sequences 0, 1 are request ip's choices; 2 is iq
    ASSERT_EQ(hs.size(), 3u) << seq;
    for (size_t k = 0; k < hs.size(); ++k) EXPECT_EQ(hs[k].size(), penalized ? 5 + k : 0) << seq << " " << k;
  }
  for (int32_t i = 0; i < 2; ++i) {
    const auto& toks = c.toks(ip, i);
    const auto& lps = c.lps(ip, i);
    ASSERT_EQ(lps.size(), toks.size());
    for (size_t k = 0; k < toks.size(); ++k) EXPECT_EQ(lps[k].top_ids, std::vector<int32_t>{toks[k]});
  }
  EXPECT_TRUE(c.lps(iq, 0).empty());
}

}  // namespace
}  // namespace tp
