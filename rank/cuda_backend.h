// The CUDA Backend (rank/backend.h) as the rest of the code sees it: plain C++, no CUDA headers. The class
// lives in rank/cuda_backend.cpp, compiled only when the build has CUDA and the kernels of kernels/cuda
// (ops.h, kv_cache.h, gemm.h); other builds compile rank/cuda_backend_none.cpp, whose make_cuda_backend
// refuses.
#pragma once
#include <memory>
#include <string>

#include "rank/backend.h"

namespace tp {

// Whether this build carries the CUDA backend.
bool cuda_backend_built();

// A CUDA backend on GPU local_rank % (number of visible devices) (parallel/device_binding.h), with its own
// stream and cuBLASLt handle. Throws ConfigError(source, "model.device", ...) when this build has no CUDA or
// no device is visible (the CUDA error named).
std::shared_ptr<Backend> make_cuda_backend(int local_rank, const std::string& source);

}  // namespace tp
