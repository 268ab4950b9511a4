// InFlightRequests::fail_all: every choice of every tracked request gets a finished Error output straight in its
// queue, without the engine stepping (the leader's answer to a rank that died while the engine thread waits in
// a collective); requests whose handle is gone get nothing; abort_all still goes through the engine.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <utility>

#include "coordinator/engine.h"
#include "coordinator/request_handle.h"

namespace tp {
namespace {

// Never asked to run: the tests do not step the engine (a stuck engine thread).
class NeverExecutor final : public StepExecutor {
 public:
  void execute(StepPlan&, StepResult&) override { FAIL() << "the engine must not step here"; }
  void shutdown() override {}
};

EngineConfig small_config() {
  EngineConfig e;
  e.scheduler.n_blocks = 16;
  e.scheduler.block_size = 4;
  e.scheduler.max_context = 32;
  e.scheduler.max_num_seqs = 4;
  e.scheduler.max_num_batched_tokens = 16;
  e.vocab = 100;
  return e;
}

Request req(int32_t n) {
  Request r;
  r.prompt = {60, 61, 62};
  r.max_tokens = 4;
  r.n = n;
  r.sampling.temperature = 0;
  return r;
}

TEST(InFlightRequests, FailAllEndsEveryChoiceWithTheErrorWithoutTheEngine) {
  NeverExecutor ex;
  Engine engine(small_config(), ex);
  InFlightRequests in_flight;
  auto q1 = std::make_shared<OutputQueue>(), q2 = std::make_shared<OutputQueue>();
  auto h1 = std::make_unique<RequestHandle>(engine, in_flight, req(1), q1);
  auto h2 = std::make_unique<RequestHandle>(engine, in_flight, req(2), q2);
  ASSERT_EQ(in_flight.size(), 2);

  in_flight.fail_all("rank 1 (pid 42) is gone");
  const auto drain = [](OutputQueue& q) {
    std::vector<RequestOutput> v;
    while (auto o = q.try_pop()) v.push_back(*o);
    return v;
  };
  const std::vector<RequestOutput> o1 = drain(*q1), o2 = drain(*q2);
  ASSERT_EQ(o1.size(), 1u);
  EXPECT_EQ(o1[0].request_id, h1->id());
  EXPECT_TRUE(o1[0].finished);
  EXPECT_EQ(o1[0].finish_reason, FinishReason::Error);
  EXPECT_EQ(o1[0].error, "rank 1 (pid 42) is gone");
  ASSERT_EQ(o2.size(), 2u);  // one per choice
  std::set<int32_t> indices;
  for (const RequestOutput& o : o2) {
    EXPECT_EQ(o.request_id, h2->id());
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.finish_reason, FinishReason::Error);
    indices.insert(o.index);
  }
  EXPECT_EQ(indices, (std::set<int32_t>{0, 1}));

  // A handle gone (its handler returned) is no longer tracked: nothing more for it.
  h1.reset();
  EXPECT_EQ(in_flight.size(), 1);
  in_flight.fail_all("again");
  EXPECT_TRUE(drain(*q1).empty());
  EXPECT_EQ(drain(*q2).size(), 2u);
  h2.reset();
  EXPECT_EQ(in_flight.size(), 0);
}

}  // namespace
}  // namespace tp
