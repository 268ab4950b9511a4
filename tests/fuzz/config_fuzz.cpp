// libFuzzer target: arbitrary bytes as YAML through parse_config (common/config.h).
// Accepted outcomes: a Config whose values are in the ranges config.h documents, or tp::Error
// (ConfigError / InputError). Anything else aborts: a yaml-cpp or other exception escaping (uncaught, so
// the report shows the throw site), a sanitizer report, or an out-of-range value accepted.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "common/kv_dtype.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "config_fuzz: accepted config breaks the contract: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tp::Config c = tp::parse_config(text, "fuzz.yaml", "/tmp");
    check(!c.model.path.empty(), "model.path non-empty");
    check(c.model.dtype == "bf16" || c.model.dtype == "f32", "model.dtype bf16 or f32");
    check(c.parallel.tp >= 1 && c.parallel.dp >= 1 && c.parallel.threads >= 0, "parallel sizes");
    check(c.cache.block_size >= 1 && c.cache.block_size <= 1024 && (c.cache.block_size & (c.cache.block_size - 1)) == 0,
          "cache.block_size a power of two in [1, 1024]");
    check(c.cache.memory_mb >= 1 && c.cache.max_context >= 0, "cache sizes");
    bool kv_dtype_known = false;
    for (const char* name : tp::kKvDTypeNames) kv_dtype_known = kv_dtype_known || c.cache.dtype == name;
    check(kv_dtype_known, "cache.dtype one of bf16, f32, fp8_e4m3, int8");
    check(c.scheduler.max_num_seqs >= 1 && c.scheduler.max_num_batched_tokens >= 1 &&
              c.scheduler.max_queued_requests >= 1,
          "scheduler sizes >= 1");
    check(c.scheduler.kv_reservation == "paged" || c.scheduler.kv_reservation == "static", "kv_reservation");
    check(c.server.port >= 0 && c.server.port <= 65535, "server.port in [0, 65535]");
    check(c.server.max_body_bytes >= 1, "server.max_body_bytes >= 1");
    check(c.server.shutdown_deadline_s >= 0 && c.server.request_timeout_s >= 0 && c.server.step_timeout_s >= 0,
          "server durations >= 0");
  } catch (const tp::Error&) {
  }
  return 0;
}
