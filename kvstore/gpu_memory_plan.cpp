#include "kvstore/gpu_memory_plan.h"

#include <charconv>
#include <cmath>

#include "common/error.h"

namespace tp {
namespace {

std::string shortest(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string usable_text(const GpuMemoryPlan& p) {
  return shortest(p.utilization) + " x " + format_si_bytes(p.total_bytes) + " = " + format_si_bytes(p.usable_bytes);
}

}  // namespace

GpuMemoryPlan plan_gpu_memory(int64_t total_bytes, double utilization, int64_t weight_bytes, int64_t activation_bytes,
                              const KvFootprint& fp, int64_t block_size) {
  if (total_bytes <= 0) throw InputError("plan_gpu_memory: device memory " + std::to_string(total_bytes) + " B");
  if (!(utilization > 0.0 && utilization <= 1.0))
    throw InputError("cache.gpu_memory_utilization: " + shortest(utilization) + " is out of range (0, 1]");
  if (weight_bytes < 0 || activation_bytes < 0) throw InputError("plan_gpu_memory: negative weight or activation bytes");
  if (block_size <= 0) throw InputError("plan_gpu_memory: block_size " + std::to_string(block_size));
  GpuMemoryPlan p;
  p.total_bytes = total_bytes;
  p.utilization = utilization;
  p.usable_bytes = int64_t(std::floor(utilization * double(total_bytes)));
  p.weight_bytes = weight_bytes;
  p.activation_bytes = activation_bytes;
  p.kv_budget_bytes = p.usable_bytes - weight_bytes - activation_bytes;
  p.pool = kv_pool_plan(fp, p.kv_budget_bytes, block_size);
  return p;
}

std::string gpu_memory_report(const GpuMemoryPlan& p, const KvFootprint& fp, int64_t max_context) {
  std::string s = "GPU memory per rank: " + usable_text(p) + " for weights + activations + KV\n";
  s += "KV capacity: " + format_si_bytes(p.kv_budget_bytes) + " per rank = " + format_si_bytes(p.usable_bytes) + " - " +
       format_si_bytes(p.weight_bytes) + " weights - " + format_si_bytes(p.activation_bytes) + " activations\n";
  if (p.fits()) s += capacity_report(fp, p.kv_budget_bytes, p.pool.block_size, max_context);
  return s;
}

void check_gpu_memory_plan(const GpuMemoryPlan& p, const std::string& source) {
  if (p.fits()) return;
  throw ConfigError(source, "cache.gpu_memory_utilization",
                    usable_text(p) + " leaves no KV block: " + format_si_bytes(p.weight_bytes) + " weights + " +
                        format_si_bytes(p.activation_bytes) + " activations; one block of " +
                        std::to_string(p.pool.block_size) + " tokens needs " + format_si_bytes(p.pool.block_bytes) +
                        " (use a higher utilization, a larger tp, or a smaller dtype)");
}

}  // namespace tp
