// Liveness of the other ranks of this MPI job that run on this host, without MPI: the leader's engine thread
// may be stuck in a collective with a rank that died (shared memory never reports it), and every MPI call is
// the engine thread's. The peers are the processes started by the same launcher as this one (children of our
// parent, mpirun or orted) whose environment names another OMPI_COMM_WORLD_RANK. Ranks on other hosts are not
// watched here: for them the step watchdog (server.step_timeout_s) is the detector.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

namespace tp {

struct PeerProcess {
  int rank = -1;
  pid_t pid = 0;
};

class PeerWatch {
 public:
  PeerWatch() = default;
  explicit PeerWatch(std::vector<PeerProcess> peers) : peers_(std::move(peers)) {}
  // The running siblings of this process that carry OMPI_COMM_WORLD_RANK other than `own_rank`; none when
  // this process was not started by mpirun. Call once every rank is up (after the model loaded).
  static PeerWatch local_siblings(int own_rank);

  // "" while every watched peer runs, else "rank R (pid P) is gone" for the first that exited (or is a zombie).
  std::string first_dead() const;
  const std::vector<PeerProcess>& peers() const { return peers_; }
  // SIGKILLs every watched peer still running (the backstop when MPI_Abort itself hangs).
  void kill_all() const;

 private:
  std::vector<PeerProcess> peers_;
};

}  // namespace tp
