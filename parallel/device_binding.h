// Which GPU a rank uses and which communicator its TP group gets (DESIGN §1: NCCL on GPU, MPI on CPU): pure
// decisions over a device list, so they are tested without a GPU. parallel/nccl_setup.h runs them over MPI.
//
// Binding: rank with node-local index local_rank uses device local_rank % n_devices (several ranks share a
// device when there are more ranks than devices on the node).
// Collectives: NCCL refuses two ranks of one communicator on the same GPU (DESIGN §4), so a TP group takes
// NCCL only when NCCL is built in and every member sits on a distinct (host, device); otherwise the MPI
// communicator with host staging (device -> host, MPI_Allreduce, host -> device). A group of one needs none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

// One visible device as the CUDA runtime reports it (tests make these up).
struct DeviceInfo {
  int ordinal = 0;
  std::string name;          // "NVIDIA H200"
  std::string uuid;          // unique across hosts ("GPU-…"); empty: unknown, the ordinal on this host is used
  int64_t total_bytes = 0;   // device memory
};

// The device for local_rank in [0, ∞): devices[local_rank % devices.size()]. Throws InputError naming
// model.device when the list is empty ("no CUDA device is visible").
const DeviceInfo& bind_device(const std::vector<DeviceInfo>& devices, int local_rank);

// A stable name for where a rank runs: "<host>/<uuid>", or "<host>/cuda:<ordinal>" without a uuid.
std::string device_key(const std::string& host, const DeviceInfo& d);

enum class CollectivePath : uint8_t { None, Nccl, MpiHostStaging };
const char* collective_path_name(CollectivePath p);  // "none", "nccl", "mpi (host staging)"

struct CollectivePlan {
  CollectivePath path = CollectivePath::None;
  // One start-up line: "TP group of 2: NCCL (2 GPUs: h/GPU-a, h/GPU-b)", or why the fallback was taken
  // ("TP group of 2: MPI with host staging: TP ranks 0 and 1 share GPU h/cuda:0 (NCCL refuses two ranks on
  // one GPU)").
  std::string reason;
};

// The path for a TP group whose member t runs on member_keys[t] (device_key of each rank, in TP rank order).
CollectivePlan plan_collectives(const std::vector<std::string>& member_keys, bool nccl_built);

}  // namespace tp
