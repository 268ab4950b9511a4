// Table-driven, per-iteration tests of the Scheduler through the Engine (TensorRT-LLM style), with a fake
// StepExecutor that simulates the KV pool: every planned token is written to its slot as (token, position),
// then every position a sequence attends to must hold that sequence's token — so a wrong prefix hit, a
// block overwritten while in use, or a recompute from wrong tokens fails the step.
// Fake sampling: the token at position p of request r is (7 r + p) % kVocab, or kEos where a row says.
// Each row gives the config, the requests (arrival step, prompt length, max_tokens, optional EOS / abort
// step / shared prefix) and, per iteration, the tokens planned ("id:n", plan order), the running and waiting
// sets after the step and the preempted ones. After every step: BlockManager::check_invariants; at the end:
// zero blocks in use and every request delivered exactly its expected tokens, each once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/engine.h"

namespace tp {
namespace {

constexpr int32_t kVocab = 997;
constexpr int32_t kEos = 1000;  // never produced by (7 r + p) % kVocab

struct Cfg {
  int32_t n_blocks = 64;
  int32_t block_size = 4;
  int64_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 100;
  int64_t max_context = 64;
  bool prefix_caching = true;
  KvReservation reservation = KvReservation::Paged;
};

struct Req {
  int64_t arrive = 0;       // submitted before this step
  int64_t prompt_len = 4;
  int64_t max_tokens = 2;
  int64_t eos_at = 0;       // > 0: the eos_at-th generated token is kEos
  int64_t abort_at = -1;    // >= 0: aborted before this step
  int64_t shared = 0;       // the first `shared` prompt tokens are common to every request
};

struct Step {
  const char* scheduled;    // "id:n ..." in plan order
  const char* running;      // after the step
  const char* waiting;      // after the step, queue order
  const char* preempted = "";
};

struct Case {
  const char* name;
  Cfg cfg;
  std::vector<Req> reqs;
  std::vector<Step> steps;
  int64_t prefix_hit_tokens = -1;  // >= 0: expected at the end
};

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

std::string join(const std::vector<std::pair<int64_t, int64_t>>& v) {
  std::string s;
  for (auto [id, n] : v) s += (s.empty() ? "" : " ") + std::to_string(id) + ":" + std::to_string(n);
  return s;
}

std::vector<int32_t> prompt_of(int64_t id, const Req& r) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < r.prompt_len; ++i) p.push_back(int32_t(i < r.shared ? 500 + i : 1000 + id * 100 + i));
  return p;
}

// Simulated pool and sampler. tokens_of(id) gives the request's prompt + delivered tokens.
class FakeExecutor final : public StepExecutor {
 public:
  FakeExecutor(int32_t n_blocks, int32_t block_size, std::function<std::vector<int32_t>(int64_t)> tokens_of)
      : bs_(block_size), kv_(size_t(n_blocks) * block_size, {-1, -1}), tokens_of_(std::move(tokens_of)) {}

  void execute(StepPlan& plan, StepResult& result) override {
    if (fail) throw Error("rank 1 stopped answering");
    plan.step_id = step_++;
    for (const BlockCopy& c : plan.block_copies)
      for (int32_t i = 0; i < bs_; ++i) kv_[size_t(c.dst) * bs_ + i] = kv_[size_t(c.src) * bs_ + i];
    std::map<int64_t, int64_t> written;  // slot -> seq, this step
    for (const SeqPlan& sp : plan.seqs) {
      const std::vector<int32_t> all = tokens_of_(sp.seq_id);
      const int64_t end = sp.start_pos + int64_t(sp.tokens.size());
      EXPECT_LE(end, int64_t(all.size())) << "seq " << sp.seq_id;
      EXPECT_EQ(int64_t(sp.block_table.size()), (end + bs_ - 1) / bs_) << "seq " << sp.seq_id;
      EXPECT_EQ(sp.want_logits, end == int64_t(all.size())) << "seq " << sp.seq_id;
      for (size_t i = 0; i < sp.tokens.size(); ++i) {
        const int64_t pos = sp.start_pos + int64_t(i);
        EXPECT_EQ(sp.tokens[i], all[size_t(pos)]) << "seq " << sp.seq_id << " pos " << pos;
        const int64_t slot = int64_t(sp.block_table[size_t(pos / bs_)]) * bs_ + pos % bs_;
        EXPECT_TRUE(written.emplace(slot, sp.seq_id).second) << "slot " << slot << " written twice in a step";
        kv_[size_t(slot)] = {sp.tokens[i], pos};
      }
    }
    result = {};
    result.step_id = plan.step_id;
    for (const SeqPlan& sp : plan.seqs) {
      const std::vector<int32_t> all = tokens_of_(sp.seq_id);
      const int64_t end = sp.start_pos + int64_t(sp.tokens.size());
      for (int64_t pos = 0; pos < end; ++pos) {
        const int64_t slot = int64_t(sp.block_table[size_t(pos / bs_)]) * bs_ + pos % bs_;
        const std::pair<int32_t, int64_t> want{all[size_t(pos)], pos};
        EXPECT_EQ(kv_[size_t(slot)], want) << "seq " << sp.seq_id << " attends to a wrong K/V at pos " << pos;
      }
      if (!sp.want_logits) continue;
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(eos.count({sp.seq_id, end}) ? kEos : int32_t((sp.seq_id * 7 + end) % kVocab));
    }
  }
  void shutdown() override { shut_down = true; }

  std::set<std::pair<int64_t, int64_t>> eos;  // (seq, position of the sampled token)
  bool fail = false;
  bool shut_down = false;

 private:
  int32_t bs_;
  std::vector<std::pair<int32_t, int64_t>> kv_;  // [n_blocks * block_size]: (token, position) or (-1, -1)
  std::function<std::vector<int32_t>(int64_t)> tokens_of_;
  uint64_t step_ = 0;
};

// A harness: engine + fake + per-request record of deliveries.
struct Harness {
  struct Got {
    std::vector<int32_t> prompt, tokens;
    int n_finished = 0;
    FinishReason reason = FinishReason::None;
  };

  explicit Harness(const Cfg& c)
      : fake(c.n_blocks, c.block_size, [this](int64_t id) {
          std::vector<int32_t> all = got.at(id).prompt;
          all.insert(all.end(), got.at(id).tokens.begin(), got.at(id).tokens.end());
          return all;
        }),
        engine(config(c), fake) {}

  static EngineConfig config(const Cfg& c) {
    EngineConfig e;
    e.scheduler = {c.n_blocks, c.block_size, c.max_num_seqs, c.max_num_batched_tokens, c.max_context,
                   c.prefix_caching, c.reservation};
    e.is_eog = [](int32_t t) { return t == kEos; };
    return e;
  }

  int64_t submit(int64_t index, const Req& r) {
    Request q;
    q.prompt = prompt_of(index, r);
    q.max_tokens = r.max_tokens;
    q.sampling.temperature = 0;
    Got& g = got[index];
    g.prompt = q.prompt;
    q.on_output = [this](const RequestOutput& o) {
      Got& g = got.at(o.request_id);
      EXPECT_EQ(g.n_finished, 0) << "delivery after finish, request " << o.request_id;
      g.tokens.insert(g.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      EXPECT_EQ(o.n_generated, int64_t(g.tokens.size()));
      if (o.finished) {
        ++g.n_finished;
        g.reason = o.finish_reason;
      }
    };
    if (r.eos_at > 0) fake.eos.insert({index, r.prompt_len + r.eos_at - 1});
    const int64_t id = engine.submit(std::move(q));
    EXPECT_EQ(id, index);
    return id;
  }

  // Expected tokens of request `id` (not aborted) and its finish reason.
  static std::pair<std::vector<int32_t>, FinishReason> expected(int64_t id, const Req& r) {
    std::vector<int32_t> t;
    for (int64_t k = 1; k <= r.max_tokens; ++k) {
      if (k == r.eos_at) {
        t.push_back(kEos);
        return {t, FinishReason::Stop};
      }
      t.push_back(int32_t((id * 7 + r.prompt_len + k - 1) % kVocab));
    }
    return {t, FinishReason::Length};
  }

  std::map<int64_t, Got> got;
  FakeExecutor fake;
  Engine engine;
};

void check_final(Harness& h, const std::vector<Req>& reqs) {
  const BlockManager& bm = h.engine.scheduler().block_manager();
  bm.check_invariants();
  EXPECT_EQ(bm.n_in_use(), 0);
  EXPECT_EQ(bm.n_seqs(), 0);
  EXPECT_TRUE(h.engine.scheduler().idle());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Harness::Got& g = h.got.at(int64_t(i));
    EXPECT_EQ(g.n_finished, 1) << "request " << i;
    auto [want, reason] = Harness::expected(int64_t(i), reqs[i]);
    if (g.reason == FinishReason::Abort) {
      EXPECT_GE(reqs[i].abort_at, 0) << "request " << i;
      want.resize(std::min(want.size(), g.tokens.size()));
      reason = FinishReason::Abort;
    }
    EXPECT_EQ(g.tokens, want) << "request " << i;
    EXPECT_EQ(g.reason, reason) << "request " << i;
  }
}

class SchedulerTable : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerTable, PerIteration) {
  const Case& c = GetParam();
  Harness h(c.cfg);
  const int64_t kMaxSteps = 1000;
  for (int64_t step = 0; step < kMaxSteps; ++step) {
    for (size_t i = 0; i < c.reqs.size(); ++i) {
      if (c.reqs[i].arrive == step) h.submit(int64_t(i), c.reqs[i]);
      if (c.reqs[i].abort_at == step) h.engine.abort(int64_t(i));
    }
    bool pending = false;
    for (const Req& r : c.reqs) pending |= r.arrive > step || r.abort_at > step;
    if (!h.engine.has_work() && !pending && step >= int64_t(c.steps.size())) break;
    h.engine.step();
    h.engine.scheduler().block_manager().check_invariants();
    if (step < int64_t(c.steps.size())) {
      const Step& want = c.steps[size_t(step)];
      const StepRecord& rec = h.engine.last_step();
      SCOPED_TRACE("step " + std::to_string(step));
      EXPECT_EQ(join(rec.scheduled), want.scheduled);
      EXPECT_EQ(join(h.engine.scheduler().running_ids()), want.running);
      EXPECT_EQ(join(h.engine.scheduler().waiting_ids()), want.waiting);
      EXPECT_EQ(join(rec.preempted), want.preempted);
    }
  }
  check_final(h, c.reqs);
  const EngineMetrics m = h.engine.metrics();
  if (c.prefix_hit_tokens >= 0) {
    EXPECT_EQ(m.prefix_hit_tokens, c.prefix_hit_tokens);
  }
  EXPECT_EQ(m.n_running, 0);
  EXPECT_EQ(m.n_waiting, 0);
  EXPECT_EQ(m.n_blocks_in_use, 0);
  EXPECT_EQ(m.n_finished, int64_t(c.reqs.size()));
}

Cfg cfg(int32_t n_blocks, int64_t max_seqs, int64_t budget, KvReservation res = KvReservation::Paged,
        int64_t max_context = 64) {
  Cfg c;
  c.n_blocks = n_blocks;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.reservation = res;
  c.max_context = max_context;
  return c;
}

// Block size 4 everywhere. Hand-derived expectations; the comments give the reasoning.
const Case kCases[] = {
    {"fcfs_and_max_num_seqs",  // 2 seats: request 2 waits for one; admission precedes postprocess
     cfg(64, 2, 100),
     {{0, 5, 3}, {0, 3, 2}, {0, 4, 2}},
     {{"0:5 1:3", "0 1", "2"},
      {"0:1 1:1", "0", "2"},
      {"0:1 2:4", "2", ""},
      {"2:1", "", ""}}},
    {"chunked_prefill_mixed_with_decodes",  // budget 8: decode first, then the 20-token prompt in 7, 7, 6
     cfg(64, 8, 8),
     {{0, 3, 4}, {1, 20, 2}},
     {{"0:3", "0", ""},
      {"0:1 1:7", "0 1", ""},
      {"0:1 1:7", "0 1", ""},
      {"0:1 1:6", "1", ""},
      {"1:1", "", ""}}},
    {"token_budget_limits_admission",  // budget 10: the second prompt gets 4, the third waits a step
     cfg(64, 8, 10),
     {{0, 6, 2}, {0, 6, 2}, {0, 6, 2}},
     {{"0:6 1:4", "0 1", "2"},
      {"0:1 1:2 2:6", "1 2", ""},
      {"1:1 2:1", "", ""}}},
    {"budget_smaller_than_decodes",  // budget 2 with 3 one-token prompts: one must wait
     cfg(64, 4, 2),
     {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}},
     {{"0:1 1:1", "0 1", "2"},
      {"0:1 1:1", "", "2"},
      {"2:1", "2", ""},
      {"2:1", "", ""}}},
    {"admission_blocked_by_blocks",  // 5 blocks: 0 holds 3 (+1 growth), 1 needs 3: FCFS blocks 2 behind it
     cfg(5, 8, 100),
     {{0, 12, 4}, {0, 12, 1}, {0, 4, 1}},
     {{"0:12", "0", "1 2"},
      {"0:1", "0", "1 2"},
      {"0:1", "0", "1 2"},
      {"0:1", "", "1 2"},
      {"1:12 2:4", "", ""}}},
    {"preemption_requeue_front_recompute",
     // 4 blocks, two 7-token prompts fill them. Step 2: 0 needs a third block, 1 (admitted last) is
     // preempted to the front of the queue, ahead of 2. Step 3: 1's block 0 is still cached but the rest
     // do not fit. Step 4: 1 recomputes its 7 + 2 tokens minus the 4-token hit; 2 fits alongside.
     cfg(4, 8, 100),
     {{0, 7, 4}, {0, 7, 4}, {1, 3, 1}},
     {{"0:7 1:7", "0 1", ""},
      {"0:1 1:1", "0 1", "2"},
      {"0:1", "0", "1 2", "1"},
      {"0:1", "", "1 2"},
      {"1:5 2:3", "1", ""},
      {"1:1", "", ""}},
     4},
    {"abort_waiting_and_running",  // one seat; 1 is aborted while waiting, 0 while running
     cfg(64, 1, 100),
     {{0, 4, 10, 0, 2}, {0, 4, 10, 0, 1}, {0, 4, 2}},
     {{"0:4", "0", "1 2"},
      {"0:1", "0", "2"},
      {"2:4", "2", ""},
      {"2:1", "", ""}}},
    {"prefix_hits_skip_cached_tokens",  // 8 shared tokens = 2 blocks; a hit never covers a whole prompt
     cfg(64, 8, 100),
     {{0, 10, 2, 0, -1, 8}, {2, 11, 1, 0, -1, 8}, {2, 8, 1, 0, -1, 8}},
     {{"0:10", "0", ""},
      {"0:1", "", ""},
      {"1:3 2:4", "", ""}},
     12},
    {"waiting_prefix_held_under_pressure",
     // 6 blocks, one seat. 0 caches the shared 8 tokens (2 blocks), 1 caches 2 blocks of its own after it, so
     // plain LRU would evict 0's blocks first. 3 waits behind 2 for the seat and holds the shared blocks (its
     // hold is refreshed at step 1, once 0 has cached them). 2's decode grows to 4 blocks: 1 free, then 2
     // evictions, which take 1's blocks, not the held ones. Step 12: 3 hits 8 tokens and computes 2.
     cfg(6, 1, 100),
     {{0, 9, 1, 0, -1, 8}, {0, 9, 1}, {0, 4, 10}, {0, 10, 1, 0, -1, 8}},
     {{"0:9", "", "1 2 3"},
      {"1:9", "", "2 3"},
      {"2:4", "2", "3"},
      {"2:1", "2", "3"}, {"2:1", "2", "3"}, {"2:1", "2", "3"}, {"2:1", "2", "3"},
      {"2:1", "2", "3"}, {"2:1", "2", "3"}, {"2:1", "2", "3"}, {"2:1", "2", "3"},
      {"2:1", "", "3"},
      {"3:2", "", ""}},
     8},
    {"static_reservation_admits_fewer",  // max_context 16 = 4 blocks each: 8 blocks seat only 2
     cfg(8, 8, 100, KvReservation::Static, 16),
     {{0, 4, 2}, {0, 4, 2}, {0, 4, 2}, {0, 4, 2}},
     {{"0:4 1:4", "0 1", "2 3"},
      {"0:1 1:1", "", "2 3"},
      {"2:4 3:4", "2 3", ""},
      {"2:1 3:1", "", ""}}},
    {"paged_same_load_admits_all",  // the row above, paged: all 4 run at once
     cfg(8, 8, 100, KvReservation::Paged, 16),
     {{0, 4, 2}, {0, 4, 2}, {0, 4, 2}, {0, 4, 2}},
     {{"0:4 1:4 2:4 3:4", "0 1 2 3", ""},
      {"0:1 1:1 2:1 3:1", "", ""}}},
    {"eos_stops_early",  // the 2nd token is EOS: finished "stop", delivered
     cfg(64, 8, 100),
     {{0, 4, 10, 2}, {0, 4, 3}},
     {{"0:4 1:4", "0 1", ""},
      {"0:1 1:1", "1", ""},
      {"1:1", "", ""}}},
};

INSTANTIATE_TEST_SUITE_P(Rows, SchedulerTable, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Random arrivals, lengths, EOS and aborts on a small pool: invariants after every step, exact outputs.
TEST(SchedulerRandom, InvariantsAndOutputsUnderPressure) {
  int64_t n_preemptions = 0, n_aborted = 0, n_hit_tokens = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    Cfg c = cfg(int32_t(uni(6, 20)), uni(1, 6), uni(1, 24), uni(0, 4) == 0 ? KvReservation::Static : KvReservation::Paged,
                24);
    c.prefix_caching = uni(0, 3) != 0;
    std::vector<Req> reqs;
    for (int i = 0; i < 30; ++i) {
      Req r;
      r.arrive = uni(0, 40);
      r.prompt_len = uni(1, 14);
      r.max_tokens = uni(1, 24 - r.prompt_len);
      if (c.reservation == KvReservation::Paged && (r.prompt_len + r.max_tokens - 1 + 3) / 4 > c.n_blocks)
        r.max_tokens = 1;
      r.eos_at = uni(0, 3) == 0 ? uni(1, r.max_tokens) : 0;
      r.abort_at = uni(0, 5) == 0 ? r.arrive + uni(0, 10) : -1;
      r.shared = uni(0, 1) ? std::min<int64_t>(r.prompt_len, 8) : 0;
      reqs.push_back(r);
    }
    // Ids follow submit order: index order must be arrival order.
    std::stable_sort(reqs.begin(), reqs.end(), [](const Req& a, const Req& b) { return a.arrive < b.arrive; });
    SCOPED_TRACE("seed " + std::to_string(seed));
    Harness h(c);
    int64_t step = 0;
    for (; step < 5000; ++step) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i].arrive == step) h.submit(int64_t(i), reqs[i]);
        if (reqs[i].abort_at == step) h.engine.abort(int64_t(i));
      }
      if (step > 60 && !h.engine.has_work()) break;
      h.engine.step();
      h.engine.scheduler().block_manager().check_invariants();
      ASSERT_LE(h.engine.scheduler().n_running(), c.max_num_seqs);
    }
    ASSERT_LT(step, 5000);
    check_final(h, reqs);
    n_preemptions += h.engine.metrics().n_preemptions;
    n_aborted += h.engine.metrics().n_aborted;
    n_hit_tokens += h.engine.metrics().prefix_hit_tokens;
  }
  // The pressure is real: every mechanism was exercised.
  EXPECT_GT(n_preemptions, 0);
  EXPECT_GT(n_aborted, 0);
  EXPECT_GT(n_hit_tokens, 0);
  std::printf("random: %lld preemptions, %lld aborts, %lld prefix-hit tokens over 20 seeds\n",
              (long long)n_preemptions, (long long)n_aborted, (long long)n_hit_tokens);
}

}  // namespace
}  // namespace tp
