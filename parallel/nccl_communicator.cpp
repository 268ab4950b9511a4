// The NCCL Communicator (built only when the CUDA toolkit and NCCL are found): device buffers, collectives
// enqueued on the cudaStream_t each call passes (nullptr: the legacy default stream), completion ordered on
// that stream. One ncclComm_t per TP group, made from the unique id TP rank 0 broadcasts over MPI
// (parallel/nccl_setup.h). bf16 reductions are refused: NCCL rounds to bf16 after every hop, not once as the
// Communicator contract states; the forward reduces f32.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "common/error.h"
#include "parallel/nccl_setup.h"

namespace tp {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL_UNIQUE_ID_BYTES changed");

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, const NcclIdBytes& id) : rank_(rank), size_(size) {
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    check(ncclCommInitRank(&comm_, size, uid, rank), "ncclCommInitRank");
    if (cudaMalloc(&barrier_, sizeof(float)) != cudaSuccess) {
      ncclCommDestroy(comm_);
      throw Error(where("barrier") + "cudaMalloc of 4 bytes failed");
    }
  }
  ~NcclCommunicator() override {
    if (barrier_) cudaFree(barrier_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void do_all_reduce_sum(float* data, size_t count, Stream stream) override {
    check(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, cuda_stream(stream)), "all_reduce_sum");
  }
  void do_all_reduce_sum_bf16(uint16_t*, size_t, Stream) override {
    throw Error(where("all_reduce_sum_bf16") + "not supported on NCCL (it rounds after every hop)");
  }
  void do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream) override {
    check(ncclAllGather(send, recv, bytes_per_rank, ncclInt8, comm_, cuda_stream(stream)), "all_gather");
  }
  void do_broadcast(void* buf, size_t bytes, int root, Stream stream) override {
    check(ncclBroadcast(buf, buf, bytes, ncclInt8, root, comm_, cuda_stream(stream)), "broadcast");
  }
  void do_barrier() override {
    check(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm_, nullptr), "barrier");
    if (const cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess)
      throw Error(where("barrier") + cudaGetErrorString(e));
  }

 private:
  static cudaStream_t cuda_stream(Stream s) { return static_cast<cudaStream_t>(s); }
  std::string where(const char* op) const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + op + ": ";
  }
  void check(ncclResult_t rc, const char* op) const {
    if (rc != ncclSuccess) throw Error(where(op) + "NCCL: " + ncclGetErrorString(rc));
  }

  int rank_ = 0, size_ = 0;
  ncclComm_t comm_ = nullptr;
  float* barrier_ = nullptr;  // [1] on the device
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& group) {
  const NcclIdBytes id = exchange_nccl_id(group, [] {
    ncclUniqueId uid;
    if (const ncclResult_t rc = ncclGetUniqueId(&uid); rc != ncclSuccess)
      throw Error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc));
    NcclIdBytes bytes;
    std::memcpy(bytes.data(), &uid, sizeof uid);
    return bytes;
  });
  return std::make_unique<NcclCommunicator>(group.rank(), group.size(), id);
}

}  // namespace tp
