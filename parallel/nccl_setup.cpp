#include "parallel/nccl_setup.h"

#include <cstring>

#include "common/error.h"

namespace tp {

NodePlace node_place(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    throw Error("node_place: MPI_Comm_split_type failed");
  NodePlace p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  return p;
}

NcclIdBytes exchange_nccl_id(Communicator& group, const std::function<NcclIdBytes()>& make_id) {
  NcclIdBytes id{};
  if (group.rank() == 0) id = make_id();
  group.broadcast(id.data(), id.size(), 0);
  return id;
}

std::vector<std::string> gather_device_keys(Communicator& group, const std::string& key) {
  constexpr size_t kRecord = 256;  // a length byte and up to 255 bytes of key
  if (key.size() >= kRecord)
    throw InputError("device key '" + key.substr(0, 40) + "…' is " + std::to_string(key.size()) +
                     " bytes; at most 255");
  std::vector<char> mine(kRecord, 0), all(kRecord * size_t(group.size()), 0);
  mine[0] = char(uint8_t(key.size()));
  std::memcpy(mine.data() + 1, key.data(), key.size());
  group.all_gather(mine.data(), kRecord, all.data());
  std::vector<std::string> keys;
  for (int r = 0; r < group.size(); ++r) {
    const char* rec = all.data() + size_t(r) * kRecord;
    keys.emplace_back(rec + 1, size_t(uint8_t(rec[0])));
  }
  return keys;
}

}  // namespace tp
