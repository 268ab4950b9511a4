// A 2-rank program where rank 1 dies in the middle of a run of collectives while rank 0 keeps waiting in
// all_reduce_sum. Used by check_no_hang.sh: mpirun must exit non-zero within seconds, not hang.
//   abort_probe abort   rank 1 calls MPI_Abort(1)
//   abort_probe exit    rank 1 returns 3 from main without MPI_Finalize
//   abort_probe throw   rank 1 lets a tp::Error escape main (std::terminate, SIGABRT)
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: abort_probe abort|exit|throw\n");
    return 2;
  }
  const char* mode = argv[1];
  tp::MpiSession session(&argc, &argv);
  tp::MpiCommunicator world = tp::MpiCommunicator::world();
  std::vector<float> v(4096, 1.0f);
  for (int step = 0; step < 1000000; ++step) {
    if (world.rank() == 1 && step == 5) {
      std::fprintf(stderr, "abort_probe: rank 1 dies at step %d (%s)\n", step, mode);
      std::fflush(stderr);
      if (std::strcmp(mode, "abort") == 0) MPI_Abort(MPI_COMM_WORLD, 1);
      if (std::strcmp(mode, "exit") == 0) std::_Exit(3);
      throw tp::Error("rank 1: simulated failure in the forward");
    }
    world.all_reduce_sum(v.data(), v.size());
    for (float& x : v) x = 1.0f;
  }
  std::fprintf(stderr, "abort_probe: rank %d finished, which it must not\n", world.rank());
  return 0;
}
