#include "rank/staged_communicator.h"

namespace tp {
namespace {

char* grow(std::vector<char>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

void StagedCommunicator::do_all_reduce_sum(float* data, size_t count, Stream) {
  const size_t bytes = count * sizeof(float);
  auto* h = reinterpret_cast<float*>(grow(a_, bytes));
  backend_->copy_to_host(h, data, int64_t(bytes));
  host_->all_reduce_sum(h, count);
  backend_->copy_to_device(data, h, int64_t(bytes));
}

void StagedCommunicator::do_all_reduce_sum_bf16(uint16_t* data, size_t count, Stream) {
  const size_t bytes = count * sizeof(uint16_t);
  auto* h = reinterpret_cast<uint16_t*>(grow(a_, bytes));
  backend_->copy_to_host(h, data, int64_t(bytes));
  host_->all_reduce_sum_bf16(h, count);
  backend_->copy_to_device(data, h, int64_t(bytes));
}

void StagedCommunicator::do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream) {
  char* s = grow(a_, bytes_per_rank);
  char* r = grow(b_, bytes_per_rank * size_t(size()));
  backend_->copy_to_host(s, send, int64_t(bytes_per_rank));
  host_->all_gather(s, bytes_per_rank, r);
  backend_->copy_to_device(recv, r, int64_t(bytes_per_rank * size_t(size())));
}

void StagedCommunicator::do_broadcast(void* buf, size_t bytes, int root, Stream) {
  char* h = grow(a_, bytes);
  if (rank() == root) backend_->copy_to_host(h, buf, int64_t(bytes));
  host_->broadcast(h, bytes, root);
  if (rank() != root) backend_->copy_to_device(buf, h, int64_t(bytes));
}

void StagedCommunicator::do_barrier() {
  backend_->synchronize();
  host_->barrier();
}

}  // namespace tp
