// Dense weights for y = x · Wᵀ and the CPU GEMM/GEMV that applies them.
// W: [n_out, n_in] row-major (one output feature a row), stored as F32 or BF16 in a 64-byte aligned buffer.
// Large M goes through oneDNN matmul (BF16: activations converted to BF16, accumulate in F32);
// small M (decode) through our own AVX-512-BF16 / AVX-512 GEMV when the CPU has it, a portable loop if not.
#pragma once
#include <cstdint>
#include <memory>

#include "common/dtype.h"

namespace tp::cpu {

class Weight {
 public:
  // Converts `n_out * n_in` elements of type `src_type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1; rows contiguous,
  // `src_row_stride` bytes apart) into `dtype` (F32 or BF16).
  Weight(DType dtype, int64_t n_out, int64_t n_in, DType src_type, const void* src, int64_t src_row_stride);
  ~Weight();
  Weight(Weight&&) noexcept;
  Weight& operator=(Weight&&) noexcept;
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;

  DType dtype() const { return dtype_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  const void* data() const { return data_; }
  int64_t n_bytes() const { return dtype_row_bytes(dtype_, n_in_) * n_out_; }

 private:
  DType dtype_;
  int64_t n_out_, n_in_;
  void* data_ = nullptr;  // aligned_alloc(64)
};

// y[m, n_out] = x[m, n_in] · Wᵀ. x and y are F32, row-major, contiguous. Uses the calling thread pool
// (OpenMP); thread count set with set_num_threads.
void linear(const float* x, int64_t m, const Weight& w, float* y);

// Number of compute threads for every CPU kernel and oneDNN (OpenMP).
void set_num_threads(int n);
int num_threads();

}  // namespace tp::cpu
