// The host memory a rank may use for its KV pool, checked before the pool is allocated: cache.memory_mb MiB
// per rank must fit in MemAvailable (/proc/meminfo, bytes available without swapping, after the weights are
// loaded) divided among the ranks on this node. Without the check a too-large pool ends the server in the
// kernel's OOM killer (or, larger still, in std::bad_alloc).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "common/config.h"

namespace tp {

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when absent or malformed.
std::optional<int64_t> parse_mem_available(const std::string& meminfo);
// MemAvailable of this machine, in bytes; nullopt where /proc/meminfo cannot be read.
std::optional<int64_t> mem_available_bytes();

// Throws ConfigError naming cache.memory_mb (file, line), its value and what is available when
// memory_mb MiB > available_bytes / ranks_on_node.
void check_kv_memory(const Config& cfg, int64_t available_bytes, int ranks_on_node);

}  // namespace tp
