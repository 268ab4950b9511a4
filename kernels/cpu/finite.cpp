#include "kernels/cpu/finite.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu {
namespace {

constexpr int64_t kChunk = int64_t(1) << 16;       // elements a thread scans at a time
constexpr int64_t kParallelMin = int64_t(1) << 20;  // below this, one thread

// T: the unsigned type of one element; mask: its exponent bits.
template <class T>
int64_t first_in(const T* x, int64_t n, T mask) {
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  int64_t first = n;
#pragma omp parallel for num_threads(num_threads()) schedule(static) reduction(min : first) if (n >= kParallelMin)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    bool any = false;  // a branch-free pass the compiler vectorizes; the rare bad chunk is searched again
    for (int64_t i = begin; i < end; ++i) any |= (x[i] & mask) == mask;
    if (!any) continue;
    for (int64_t i = begin; i < end; ++i)
      if ((x[i] & mask) == mask) {
        first = std::min(first, i);
        break;
      }
  }
  return first == n ? -1 : first;
}

}  // namespace

int64_t first_non_finite(DType type, const void* src, int64_t n) {
  if (n <= 0) return -1;
  switch (type) {
    case DType::F32:
      return first_in(static_cast<const uint32_t*>(src), n, uint32_t(0x7f800000u));
    case DType::BF16:
      return first_in(static_cast<const uint16_t*>(src), n, uint16_t(0x7f80u));
    case DType::F16:
      return first_in(static_cast<const uint16_t*>(src), n, uint16_t(0x7c00u));
    default:
      throw InputError("first_non_finite: " + std::string(dtype_name(type)) + " is not a float type; dequantize first");
  }
}

}  // namespace tp::cpu
