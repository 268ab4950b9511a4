// make_cuda_backend in a build without the CUDA backend: model.device cuda is refused.
#include "common/error.h"
#include "rank/cuda_backend.h"

namespace tp {

bool cuda_backend_built() { return false; }

std::shared_ptr<Backend> make_cuda_backend(int /*local_rank*/, const std::string& source) {
  throw ConfigError(source, "model.device",
                    "cuda: this tpserve was built without the CUDA backend (it needs the CUDA toolkit and the kernels of "
                    "kernels/cuda); use "
                    "device cpu, or rebuild on a host with the CUDA toolkit (cmake -DTPSERVE_CUDA=ON)");
}

}  // namespace tp
