// CPU seconds (user + system) the process has used, all threads together: for the quantizer's per-phase
// profile (rank/quantize.cpp), which must be read on a shared machine where wall seconds are noise.
#pragma once
#include <ctime>

namespace tp {

inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Adds the CPU seconds of its lifetime to *sum.
class CpuTimer {
 public:
  explicit CpuTimer(double* sum) : sum_(sum), t0_(process_cpu_seconds()) {}
  ~CpuTimer() {
    if (sum_) *sum_ += process_cpu_seconds() - t0_;
  }
  CpuTimer(const CpuTimer&) = delete;
  CpuTimer& operator=(const CpuTimer&) = delete;

 private:
  double* sum_;
  double t0_;
};

}  // namespace tp
