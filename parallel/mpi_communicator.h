// MPI implementations of the Communicator (host buffers) and the process-wide MPI session.
//
// MpiSession: RAII MPI_Init_thread / MPI_Finalize. Create one in main() before any MpiCommunicator and keep it
// alive until every communicator is destroyed. It asks for MPI_THREAD_MULTIPLE (the coordinator runs HTTP
// threads next to the engine thread, DESIGN §4) and records what the library granted; every MPI call should
// still stay on one thread. If MPI is already initialized (by a test harness or a host program) it only
// records the level and neither initializes nor finalizes.
//
// MpiCommunicator: wraps a private duplicate of an MPI communicator (so our traffic never matches anyone
// else's) with MPI_ERRORS_RETURN set on it; every failing call throws tp::Error
// "rank R of N: <operation>: <MPI error string>". Reductions and broadcasts above INT_MAX elements are
// sent in chunks; all_gather refuses more than INT_MAX bytes per rank (tp::Error).
// all_reduce_sum_bf16 widens to f32 in a scratch buffer owned by the communicator, runs one MPI_Allreduce
// in f32 and rounds back to bf16 once (2x the bytes of a bf16 reduction; exact and identical on every rank).
//
// Group layout (DESIGN §1): world = dp x tp; replica d owns world ranks [d * tp, (d + 1) * tp), and its TP
// rank t is world rank d * tp + t. split_tp_group(tp) builds that group.
#pragma once
#include <mpi.h>

#include <vector>

#include "parallel/communicator.h"

namespace tp {

class MpiSession {
 public:
  // argc/argv may be null. Throws tp::Error if MPI_Init_thread fails.
  explicit MpiSession(int* argc = nullptr, char*** argv = nullptr, int required = MPI_THREAD_MULTIPLE);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // The thread level the library granted (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE).
  int provided() const { return provided_; }
  bool thread_multiple() const { return provided_ >= MPI_THREAD_MULTIPLE; }
  // True when this object called MPI_Init_thread (and so will call MPI_Finalize).
  bool owns_mpi() const { return owns_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// Ends the whole job now, from any thread: MPI_Abort(MPI_COMM_WORLD, code) when MPI is running (mpirun then
// kills every rank, including one that is alive but stuck), else _Exit(code). For a watchdog that found a
// collective that will never return.
[[noreturn]] void abort_job(int code);

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (collective over `comm`). Throws tp::Error if MPI is not initialized or MPI_Comm_dup
  // fails.
  explicit MpiCommunicator(MPI_Comm comm);
  // A duplicate of MPI_COMM_WORLD.
  static MpiCommunicator world() { return MpiCommunicator(MPI_COMM_WORLD); }
  ~MpiCommunicator() override;
  MpiCommunicator(MpiCommunicator&& other) noexcept;
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // The wrapped communicator (MPI_COMM_NULL after a move).
  MPI_Comm handle() const { return comm_; }

  // Collective over this group: ranks with the same color form one new group, ordered by (key, rank).
  // color >= 0 (MPI_UNDEFINED is not accepted: every rank gets a group).
  MpiCommunicator split(int color, int key) const;
  // Collective: the TP group of this rank, ranks [d * tp, (d + 1) * tp) for d = rank() / tp, TP rank
  // rank() % tp. Throws tp::Error unless tp >= 1 and tp divides size().
  MpiCommunicator split_tp_group(int tp) const;

 protected:
  void do_all_reduce_sum(float* data, size_t count, Stream stream) override;
  void do_all_reduce_sum_bf16(uint16_t* data, size_t count, Stream stream) override;
  void do_all_gather(const void* send, size_t bytes_per_rank, void* recv, Stream stream) override;
  void do_broadcast(void* buf, size_t bytes, int root, Stream stream) override;
  void do_barrier() override;

 private:
  struct Adopt {};
  MpiCommunicator(Adopt, MPI_Comm owned);  // takes ownership of an already-created communicator
  void init_owned(const char* op);
  int live() const;  // MPI_SUCCESS, or a code check() reports as "moved-from communicator"
  void check(int rc, const char* op) const;
  void release() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  std::vector<float> scratch_;  // all_reduce_sum_bf16 widening buffer
};

}  // namespace tp
