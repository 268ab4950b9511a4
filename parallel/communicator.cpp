#include "parallel/communicator.h"

#include <string>

#include "common/error.h"

namespace tp {
namespace {

[[noreturn]] void fail(const Communicator& c, const char* op, const std::string& why) {
  throw Error("rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + ": " + op + ": " + why);
}

}  // namespace

void Communicator::all_reduce_sum(float* data, size_t count, Stream stream) {
  if (count > 0 && data == nullptr) fail(*this, "all_reduce_sum", "null buffer");
  do_all_reduce_sum(data, count, stream);
}

void Communicator::all_reduce_sum_bf16(uint16_t* data, size_t count, Stream stream) {
  if (count > 0 && data == nullptr) fail(*this, "all_reduce_sum_bf16", "null buffer");
  do_all_reduce_sum_bf16(data, count, stream);
}

void Communicator::all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream) {
  if (bytes_per_rank > 0 && (send == nullptr || recv == nullptr)) fail(*this, "all_gather", "null buffer");
  if (bytes_per_rank > 0) {
    const auto* s = static_cast<const char*>(send);
    const auto* r = static_cast<const char*>(recv);
    const size_t total = bytes_per_rank * size_t(size());
    if (s < r + total && r < s + bytes_per_rank) fail(*this, "all_gather", "send and recv buffers overlap");
  }
  do_all_gather(send, bytes_per_rank, recv, stream);
}

void Communicator::broadcast(void* buf, size_t bytes, int root, Stream stream) {
  if (root < 0 || root >= size())
    fail(*this, "broadcast", "root " + std::to_string(root) + " is not in [0, " + std::to_string(size()) + ")");
  if (bytes > 0 && buf == nullptr) fail(*this, "broadcast", "null buffer");
  do_broadcast(buf, bytes, root, stream);
}

void Communicator::barrier() { do_barrier(); }

}  // namespace tp
