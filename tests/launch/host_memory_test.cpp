// The KV memory check: MemAvailable parsed from /proc/meminfo text, and cache.memory_mb refused (naming the
// setting, its line, the value and what is available per rank) when it does not fit.
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "common/error.h"
#include "launch/host_memory.h"

namespace tp {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(HostMemory, ParsesMemAvailable) {
  const std::string meminfo =
      "MemTotal:       24683520 kB\nMemFree:        20652032 kB\nMemAvailable:   23829504 kB\nBuffers: 1 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo), int64_t(23829504) * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: 12 MB\n"), std::nullopt);
}

TEST(HostMemory, ThisMachineHasSome) {
  const auto a = mem_available_bytes();
  ASSERT_TRUE(a.has_value()) << "/proc/meminfo has no MemAvailable";
  EXPECT_GT(*a, 0);
}

TEST(HostMemory, FitsWhenMemoryMbIsAtMostTheShareOfEachRank) {
  Config c;
  c.cache.memory_mb = 1000;
  EXPECT_NO_THROW(check_kv_memory(c, 1000 * kMiB, 1));
  EXPECT_NO_THROW(check_kv_memory(c, 2000 * kMiB, 2));
  EXPECT_THROW(check_kv_memory(c, 1000 * kMiB - 1, 1), ConfigError);
  EXPECT_THROW(check_kv_memory(c, 2000 * kMiB, 3), ConfigError);
}

TEST(HostMemory, TheRefusalNamesSettingLineValueAndAvailable) {
  const Config c = parse_config("cache:\n  block_size: 16\n  memory_mb: 900000\n", "big.yaml", "/");
  try {
    check_kv_memory(c, 24000 * kMiB, 2);
    ADD_FAILURE() << "900000 MiB accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "big.yaml: cache.memory_mb: 900000 MiB of KV cache per rank (line 3) does not fit: 24000 MiB "
                 "available on this node (MemAvailable) / 2 ranks on this node = 12000 MiB per rank; lower "
                 "cache.memory_mb");
  }
}

}  // namespace
}  // namespace tp
