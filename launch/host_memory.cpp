#include "launch/host_memory.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace tp {

std::optional<int64_t> parse_mem_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = -1;
    std::string unit;
    if (!(fields >> kib >> unit) || kib < 0 || unit != "kB") return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_mem_available(ss.str());
}

void check_kv_memory(const Config& cfg, int64_t available_bytes, int ranks_on_node) {
  constexpr int64_t kMiB = int64_t(1) << 20;
  const int64_t ranks = ranks_on_node > 0 ? ranks_on_node : 1;
  const int64_t per_rank_mib = available_bytes / ranks / kMiB;
  if (cfg.cache.memory_mb <= per_rank_mib) return;
  std::string avail = std::to_string(available_bytes / kMiB) + " MiB available on this node (MemAvailable)";
  if (ranks > 1) avail += " / " + std::to_string(ranks) + " ranks on this node = " + std::to_string(per_rank_mib) + " MiB per rank";
  throw ConfigError(cfg.source, "cache.memory_mb",
                    std::to_string(cfg.cache.memory_mb) + " MiB of KV cache per rank" + cfg.line_of("cache.memory_mb") +
                        " does not fit: " + avail + "; lower cache.memory_mb");
}

}  // namespace tp
