// A Communicator on a backend's memory that runs another Communicator on host memory: each collective copies
// its device buffer to a host buffer (waiting for the ops before it), runs the host collective (MPI), and
// copies the result back. The fallback for a TP group whose ranks share a GPU (NCCL refuses them,
// parallel/device_binding.h). Costs two PCIe copies and a stream sync per collective.
#pragma once
#include <vector>

#include "parallel/communicator.h"
#include "rank/backend.h"

namespace tp {

class StagedCommunicator final : public Communicator {
 public:
  // host: the collectives on host memory (MPI); backend: whose memory the callers' buffers are in. Both must
  // outlive this object.
  StagedCommunicator(Communicator& host, Backend& backend) : host_(&host), backend_(&backend) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

 protected:
  void do_all_reduce_sum(float* data, size_t count, Stream stream) override;
  void do_all_reduce_sum_bf16(uint16_t* data, size_t count, Stream stream) override;
  void do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream) override;
  void do_broadcast(void* buf, size_t bytes, int root, Stream stream) override;
  void do_barrier() override;

 private:
  Communicator* host_;
  Backend* backend_;
  std::vector<char> a_, b_;  // host staging
};

}  // namespace tp
