// Communicator: the collectives a tensor-parallel group runs on every step (DESIGN §3).
//
// One object is one group of ranks (the world, or one TP group of it). Every rank of the group must call the
// same collectives in the same order with the same sizes; a mismatch is undefined behaviour in MPI and NCCL
// alike. Implementations: MpiCommunicator (host buffers, parallel/mpi_communicator.h); an NCCL one slots in
// later taking device buffers and a cudaStream_t through `Stream`.
//
// Stream: an opaque handle. nullptr on CPU (MPI ignores it; the call is complete when it returns). On GPU it
// is the cudaStream_t the collective is enqueued on; completion is then ordered on that stream, not on return.
//
// Errors: a failing collective throws tp::Error naming the rank and the operation. After such an error the
// group is in an unknown state (other ranks may be blocked); the caller reports it and exits non-zero.
//
// RAII, non-copyable, movable (a moved-from communicator may only be destroyed or assigned to).
#pragma once
#include <cstddef>
#include <cstdint>

namespace tp {

using Stream = void*;  // cudaStream_t on GPU, nullptr on CPU

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank's index in the group, [0, size()).
  virtual int rank() const = 0;
  // Number of ranks in the group, >= 1.
  virtual int size() const = 0;

  // In place: data[i] = sum over ranks of data[i]. data: [count] f32.
  void all_reduce_sum(float* data, size_t count, Stream stream = nullptr);
  // In place over bf16 bit patterns: each element is widened to f32, summed over ranks in f32, and rounded
  // back to bf16 once (round to nearest even) — the sum of n ranks carries one bf16 rounding, not n - 1.
  // data: [count] bf16.
  void all_reduce_sum_bf16(uint16_t* data, size_t count, Stream stream = nullptr);
  // recv[r * bytes_per_rank, (r + 1) * bytes_per_rank) = rank r's send[0, bytes_per_rank).
  // send: [bytes_per_rank] bytes, recv: [size() * bytes_per_rank] bytes; they must not overlap.
  void all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream = nullptr);
  // Every rank's buf[0, bytes) = root's buf[0, bytes). root in [0, size()).
  void broadcast(void* buf, size_t bytes, int root, Stream stream = nullptr);
  // Returns on any rank only after every rank of the group has entered it.
  void barrier();

 protected:
  Communicator() = default;
  Communicator(Communicator&&) noexcept = default;
  Communicator& operator=(Communicator&&) noexcept = default;

  // Called by the public functions above after argument checks (null pointers with a non-zero size, a root
  // out of range throw tp::Error before any communication).
  virtual void do_all_reduce_sum(float* data, size_t count, Stream stream) = 0;
  virtual void do_all_reduce_sum_bf16(uint16_t* data, size_t count, Stream stream) = 0;
  virtual void do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream) = 0;
  virtual void do_broadcast(void* buf, size_t bytes, int root, Stream stream) = 0;
  virtual void do_barrier() = 0;
};

}  // namespace tp
