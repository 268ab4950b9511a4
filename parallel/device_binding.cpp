#include "parallel/device_binding.h"

#include <map>

#include "common/error.h"

namespace tp {

const DeviceInfo& bind_device(const std::vector<DeviceInfo>& devices, int local_rank) {
  if (devices.empty())
    throw InputError("model.device: cuda: no CUDA device is visible on this host (check the driver, "
                     "CUDA_VISIBLE_DEVICES, or use device cpu)");
  if (local_rank < 0) throw InputError("bind_device: local rank " + std::to_string(local_rank) + " is negative");
  return devices[size_t(local_rank) % devices.size()];
}

std::string device_key(const std::string& host, const DeviceInfo& d) {
  return host + "/" + (d.uuid.empty() ? "cuda:" + std::to_string(d.ordinal) : d.uuid);
}

const char* collective_path_name(CollectivePath p) {
  switch (p) {
    case CollectivePath::None: return "none";
    case CollectivePath::Nccl: return "nccl";
    case CollectivePath::MpiHostStaging: return "mpi (host staging)";
  }
  return "?";
}

CollectivePlan plan_collectives(const std::vector<std::string>& member_keys, bool nccl_built) {
  const size_t n = member_keys.size();
  const std::string group = "TP group of " + std::to_string(n) + ": ";
  if (n <= 1) return {CollectivePath::None, group + "no collectives"};
  std::map<std::string, size_t> first;  // device key -> first TP rank on it
  for (size_t t = 0; t < n; ++t) {
    const auto [it, fresh] = first.emplace(member_keys[t], t);
    if (!fresh)
      return {CollectivePath::MpiHostStaging,
              group + "MPI with host staging: TP ranks " + std::to_string(it->second) + " and " + std::to_string(t) +
                  " share GPU " + member_keys[t] + " (NCCL refuses two ranks on one GPU)"};
  }
  if (!nccl_built)
    return {CollectivePath::MpiHostStaging, group + "MPI with host staging: this build has no NCCL"};
  std::string list;
  for (const std::string& k : member_keys) list += (list.empty() ? "" : ", ") + k;
  return {CollectivePath::Nccl, group + "NCCL (" + std::to_string(n) + " GPUs: " + list + ")"};
}

}  // namespace tp
