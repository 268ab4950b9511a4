// A build without NCCL: TP groups on GPUs use the MPI communicator with host staging.
#include "common/error.h"
#include "parallel/nccl_setup.h"

namespace tp {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& /*group*/) {
  throw Error("make_nccl_communicator: this tpserve was built without NCCL");
}

}  // namespace tp
