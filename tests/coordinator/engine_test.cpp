// Engine API tests with a fake executor: request validation (clear InputErrors, nothing queued), queue
// limit, submit/abort from other threads while the engine thread steps, executor failure (every request
// finished with an error, blocks freed), metrics formulas, per-request times, and the start-up report.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/engine.h"

namespace tp {
namespace {

// Token at position p of sequence s: (s + p) % 50; fails on demand.
class SimpleExecutor final : public StepExecutor {
 public:
  void execute(StepPlan& plan, StepResult& result) override {
    if (fail) throw Error("rank 1 timed out after 30 s");
    result = {};
    for (const SeqPlan& sp : plan.seqs) {
      n_tokens += int64_t(sp.tokens.size());
      if (!sp.want_logits) continue;
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(int32_t((sp.seq_id + sp.start_pos + int64_t(sp.tokens.size())) % 50));
    }
  }
  void shutdown() override { shut_down = true; }
  bool fail = false;
  bool shut_down = false;
  int64_t n_tokens = 0;
};

EngineConfig small_config() {
  EngineConfig e;
  e.scheduler.n_blocks = 16;
  e.scheduler.block_size = 4;
  e.scheduler.max_context = 32;
  e.scheduler.max_num_seqs = 4;
  e.scheduler.max_num_batched_tokens = 16;
  e.max_queued_requests = 3;
  e.vocab = 100;
  return e;
}

Request req(int64_t n_prompt, int64_t max_tokens, OutputCallback cb = {}) {
  Request r;
  for (int64_t i = 0; i < n_prompt; ++i) r.prompt.push_back(int32_t(60 + i % 30));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.on_output = std::move(cb);
  return r;
}

// A FieldError naming `field` (the request parameter at fault) with `needle` in its message.
void expect_input_error(Engine& e, Request r, const std::string& needle, const std::string& field = "") {
  try {
    e.submit(std::move(r));
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const FieldError& err) {
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    if (!field.empty()) {
      EXPECT_EQ(err.field, field) << err.what();
    }
  }
}

TEST(Engine, RejectsBadRequestsWithClearMessages) {
  SimpleExecutor ex;
  Engine e(small_config(), ex);
  expect_input_error(e, req(0, 4), "prompt is empty", "prompt");
  Request bad_token = req(3, 2);
  bad_token.prompt[1] = 100;
  expect_input_error(e, bad_token, "prompt[1] is token id 100, outside the vocabulary [0, 100)", "prompt[1]");
  expect_input_error(e, req(3, -1), "max_tokens must be >= 0", "max_tokens");
  expect_input_error(e, req(30, 3), "exceeds the max context of 32", "max_tokens");
  Request hot = req(3, 2);
  hot.sampling.top_p = 0;
  expect_input_error(e, hot, "top_p must be in (0, 1], got 0", "top_p");
  Request bias = req(3, 2);
  bias.logit_bias = {{5, 1.0f}, {100, -1.0f}};
  expect_input_error(e, bias, "logit_bias[1] is token id 100", "logit_bias[1]");
  bias.logit_bias = {{5, 101.0f}};
  expect_input_error(e, bias, "logit_bias must be between -100 and 100, got 101", "logit_bias");
  Request plp = req(3, 2);
  plp.prompt_logprobs = 21;
  expect_input_error(e, plp, "prompt_logprobs", "prompt_logprobs");
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.metrics().n_submitted, 0);

  // A pool of 4 blocks x 4 tokens = 16 positions: 10 + 8 - 1 = 17 positions can never fit.
  EngineConfig tiny = small_config();
  tiny.scheduler.n_blocks = 4;
  Engine t(tiny, ex);
  expect_input_error(t, req(10, 8), "needs 5 KV blocks of 4 tokens, but the whole pool has 4");
  EXPECT_NO_THROW(t.submit(req(10, 7)));  // exactly 16 positions
  t.run_until_idle();
  EXPECT_EQ(t.scheduler().block_manager().n_in_use(), 0);

  // Static reservation: the pool must hold one max-context reservation.
  EngineConfig st = small_config();
  st.scheduler.reservation = KvReservation::Static;
  st.scheduler.n_blocks = 7;
  EXPECT_THROW(Engine(st, ex), InputError);
}

TEST(Engine, QueueLimitThrowsQueueFull) {
  SimpleExecutor ex;
  Engine e(small_config(), ex);
  for (int i = 0; i < 3; ++i) e.submit(req(4, 2));
  EXPECT_THROW(e.submit(req(4, 2)), QueueFullError);
  e.step();  // all three start running: the queue has room again
  EXPECT_NO_THROW(e.submit(req(4, 2)));
  e.run_until_idle();
  EXPECT_EQ(e.metrics().n_finished, 4);
}

TEST(Engine, MetricsTimesAndOutputs) {
  SimpleExecutor ex;
  EngineConfig cfg = small_config();
  cfg.is_eog = [](int32_t t) { return t == 49; };
  Engine e(cfg, ex);
  OutputQueue q;
  Request a = req(8, 5, q.sink());
  Request b = req(8, 3, q.sink());  // same prompt, admitted with a: no hit (a's blocks are committed
  b.eos_ids = {7};                  // after the step)
  const int64_t ia = e.submit(std::move(a));
  const int64_t ib = e.submit(std::move(b));
  e.run_until_idle();
  std::map<int64_t, std::vector<int32_t>> toks;
  std::map<int64_t, RequestOutput> last;
  while (auto o = q.try_pop()) {
    toks[o->request_id].insert(toks[o->request_id].end(), o->new_tokens.begin(), o->new_tokens.end());
    last[o->request_id] = *o;
  }
  // a: tokens (0 + p) % 50 at p = 8..12.
  EXPECT_EQ(toks[ia], (std::vector<int32_t>{8, 9, 10, 11, 12}));
  EXPECT_EQ(last[ia].finish_reason, FinishReason::Length);
  EXPECT_EQ(finish_reason_name(last[ia].finish_reason), "length");
  // b: (1 + p) % 50 = 9, 10, 11 — no 7 and no 49: length.
  EXPECT_EQ(toks[ib], (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(last[ib].finish_reason, FinishReason::Length);
  const RequestTimes& t = last[ia].times;
  EXPECT_NE(t.scheduled, SteadyTime{});  // first admission: queue = scheduled - arrival, prefill = first - scheduled
  EXPECT_LE(t.arrival, t.scheduled);
  EXPECT_LE(t.scheduled, t.first_token);
  EXPECT_LE(t.first_token, t.last_token);
  EXPECT_EQ(last[ia].n_generated, 5);

  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.n_generation_tokens, 8);
  EXPECT_EQ(m.n_prompt_tokens, 16);
  EXPECT_EQ(m.prefix_query_tokens, 16);
  EXPECT_EQ(m.n_computed_tokens, ex.n_tokens);
  EXPECT_EQ(m.prefix_hit_tokens, 0);
  EXPECT_EQ(m.n_computed_tokens, 16 + 8 - 2);  // the last token of each is never run
  EXPECT_EQ(m.n_finished, 2);
  EXPECT_EQ(m.n_blocks, 16);
  EXPECT_EQ(m.kv_usage, 0.0);

  // EOS via a per-request id, delivered as the last token with "stop".
  OutputQueue q2;
  Request c = req(3, 10, q2.sink());
  c.eos_ids = {int32_t((2 + 4) % 50)};  // id 2, second token at position 4
  EXPECT_EQ(e.submit(std::move(c)), 2);
  e.run_until_idle();
  std::vector<int32_t> got;
  FinishReason why = FinishReason::None;
  while (auto o = q2.try_pop()) {
    got.insert(got.end(), o->new_tokens.begin(), o->new_tokens.end());
    if (o->finished) why = o->finish_reason;
  }
  EXPECT_EQ(got, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(why, FinishReason::Stop);
}

TEST(Engine, SubmitAndAbortFromOtherThreads) {
  SimpleExecutor ex;
  EngineConfig cfg = small_config();
  cfg.max_queued_requests = 1000;
  Engine e(cfg, ex);
  std::mutex mu;
  std::map<int64_t, int> n_finished;
  std::map<int64_t, FinishReason> reason;
  auto cb = [&](const RequestOutput& o) {
    if (!o.finished) return;
    std::lock_guard<std::mutex> lock(mu);
    ++n_finished[o.request_id];
    reason[o.request_id] = o.finish_reason;
  };
  std::atomic<bool> done{false};
  std::thread engine_thread([&] {
    while (!done.load() || e.has_work())
      if (!e.step()) e.wait_for_work(std::chrono::milliseconds(5));
  });
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 25; ++i) {
        const int64_t id = e.submit(req(1 + (i + c) % 9, 1 + i % 12, cb));
        if (i % 4 == 0) e.abort(id);
      }
    });
  for (auto& t : clients) t.join();
  done = true;
  engine_thread.join();
  EXPECT_EQ(n_finished.size(), 100u);
  int n_aborted = 0;
  for (auto [id, n] : n_finished) {
    EXPECT_EQ(n, 1) << id;
    n_aborted += reason[id] == FinishReason::Abort;
  }
  EXPECT_EQ(e.metrics().n_aborted, n_aborted);
  EXPECT_GT(n_aborted, 0);
  e.scheduler().block_manager().check_invariants();
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(Engine, ExecutorFailureFinishesEveryRequestWithError) {
  SimpleExecutor ex;
  Engine e(small_config(), ex);
  std::map<int64_t, RequestOutput> last;
  auto cb = [&](const RequestOutput& o) { last[o.request_id] = o; };
  for (int i = 0; i < 3; ++i) e.submit(req(12, 4, cb));  // 2 run (budget 16), 1 waits
  e.step();
  ex.fail = true;
  EXPECT_THROW(e.step(), Error);
  ASSERT_EQ(last.size(), 3u);
  for (auto& [id, o] : last) {
    EXPECT_TRUE(o.finished) << id;
    EXPECT_EQ(o.finish_reason, FinishReason::Error) << id;
    EXPECT_NE(o.error.find("rank 1 timed out"), std::string::npos) << o.error;
  }
  EXPECT_FALSE(e.has_work());
  e.scheduler().block_manager().check_invariants();
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(Engine, ShutdownAbortsAndStopsExecutor) {
  SimpleExecutor ex;
  Engine e(small_config(), ex);
  int n_aborted = 0;
  e.submit(req(4, 10, [&](const RequestOutput& o) { n_aborted += o.finish_reason == FinishReason::Abort; }));
  e.step();
  e.shutdown();
  EXPECT_EQ(n_aborted, 1);
  EXPECT_TRUE(ex.shut_down);
  EXPECT_EQ(e.scheduler().block_manager().n_in_use(), 0);
}

TEST(Engine, StartupReportUsesCapacityReport) {
  SimpleExecutor ex;
  Config cfg;
  cfg.cache.memory_mb = 512;
  cfg.cache.block_size = 16;
  cfg.cache.max_context = 8192;
  ModelShape shape;
  shape.n_layers = 30;
  shape.n_kv_heads = 3;
  shape.head_dim = 64;
  const KvFootprint fp = kv_footprint(shape, 3, 4);
  const EngineConfig ec = make_engine_config(cfg, fp, 2048, 49152);
  EXPECT_EQ(ec.scheduler.n_blocks, 728);  // 512 MiB / (16 x 46080 B), as capacity.h's example
  EXPECT_EQ(ec.scheduler.max_context, 8192);
  Engine e(ec, ex);
  const std::string r = e.startup_report();
  EXPECT_EQ(r.find(capacity_report(fp, 512 * kMiB, 16, 8192)), 0u) << r;
  EXPECT_NE(r.find("46080 B/token"), std::string::npos) << r;
  EXPECT_NE(r.find("728 blocks = 11648 tokens"), std::string::npos) << r;
  EXPECT_NE(r.find("max concurrency: 1 at the max context of 8192 tokens, 5 at 2048, 1 at 8192"), std::string::npos)
      << r;
  EXPECT_NE(r.find("paged KV"), std::string::npos) << r;

  EngineConfig st = ec;
  st.scheduler.reservation = KvReservation::Static;
  Engine s(st, ex);
  EXPECT_NE(s.startup_report().find("static reservation of 8192 tokens per request: at most 1 running"),
            std::string::npos)
      << s.startup_report();
}

// An executor whose step runs `n_layers` x `layer` and reports progress after each layer unless `stuck`.
class SlowExecutor final : public StepExecutor {
 public:
  void execute(StepPlan& plan, StepResult& result) override {
    for (int i = 0; i < n_layers; ++i) {
      std::this_thread::sleep_for(layer);
      if (!stuck) progress.store(std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1));
    }
    result = {};
    for (const SeqPlan& sp : plan.seqs)
      if (sp.want_logits) {
        result.seq_ids.push_back(sp.seq_id);
        result.tokens.push_back(1);
      }
  }
  void shutdown() override {}
  int64_t progress_ns() const override { return progress.load(); }
  int n_layers = 12;
  std::chrono::milliseconds layer{40};
  bool stuck = false;
  std::atomic<int64_t> progress{0};
};

// The watchdog's view: a long step that keeps finishing layers is never "stalled" longer than one layer; a
// step that stops reporting progress stalls for as long as it runs.
TEST(Engine, StepStalledForFollowsProgressNotWallTime) {
  for (const bool stuck : {false, true}) {
    SlowExecutor ex;
    ex.stuck = stuck;
    Engine e(small_config(), ex);
    e.submit(req(3, 1));
    std::atomic<bool> done{false};
    double max_running = 0, max_stalled = 0;
    std::thread watch([&] {
      while (!done.load()) {
        max_running = std::max(max_running, std::chrono::duration<double>(e.step_running_for()).count());
        max_stalled = std::max(max_stalled, std::chrono::duration<double>(e.step_stalled_for()).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    e.run_until_idle();
    done.store(true);
    watch.join();
    EXPECT_GT(max_running, 0.35) << stuck;  // the step ran 12 x 40 ms
    if (stuck)
      EXPECT_GT(max_stalled, 0.35);  // no progress: stalled for the whole step
    else
      EXPECT_LT(max_stalled, 0.2);  // one layer (40 ms) at a time, with scheduling slack
    EXPECT_EQ(std::chrono::duration<double>(e.step_stalled_for()).count(), 0.0);  // no step running
  }
}

}  // namespace
}  // namespace tp
