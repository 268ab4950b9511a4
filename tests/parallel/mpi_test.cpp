// Communicator and broadcast_plan under real MPI. Run with mpirun -np 2 and -np 4 (ctest parallel_mpi_*).
// Every rank runs every test in the same order (tests are collective). Only rank 0 prints progress; a failed
// assertion on any rank prints "[rank r] file:line: message" and calls MPI_Abort, so a failure anywhere fails
// the job and never leaves the other ranks hanging in a collective.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include "common/dtype.h"
#include "common/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_setup.h"
#include "parallel/step_plan.h"

namespace tp {
namespace {

MpiSession* g_session = nullptr;

TEST(MpiSession, RecordsThreadLevel) {
  ASSERT_NE(g_session, nullptr);
  EXPECT_TRUE(g_session->owns_mpi());
  EXPECT_GE(g_session->provided(), MPI_THREAD_SINGLE);
  EXPECT_LE(g_session->provided(), MPI_THREAD_MULTIPLE);
  int level = -1;
  MPI_Query_thread(&level);
  EXPECT_EQ(level, g_session->provided());
  MpiSession nested;  // MPI already initialized: records, neither inits nor finalizes
  EXPECT_FALSE(nested.owns_mpi());
  EXPECT_EQ(nested.provided(), g_session->provided());
}

TEST(MpiCommunicator, WorldShape) {
  MpiCommunicator w = MpiCommunicator::world();
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  EXPECT_EQ(w.rank(), wr);
  EXPECT_EQ(w.size(), ws);
  EXPECT_NE(w.handle(), MPI_COMM_WORLD);  // a private duplicate
  int result = 0;
  MPI_Comm_compare(w.handle(), MPI_COMM_WORLD, &result);
  EXPECT_EQ(result, MPI_CONGRUENT);
}

TEST(MpiCommunicator, AllReduceSumF32) {
  MpiCommunicator w = MpiCommunicator::world();
  const int n = w.size();
  for (size_t count : {size_t(0), size_t(1), size_t(576), size_t(100003)}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = float(w.rank()) + 0.5f * float(i % 1000);
    w.all_reduce_sum(v.data(), v.size());
    const float rank_sum = float(n * (n - 1) / 2);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], rank_sum + float(n) * 0.5f * float(i % 1000)) << i;
  }
}

TEST(MpiCommunicator, AllReduceSumBf16SumsInF32) {
  MpiCommunicator w = MpiCommunicator::world();
  const int n = w.size();
  // Small integers: exact in bf16.
  std::vector<uint16_t> v(300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = f32_to_bf16(float(i % 50) - float(w.rank()));
  w.all_reduce_sum_bf16(v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(bf16_to_f32(v[i]), float(n) * float(i % 50) - float(n * (n - 1) / 2)) << i;
  // One rounding of the f32 sum: rank 0 adds 1, every other rank 2^-8 (half a bf16 ulp at 1). Rounding after
  // each pairwise add would keep 1.0 (ties to even); the f32 sum 1 + (n-1)/256 rounds once.
  uint16_t x = f32_to_bf16(w.rank() == 0 ? 1.0f : 1.0f / 256);
  w.all_reduce_sum_bf16(&x, 1);
  EXPECT_EQ(x, f32_to_bf16(1.0f + float(n - 1) / 256)) << "n=" << n;
  if (n == 4) {
    EXPECT_EQ(bf16_to_f32(x), 1.015625f);
  }
}

TEST(MpiCommunicator, AllGather) {
  MpiCommunicator w = MpiCommunicator::world();
  const int n = w.size();
  const int32_t mine[3] = {w.rank(), w.rank() * 10, -w.rank()};
  std::vector<int32_t> all(size_t(3 * n), -99);
  w.all_gather(mine, sizeof(mine), all.data());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[size_t(3 * r)], r);
    EXPECT_EQ(all[size_t(3 * r + 1)], r * 10);
    EXPECT_EQ(all[size_t(3 * r + 2)], -r);
  }
  // One byte each, and zero bytes.
  const uint8_t b = uint8_t(0xa0 + w.rank());
  std::vector<uint8_t> bs(static_cast<size_t>(n));
  w.all_gather(&b, 1, bs.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(bs[size_t(r)], 0xa0 + r);
  w.all_gather(nullptr, 0, nullptr);
  // Overlapping buffers are refused locally, before communicating (same on every rank).
  EXPECT_THROW(w.all_gather(all.data(), 4, all.data()), Error);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator w = MpiCommunicator::world();
  for (int root = 0; root < w.size(); ++root) {
    std::vector<uint8_t> buf(1000, uint8_t(w.rank() == root ? 0 : 0xee));
    if (w.rank() == root)
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 7 + size_t(root));
    w.broadcast(buf.data(), buf.size(), root);
    for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], uint8_t(i * 7 + size_t(root))) << i;
  }
  w.broadcast(nullptr, 0, 0);
  int x = 0;
  try {
    w.broadcast(&x, sizeof(x), w.size());
    ADD_FAILURE() << "root out of range accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(w.rank())), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, BarrierWaitsForTheSlowestRank) {
  MpiCommunicator w = MpiCommunicator::world();
  w.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  if (w.rank() == w.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  w.barrier();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 250.0) << "rank " << w.rank() << " left the barrier early";
}

TEST(MpiCommunicator, MovesAndMovedFromThrows) {
  MpiCommunicator a = MpiCommunicator::world();
  const MPI_Comm h = a.handle();
  MpiCommunicator b(std::move(a));
  EXPECT_EQ(b.handle(), h);
  EXPECT_EQ(a.handle(), MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  float f = 1;
  EXPECT_THROW(a.all_reduce_sum(&f, 1), Error);
  EXPECT_THROW(a.barrier(), Error);
  MpiCommunicator c = MpiCommunicator::world();
  c = std::move(b);  // frees c's own communicator
  EXPECT_EQ(c.handle(), h);
  c.all_reduce_sum(&f, 1);
  EXPECT_EQ(f, float(c.size()));
}

TEST(MpiCommunicator, SplitTpGroups) {
  MpiCommunicator w = MpiCommunicator::world();
  const int n = w.size();
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp != 0) {
      EXPECT_THROW(w.split_tp_group(tp), Error);  // refused on every rank before communicating
      continue;
    }
    MpiCommunicator g = w.split_tp_group(tp);
    const int d = w.rank() / tp;
    EXPECT_EQ(g.size(), tp);
    EXPECT_EQ(g.rank(), w.rank() % tp);
    // A reduction stays inside the replica: sum of world ranks [d * tp, (d + 1) * tp).
    float v = float(w.rank());
    g.all_reduce_sum(&v, 1);
    EXPECT_EQ(v, float(tp * d * tp + tp * (tp - 1) / 2)) << "tp=" << tp;
    // A broadcast from TP rank 0 delivers that replica's leader.
    int leader = w.rank();
    g.broadcast(&leader, sizeof(leader), 0);
    EXPECT_EQ(leader, d * tp);
  }
  EXPECT_THROW(w.split_tp_group(0), Error);
  // A custom split: odd and even ranks, reversed order.
  MpiCommunicator parity = w.split(w.rank() % 2, -w.rank());
  EXPECT_EQ(parity.size(), (n + 1 - w.rank() % 2) / 2);
  std::vector<int32_t> members(size_t(parity.size()));
  const int32_t me = w.rank();
  parity.all_gather(&me, sizeof(me), members.data());
  for (size_t i = 1; i < members.size(); ++i) EXPECT_GT(members[i - 1], members[i]);
  EXPECT_THROW(w.split(-1, 0), Error);
}

StepPlan plan_for(int root) {
  StepPlan p;
  p.step_id = 1000 + uint64_t(root);
  for (int i = 0; i < 3 + root; ++i) {
    SeqPlan s;
    s.seq_id = i * 11;
    s.tokens.assign(size_t(i + 1), 5 + i);
    s.start_pos = i * 16;
    s.block_table = {i, i + 100};
    s.want_logits = i % 2 == 0;
    s.sampling.temperature = 0.1f * float(i);
    s.sampling.seed = uint64_t(root) << 32;
    p.seqs.push_back(s);
  }
  p.block_copies = {{1, 2}, {3, 4 + root}};
  return p;
}

TEST(BroadcastPlan, EveryRankReceivesTheRootsPlan) {
  MpiCommunicator w = MpiCommunicator::world();
  for (int root = 0; root < w.size(); ++root) {
    StepPlan p;
    if (w.rank() == root) {
      p = plan_for(root);
    } else {  // stale contents must be replaced
      p.step_id = 1;
      p.seqs.resize(9);
    }
    broadcast_plan(w, p, root);
    EXPECT_EQ(p, plan_for(root)) << "root " << root;
  }
  StepPlan stop;
  if (w.rank() == 0) stop.kind = StepKind::Shutdown;
  broadcast_plan(w, stop, 0);
  EXPECT_EQ(stop.kind, StepKind::Shutdown);
  EXPECT_TRUE(stop.seqs.empty());
}

TEST(BroadcastPlan, WithinTpGroups) {
  MpiCommunicator w = MpiCommunicator::world();
  if (w.size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  MpiCommunicator g = w.split_tp_group(2);
  StepPlan p;
  if (g.rank() == 0) p = plan_for(w.rank() / 2);
  broadcast_plan(g, p, 0);
  EXPECT_EQ(p, plan_for(w.rank() / 2));
}

// The NCCL unique id exchange (parallel/nccl_setup.h): TP rank 0's bytes reach every rank of its group, and
// only TP rank 0 makes an id (the real ncclGetUniqueId is replaced by a fake; NCCL itself needs GPUs).
TEST(NcclSetup, UniqueIdBytesBroadcastWithinTpGroups) {
  MpiCommunicator w = MpiCommunicator::world();
  const int tp = w.size() >= 4 ? 2 : w.size();
  MpiCommunicator g = w.split_tp_group(tp);
  int calls = 0;
  const NcclIdBytes id = exchange_nccl_id(g, [&] {
    ++calls;
    NcclIdBytes b;
    for (size_t i = 0; i < b.size(); ++i) b[i] = char((i * 7 + size_t(w.rank()) * 31) & 0xff);  // root's world rank
    return b;
  });
  EXPECT_EQ(calls, g.rank() == 0 ? 1 : 0);
  const int root_world = w.rank() - g.rank();
  for (size_t i = 0; i < id.size(); ++i) ASSERT_EQ(id[i], char((i * 7 + size_t(root_world) * 31) & 0xff)) << i;
}

TEST(NcclSetup, DeviceKeysAndThePlanAgreeOnEveryRank) {
  MpiCommunicator w = MpiCommunicator::world();
  // Pretend one GPU per host and two ranks per host: ranks 2k and 2k+1 share a GPU.
  const std::string key = "host" + std::to_string(w.rank() / 2) + "/cuda:0";
  const std::vector<std::string> keys = gather_device_keys(w, key);
  ASSERT_EQ(int(keys.size()), w.size());
  for (int r = 0; r < w.size(); ++r) EXPECT_EQ(keys[size_t(r)], "host" + std::to_string(r / 2) + "/cuda:0");
  EXPECT_EQ(plan_collectives(keys, true).path, CollectivePath::MpiHostStaging);
  EXPECT_THROW(gather_device_keys(w, std::string(300, 'x')), InputError);  // refused before communicating
  const NodePlace p = node_place(w.handle());
  EXPECT_EQ(p.local_size, w.size());  // mpirun on one machine
  EXPECT_EQ(p.local_rank, w.rank());
}

// Self-test of the harness (ctest parallel_mpi_failure_propagates, WILL_FAIL): with TP_MPI_INJECT_FAILURE
// set, only rank 1 fails, while rank 0 waits in a barrier; the job must still exit non-zero.
TEST(Harness, InjectedFailureOnRank1) {
  if (std::getenv("TP_MPI_INJECT_FAILURE") == nullptr) GTEST_SKIP() << "TP_MPI_INJECT_FAILURE not set";
  MpiCommunicator w = MpiCommunicator::world();
  if (w.rank() == 1) ADD_FAILURE() << "injected failure";
  w.barrier();
}

// Turns any failed assertion on any rank into a readable line and a job-wide abort.
class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.message());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace tp

int main(int argc, char** argv) {
  tp::MpiSession session(&argc, &argv);
  tp::g_session = &session;
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (session.world_rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new tp::AbortOnFailure(session.world_rank()));
  const int local = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (session.world_rank() == 0)
    std::printf("parallel_mpi_test: %d ranks, %s (thread level granted: %d)\n", session.world_size(),
                any ? "FAILED" : "all passed", session.provided());
  return any;
}
