// How a rank's GPU memory is split (cache.gpu_memory_utilization, vLLM's meaning): the fraction u of the
// device's total memory is for weights + activations + KV; the KV pool gets what remains of it,
//   kv budget = floor(u × total) − weights − activation peak     (bytes, per rank)
// where the activation peak is profiled by a forward at the largest step (scheduler.max_num_batched_tokens)
// before the pool is allocated. The pool is then kv_pool_plan(fp, budget, block_size) (kvstore/capacity.h), and
// the start-up report uses the words of `tpserve plan` ("KV capacity", capacity_report). A plan whose budget
// holds no block is refused before the pool is allocated, with these numbers. Pure arithmetic.
#pragma once
#include <cstdint>
#include <string>

#include "kvstore/capacity.h"

namespace tp {

struct GpuMemoryPlan {
  int64_t total_bytes = 0;       // the device's total memory
  double utilization = 0.9;      // (0, 1]
  int64_t usable_bytes = 0;      // floor(utilization × total_bytes)
  int64_t weight_bytes = 0;      // this rank's resident weights
  int64_t activation_bytes = 0;  // profiled activation peak of the largest step
  int64_t kv_budget_bytes = 0;   // usable − weights − activations (negative: does not fit)
  KvPoolPlan pool;               // kv_pool_plan over the budget (0 blocks when the budget is <= 0)
  bool fits() const { return pool.n_blocks > 0; }
};

// Throws InputError for total_bytes <= 0, a utilization outside (0, 1], negative weight or activation bytes,
// or block_size <= 0.
GpuMemoryPlan plan_gpu_memory(int64_t total_bytes, double utilization, int64_t weight_bytes, int64_t activation_bytes,
                              const KvFootprint& fp, int64_t block_size);

// The start-up lines, each ending in '\n':
//   GPU memory per rank: 0.9 x 143.77 GB = 129.39 GB for weights + activations + KV
//   KV capacity: 120.12 GB per rank = 129.39 GB - 8.03 GB weights - 1.24 GB activations
// then capacity_report(fp, budget, block_size, max_context) (the KV cache / pool / concurrency lines).
std::string gpu_memory_report(const GpuMemoryPlan& p, const KvFootprint& fp, int64_t max_context);

// Throws ConfigError(source, "cache.gpu_memory_utilization", ...) naming the numbers when !p.fits():
//   "0.1 x 80.00 GB = 8.00 GB leaves no KV block: 7.50 GB weights + 1.00 GB activations; one block of 16 tokens
//    needs 737.28 KB (use a higher utilization, a larger tp, or a smaller dtype)".
void check_gpu_memory_plan(const GpuMemoryPlan& p, const std::string& source);

}  // namespace tp
