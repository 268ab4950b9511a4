// Vocab-parallel embedding lookup (ops.h): kernel / launcher / entry.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/ops.h"

namespace tp::cuda {
namespace {

// One block per token. table: [vocab_local, hidden] of T; ids: [n]; out: [n, hidden] F32.
template <typename T>
__global__ void embedding_kernel(const T* __restrict__ table, int64_t vocab_begin, int64_t vocab_local,
                                 int64_t hidden, const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const int64_t row = int64_t(ids[i]) - vocab_begin;
  float* o = out + i * hidden;
  const bool mine = row >= 0 && row < vocab_local;
  const T* src = table + (mine ? row : 0) * hidden;
  for (int64_t d = threadIdx.x; d < hidden; d += blockDim.x) {
    if constexpr (std::is_same_v<T, float>)
      o[d] = mine ? src[d] : 0.0f;
    else
      o[d] = mine ? dev::bf16_bits_to_f32(src[d]) : 0.0f;
  }
}

template <typename T>
void launch_embedding(const T* table, int64_t vocab_begin, int64_t vocab_local, int64_t hidden, const int32_t* ids,
                      int64_t n, float* out, cudaStream_t stream) {
  embedding_kernel<T><<<unsigned(n), row_threads(hidden, 4), 0, stream>>>(table, vocab_begin, vocab_local, hidden,
                                                                           ids, out);
  check_launch("embedding_kernel");
}

}  // namespace

void embedding(const void* table, DType table_type, int64_t vocab_begin, int64_t vocab_local, int64_t hidden,
               const int32_t* ids, int64_t n, float* out, cudaStream_t stream) {
  check_non_negative("cuda::embedding", "n", n);
  check_positive("cuda::embedding", "hidden", hidden);
  check_non_negative("cuda::embedding", "vocab_local", vocab_local);
  if (n == 0) return;
  if (table_type == DType::F32)
    launch_embedding(static_cast<const float*>(table), vocab_begin, vocab_local, hidden, ids, n, out, stream);
  else if (table_type == DType::BF16)
    launch_embedding(static_cast<const uint16_t*>(table), vocab_begin, vocab_local, hidden, ids, n, out, stream);
  else
    bad_argument("cuda::embedding", "table type must be F32 or BF16");
}

}  // namespace tp::cuda
