#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "common/dtype.h"
#include "common/error.h"

namespace tp {
namespace {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, size_t(std::max(len, 0))) + " (MPI error " + std::to_string(rc) + ")";
}

bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

constexpr int kMovedFrom = -1;  // check() code for a call on a moved-from communicator
constexpr size_t kMaxChunk = size_t(INT_MAX);  // elements per MPI call

}  // namespace

// ---------------------------------------------------------------------------------------------- MpiSession

MpiSession::MpiSession(int* argc, char*** argv, int required) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw Error("MpiSession: MPI was already finalized in this process");
  if (initialized) {
    MPI_Query_thread(&provided_);
  } else {
    const int rc = MPI_Init_thread(argc, argv, required, &provided_);
    if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread failed: " + mpi_error_string(rc));
    owns_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort_job(int code) {
  if (mpi_alive()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// ----------------------------------------------------------------------------------------- MpiCommunicator

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  if (!mpi_alive()) throw Error("MpiCommunicator: MPI is not initialized (create an MpiSession first)");
  if (comm == MPI_COMM_NULL) throw Error("MpiCommunicator: MPI_COMM_NULL");
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  MPI_Comm dup = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(comm, &dup);
  if (rc != MPI_SUCCESS)
    throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                ": MPI_Comm_dup: " + mpi_error_string(rc));
  comm_ = dup;
  init_owned("MPI_Comm_dup");
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm owned) : comm_(owned) { init_owned("MPI_Comm_split"); }

void MpiCommunicator::init_owned(const char* op) {
  int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm_, &rank_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
  if (rc != MPI_SUCCESS) {
    const std::string msg = "rank " + std::to_string(rank_) + ": " + op + ": " + mpi_error_string(rc);
    release();
    throw Error(msg);
  }
}

MpiCommunicator::~MpiCommunicator() { release(); }

void MpiCommunicator::release() noexcept {
  if (comm_ != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

MpiCommunicator::MpiCommunicator(MpiCommunicator&& other) noexcept
    : Communicator(std::move(other)),
      comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      scratch_(std::move(other.scratch_)) {}

MpiCommunicator& MpiCommunicator::operator=(MpiCommunicator&& other) noexcept {
  if (this != &other) {
    release();
    Communicator::operator=(std::move(other));
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    scratch_ = std::move(other.scratch_);
  }
  return *this;
}

int MpiCommunicator::live() const { return comm_ == MPI_COMM_NULL ? kMovedFrom : MPI_SUCCESS; }

void MpiCommunicator::check(int rc, const char* op) const {
  if (rc == MPI_SUCCESS) return;
  if (rc == kMovedFrom)
    throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + op +
                ": moved-from communicator");
  throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + op + ": " +
              mpi_error_string(rc));
}

MpiCommunicator MpiCommunicator::split(int color, int key) const {
  if (color < 0)
    throw Error("rank " + std::to_string(rank_) + ": split: color " + std::to_string(color) + " must be >= 0");
  check(live(), "split");
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &out), "split (MPI_Comm_split)");
  return MpiCommunicator(Adopt{}, out);
}

MpiCommunicator MpiCommunicator::split_tp_group(int tp) const {
  if (tp < 1 || size_ % tp != 0)
    throw Error("rank " + std::to_string(rank_) + ": split_tp_group: tp=" + std::to_string(tp) +
                " does not divide the " + std::to_string(size_) + " ranks of the group");
  return split(rank_ / tp, rank_ % tp);
}

void MpiCommunicator::do_all_reduce_sum(float* data, size_t count, Stream) {
  check(live(), "all_reduce_sum");
  for (size_t off = 0; off < count; off += kMaxChunk) {
    const int n = int(std::min(kMaxChunk, count - off));
    check(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, comm_), "all_reduce_sum (MPI_Allreduce)");
  }
}

void MpiCommunicator::do_all_reduce_sum_bf16(uint16_t* data, size_t count, Stream) {
  check(live(), "all_reduce_sum_bf16");
  scratch_.resize(count);
  for (size_t i = 0; i < count; ++i) scratch_[i] = bf16_to_f32(data[i]);
  for (size_t off = 0; off < count; off += kMaxChunk) {
    const int n = int(std::min(kMaxChunk, count - off));
    check(MPI_Allreduce(MPI_IN_PLACE, scratch_.data() + off, n, MPI_FLOAT, MPI_SUM, comm_),
          "all_reduce_sum_bf16 (MPI_Allreduce)");
  }
  for (size_t i = 0; i < count; ++i) data[i] = f32_to_bf16(scratch_[i]);
}

void MpiCommunicator::do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream) {
  check(live(), "all_gather");
  if (bytes_per_rank > kMaxChunk)
    throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": all_gather: " +
                std::to_string(bytes_per_rank) + " bytes per rank exceeds INT_MAX");
  const int n = int(bytes_per_rank);
  check(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_), "all_gather (MPI_Allgather)");
}

void MpiCommunicator::do_broadcast(void* buf, size_t bytes, int root, Stream) {
  check(live(), "broadcast");
  auto* p = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += kMaxChunk) {
    const int n = int(std::min(kMaxChunk, bytes - off));
    check(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_), "broadcast (MPI_Bcast)");
  }
}

void MpiCommunicator::do_barrier() {
  check(live(), "barrier");
  check(MPI_Barrier(comm_), "barrier (MPI_Barrier)");
}

}  // namespace tp
