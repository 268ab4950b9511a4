// KvFetchOrder wire format: round trip, and every malformed buffer refused with a named error.
#include <gtest/gtest.h>

#include "common/error.h"
#include "parallel/kv_fetch_order.h"

namespace tp {
namespace {

KvFetchOrder sample() {
  KvFetchOrder o;
  o.fetch_id = 42;
  o.timeout_ms = 1500;
  o.holder_addresses = {"00ff10", "abcdef0123"};
  o.holder_blocks = {3, 9, 0};
  o.local_blocks = {1, 2, 7};
  o.chain_hashes = {0xffffffffffffffffULL, 5, 0x9e3779b97f4a7c15ULL};
  return o;
}

TEST(KvFetchOrder, RoundTrips) {
  const KvFetchOrder o = sample();
  EXPECT_EQ(deserialize_kv_fetch_order(serialize(o)), o);
}

TEST(KvFetchOrder, RefusesMalformed) {
  const std::vector<uint8_t> good = serialize(sample());
  for (size_t i = 0; i < good.size(); ++i) {  // every single corrupted byte
    std::vector<uint8_t> b = good;
    b[i] ^= 0x41;
    EXPECT_THROW(deserialize_kv_fetch_order(b), Error) << "byte " << i;
  }
  std::vector<uint8_t> shorter(good.begin(), good.end() - 1);
  EXPECT_THROW(deserialize_kv_fetch_order(shorter), Error);
  EXPECT_THROW(deserialize_kv_fetch_order(std::vector<uint8_t>(8, 0)), Error);
  KvFetchOrder o = sample();
  o.local_blocks.pop_back();
  EXPECT_THROW(serialize(o), Error);
  o = sample();
  o.holder_addresses.clear();
  EXPECT_THROW(serialize(o), Error);
  o = sample();
  o.timeout_ms = 0;
  EXPECT_THROW(serialize(o), Error);
}

}  // namespace
}  // namespace tp
