// Error handling for CUDA runtime and cuBLASLt calls: every failing call becomes a tp::Error naming the call
// site and the CUDA error string. Host code only (no device code), so plain C++ sources include it too.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"

namespace tp::cuda {

// Throws tp::Error("<what>: <cudaGetErrorName>: <cudaGetErrorString>") unless rc is cudaSuccess.
inline void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw Error(std::string(what) + ": " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

// Throws tp::Error("<what>: cuBLASLt status <n> (<name>)") unless rc is CUBLAS_STATUS_SUCCESS.
inline void check(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLASLt status " + std::to_string(int(rc)) + " (" +
                cublasLtGetStatusName(rc) + ")");
}

// After a kernel launch: a launch error (bad configuration, no kernel image for this device) as tp::Error.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Throws tp::InputError("<entry>: <why>") — the entries' argument checks.
[[noreturn]] inline void bad_argument(const char* entry, const std::string& why) {
  throw InputError(std::string(entry) + ": " + why);
}

}  // namespace tp::cuda
