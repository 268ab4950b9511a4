// Device binding and the NCCL / MPI-fallback decision over made-up device lists (no GPU needed).
#include "parallel/device_binding.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace tp {
namespace {

std::vector<DeviceInfo> devices(int n) {
  std::vector<DeviceInfo> d;
  for (int i = 0; i < n; ++i) d.push_back({i, "NVIDIA H200", "GPU-" + std::to_string(100 + i), int64_t(141) << 30});
  return d;
}

struct BindCase {
  int n_devices, local_rank, expected;
};
class BindDevice : public ::testing::TestWithParam<BindCase> {};

TEST_P(BindDevice, LocalRankModuloDevices) {
  const auto [n, r, want] = GetParam();
  EXPECT_EQ(bind_device(devices(n), r).ordinal, want);
}

INSTANTIATE_TEST_SUITE_P(All, BindDevice,
                         ::testing::Values(BindCase{1, 0, 0}, BindCase{1, 1, 0}, BindCase{1, 7, 0}, BindCase{2, 0, 0},
                                           BindCase{2, 1, 1}, BindCase{2, 2, 0}, BindCase{8, 5, 5}, BindCase{8, 13, 5},
                                           BindCase{3, 4, 1}));

TEST(BindDevice, NoDeviceIsRefusedNamingTheSetting) {
  try {
    bind_device({}, 0);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.device: cuda: no CUDA device is visible"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bind_device(devices(2), -1), InputError);
}

TEST(DeviceKey, UuidElseOrdinal) {
  EXPECT_EQ(device_key("h1", {3, "x", "GPU-abc", 1}), "h1/GPU-abc");
  EXPECT_EQ(device_key("h1", {3, "x", "", 1}), "h1/cuda:3");
}

// The keys of a TP group whose ranks 0..tp-1 sit on `local_size` ranks per host, bound as bind_device does.
std::vector<std::string> group_keys(int tp, int local_size, int n_devices) {
  const auto d = devices(n_devices);
  std::vector<std::string> keys;
  for (int t = 0; t < tp; ++t)
    keys.push_back(device_key("host" + std::to_string(t / local_size), bind_device(d, t % local_size)));
  return keys;
}

TEST(PlanCollectives, DistinctGpusTakeNccl) {
  const CollectivePlan p = plan_collectives(group_keys(2, 2, 2), true);
  EXPECT_EQ(p.path, CollectivePath::Nccl);
  EXPECT_EQ(p.reason, "TP group of 2: NCCL (2 GPUs: host0/GPU-100, host0/GPU-101)");
  EXPECT_EQ(plan_collectives(group_keys(8, 8, 8), true).path, CollectivePath::Nccl);
  // two hosts of one GPU each: distinct GPUs, NCCL across hosts
  EXPECT_EQ(plan_collectives(group_keys(2, 1, 1), true).path, CollectivePath::Nccl);
}

TEST(PlanCollectives, RanksSharingAGpuFallBackToMpi) {
  const CollectivePlan p = plan_collectives(group_keys(2, 2, 1), true);  // tp 2 on one card
  EXPECT_EQ(p.path, CollectivePath::MpiHostStaging);
  EXPECT_EQ(p.reason,
            "TP group of 2: MPI with host staging: TP ranks 0 and 1 share GPU host0/GPU-100 (NCCL refuses two ranks "
            "on one GPU)");
  // 4 ranks on 2 GPUs: ranks 0 and 2 share GPU 0
  const CollectivePlan q = plan_collectives(group_keys(4, 4, 2), true);
  EXPECT_EQ(q.path, CollectivePath::MpiHostStaging);
  EXPECT_NE(q.reason.find("TP ranks 0 and 2 share GPU host0/GPU-100"), std::string::npos) << q.reason;
}

TEST(PlanCollectives, NoNcclInTheBuildFallsBack) {
  const CollectivePlan p = plan_collectives(group_keys(2, 2, 2), false);
  EXPECT_EQ(p.path, CollectivePath::MpiHostStaging);
  EXPECT_EQ(p.reason, "TP group of 2: MPI with host staging: this build has no NCCL");
}

TEST(PlanCollectives, GroupOfOneNeedsNone) {
  EXPECT_EQ(plan_collectives(group_keys(1, 1, 1), true).path, CollectivePath::None);
  EXPECT_EQ(plan_collectives({}, true).path, CollectivePath::None);
  EXPECT_STREQ(collective_path_name(CollectivePath::MpiHostStaging), "mpi (host staging)");
  EXPECT_STREQ(collective_path_name(CollectivePath::Nccl), "nccl");
}

}  // namespace
}  // namespace tp
