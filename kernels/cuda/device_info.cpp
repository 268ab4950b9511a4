// Device queries for launch choices (device_info.h).
#include "kernels/cuda/device_info.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"

namespace tp::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return n;
}

namespace {
int attribute(cudaDeviceAttr attr, const char* what) {
  int dev = 0, v = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&v, attr, dev), what);
  return v;
}
}  // namespace

int multiprocessor_count() { return attribute(cudaDevAttrMultiProcessorCount, "cudaDevAttrMultiProcessorCount"); }

int compute_capability() {
  return attribute(cudaDevAttrComputeCapabilityMajor, "cudaDevAttrComputeCapabilityMajor") * 10 +
         attribute(cudaDevAttrComputeCapabilityMinor, "cudaDevAttrComputeCapabilityMinor");
}

}  // namespace tp::cuda
