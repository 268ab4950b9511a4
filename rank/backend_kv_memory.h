// A KV pool's memory (kvstore/kv_pool.h KvMemory) in a Backend's memory: on a GPU backend the paged KV pool
// lives in device memory, zero-filled at allocation, and block copies (copy-on-write) run on the backend's
// stream. kvstore knows no device; this adapter is the rank's.
#pragma once
#include <memory>

#include "kvstore/kv_pool.h"
#include "rank/backend.h"

namespace tp {

// The KvMemory of `backend` (kept alive by it): host_kv_memory() semantics on a host-memory backend.
std::shared_ptr<KvMemory> backend_kv_memory(std::shared_ptr<Backend> backend);
// Not owning: `backend` must outlive the pool. Null (host memory) for a host-memory backend.
std::shared_ptr<KvMemory> kv_memory_for(Backend& backend);

}  // namespace tp
