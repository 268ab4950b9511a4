// Test helpers for the CUDA kernels: whether a device is present (tests skip with "no CUDA device" when not),
// RAII device buffers with upload / download, and the NMSE the comparisons with the CPU ops state bounds in.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"

namespace tp::test {

inline bool cuda_device_present() { return cuda::device_count() > 0; }

// In a TEST body: skip unless a CUDA device is present.
#define TP_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                            \
    if (!::tp::test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";     \
  } while (0)

// n elements of T on the device (zeroed), with copies to and from host vectors.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    cuda::check(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    cuda::check(cudaMemset(p_, 0, std::max<size_t>(n, 1) * sizeof(T)), "cudaMemset");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    cuda::check(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda::check(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Σ (got - want)² / Σ want² (0 when both are all zero; a NaN anywhere gives NaN, which fails every bound).
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? num / den : num;
}

}  // namespace tp::test
