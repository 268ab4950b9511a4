// KV block transfer over UCX on loopback: a holder pool and a fetcher pool, each with its own KvTransferAgent
// (two ucp contexts; the holder served by its progress thread, the fetcher pulling on the test thread), and the
// same between two processes (fork). Real UCX, the transports it picks here (shared memory, tcp).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "kvstore/kv_transfer.h"

namespace tp {
namespace {

KvPoolShape small_shape(KvDType dtype = KvDType::BF16) {
  KvPoolShape s;
  s.n_layers = 3;
  s.n_blocks = 24;
  s.block_size = 16;
  s.n_kv_heads = 2;
  s.head_dim = 32;
  s.dtype = dtype;
  return s;
}

// Every byte of every block of every layer from a seeded generator.
void fill_random(KvPool& pool, uint32_t seed) {
  std::mt19937 rng(seed);
  const KvPoolShape& s = pool.shape();
  const int64_t bytes = s.n_blocks * s.layout().block_bytes();
  for (int64_t l = 0; l < s.n_layers; ++l)
    for (uint8_t* p : {pool.k(l).blocks, pool.v(l).blocks})
      for (int64_t i = 0; i < bytes; ++i) p[i] = uint8_t(rng());
}

bool block_equal(KvPool& a, int32_t ba, KvPool& b, int32_t bb) {
  const int64_t n = a.shape().layout().block_bytes();
  for (int64_t l = 0; l < a.shape().n_layers; ++l) {
    if (std::memcmp(a.k(l).block(ba), b.k(l).block(bb), size_t(n)) != 0) return false;
    if (std::memcmp(a.v(l).block(ba), b.v(l).block(bb), size_t(n)) != 0) return false;
  }
  return true;
}

constexpr auto kTimeout = std::chrono::milliseconds(5000);

TEST(KvTransfer, PackUnpackRoundTrip) {
  KvPool a(small_shape()), b(small_shape());
  fill_random(a, 1);
  const std::vector<int32_t> from{5, 0, 23}, to{1, 2, 3};
  std::vector<uint8_t> buf(3 * size_t(a.shape().block_bytes()));
  pack_blocks(a, from, buf);
  unpack_blocks(b, to, buf);
  for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(block_equal(a, from[i], b, to[i])) << i;
  EXPECT_THROW(pack_blocks(a, std::vector<int32_t>{24}, std::span<uint8_t>(buf.data(), size_t(a.shape().block_bytes()))), Error);
}

TEST(KvTransfer, ChecksumSeesEveryWordAndTheChainHash) {
  std::vector<uint8_t> bytes(4096 + 3);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7);
  const uint64_t h = block_checksum(42, bytes);
  EXPECT_NE(h, block_checksum(43, bytes));
  for (size_t at : {size_t(0), size_t(777), size_t(4095), size_t(4098)}) {
    bytes[at] ^= 1;
    EXPECT_NE(h, block_checksum(42, bytes)) << at;
    bytes[at] ^= 1;
  }
  EXPECT_EQ(h, block_checksum(42, bytes));
}

TEST(KvTransfer, FetchCopiesBlocksBytesEqual) {
  KvPool holder_pool(small_shape()), fetcher_pool(small_shape());
  fill_random(holder_pool, 7);
  KvTransferAgent holder(holder_pool), fetcher(fetcher_pool);
  ASSERT_FALSE(holder.address().empty());
  const std::vector<int32_t> from{3, 4, 5, 17}, to{10, 0, 11, 12};
  const std::vector<uint64_t> hashes{101, 202, 303, 404};
  const KvFetchStats st = fetcher.fetch(holder.address(), from, to, hashes, kTimeout);
  EXPECT_EQ(st.n_blocks, 4);
  EXPECT_EQ(st.bytes, 4 * holder_pool.shape().block_bytes());
  for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(block_equal(holder_pool, from[i], fetcher_pool, to[i])) << i;
  // Untouched blocks stay zero.
  std::vector<uint8_t> zero(size_t(fetcher_pool.shape().layout().block_bytes()), 0);
  EXPECT_EQ(std::memcmp(fetcher_pool.k(0).block(1), zero.data(), zero.size()), 0);
  // A second fetch over the holder's cached endpoint.
  fetcher.fetch(holder.address(), std::vector<int32_t>{0}, std::vector<int32_t>{1}, std::vector<uint64_t>{9}, kTimeout);
  EXPECT_TRUE(block_equal(holder_pool, 0, fetcher_pool, 1));
  EXPECT_EQ(holder.n_served(), 2);
}

// SmolLM2-135M's block (30 layers, 3 KV heads, head_dim 64, bf16, 16 tokens: 368,640 bytes), 32 at a time: a reply
// large enough for UCX's rendezvous protocol, repeated over the same endpoints (the second one used to fail).
TEST(KvTransfer, LargeRepliesRepeat) {
  KvPoolShape s = small_shape();
  s.n_layers = 30;
  s.n_kv_heads = 3;
  s.head_dim = 64;
  s.n_blocks = 40;
  KvPool holder_pool(s), fetcher_pool(s);
  fill_random(holder_pool, 11);
  KvTransferAgent holder(holder_pool), fetcher(fetcher_pool);
  std::vector<int32_t> from(32), to(32);
  for (int32_t i = 0; i < 32; ++i) from[size_t(i)] = i, to[size_t(i)] = 39 - i;
  for (int run = 0; run < 3; ++run) {
    const KvFetchStats st = fetcher.fetch(holder.address(), from, to, std::vector<uint64_t>(32, 3), kTimeout);
    EXPECT_EQ(st.bytes, 32 * 368640) << run;
  }
  for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(block_equal(holder_pool, from[i], fetcher_pool, to[i])) << i;
}

TEST(KvTransfer, CorruptedBlockIsRejected) {
  KvPool holder_pool(small_shape()), fetcher_pool(small_shape());
  fill_random(holder_pool, 8);
  KvTransferOptions bad;
  bad.corrupt_replies_for_test = true;
  KvTransferAgent holder(holder_pool, bad), fetcher(fetcher_pool);
  try {
    fetcher.fetch(holder.address(), std::vector<int32_t>{2, 3}, std::vector<int32_t>{0, 1},
                  std::vector<uint64_t>{1, 2}, kTimeout);
    FAIL() << "a corrupted block was accepted";
  } catch (const KvTransferError& e) {
    EXPECT_NE(std::string(e.what()).find("block 0 (holder block 2) fails its checksum"), std::string::npos) << e.what();
  }
}

TEST(KvTransfer, RefusalsNameTheProblem) {
  KvPool holder_pool(small_shape()), fetcher_pool(small_shape(KvDType::F32));
  KvTransferAgent holder(holder_pool), fetcher(fetcher_pool);
  try {
    fetcher.fetch(holder.address(), std::vector<int32_t>{0}, std::vector<int32_t>{0}, std::vector<uint64_t>{1}, kTimeout);
    FAIL() << "layouts differ";
  } catch (const KvTransferError& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool layouts differ"), std::string::npos) << e.what();
  }
  KvPool same_pool(small_shape());
  KvTransferAgent same(same_pool);
  try {
    same.fetch(holder.address(), std::vector<int32_t>{99}, std::vector<int32_t>{0}, std::vector<uint64_t>{1}, kTimeout);
    FAIL() << "holder block out of range";
  } catch (const KvTransferError& e) {
    EXPECT_NE(std::string(e.what()).find("block 99 is outside the holder's pool"), std::string::npos) << e.what();
  }
  // An agent does not fetch from itself (its two workers share one context: refused, not hung).
  EXPECT_THROW(same.fetch(same.address(), std::vector<int32_t>{0}, std::vector<int32_t>{1}, std::vector<uint64_t>{1},
                          kTimeout),
               KvTransferError);
  EXPECT_THROW(same.fetch("zz", std::vector<int32_t>{0}, std::vector<int32_t>{0}, std::vector<uint64_t>{1}, kTimeout),
               KvTransferError);
  EXPECT_THROW(same.fetch(holder.address(), std::vector<int32_t>{0}, std::vector<int32_t>{0, 1}, std::vector<uint64_t>{1},
                          kTimeout),
               KvTransferError);
}

TEST(KvTransfer, DeadHolderFailsWithinTheTimeout) {
  KvPool fetcher_pool(small_shape());
  KvTransferAgent fetcher(fetcher_pool);
  std::string dead_address;
  {
    KvPool p(small_shape());
    KvTransferAgent gone(p);
    dead_address = gone.address();
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(fetcher.fetch(dead_address, std::vector<int32_t>{0}, std::vector<int32_t>{0}, std::vector<uint64_t>{1},
                             std::chrono::milliseconds(1500)),
               KvTransferError);
  // Bound: the 1.5 s timeout plus teardown.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// Holder and fetcher in two processes: the child holds a pool and serves until the parent has fetched.
TEST(KvTransfer, BetweenTwoProcesses) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    KvPool pool(small_shape());
    fill_random(pool, 99);
    KvTransferAgent agent(pool);
    const std::string& a = agent.address();
    const uint32_t len = uint32_t(a.size());
    if (write(to_parent[1], &len, 4) != 4 || write(to_parent[1], a.data(), len) != ssize_t(len)) _exit(2);
    char done = 0;
    if (read(to_child[0], &done, 1) != 1) _exit(3);
    _exit(agent.n_served() == 1 ? 0 : 4);
  }
  close(to_parent[1]);
  close(to_child[0]);
  uint32_t len = 0;
  ASSERT_EQ(read(to_parent[0], &len, 4), 4);
  std::string address(len, '\0');
  size_t got = 0;
  while (got < len) {
    const ssize_t r = read(to_parent[0], address.data() + got, len - got);
    ASSERT_GT(r, 0);
    got += size_t(r);
  }
  KvPool mine(small_shape()), expect(small_shape());
  fill_random(expect, 99);
  KvTransferAgent fetcher(mine);
  const std::vector<int32_t> from{0, 9, 23}, to{4, 5, 6};
  fetcher.fetch(address, from, to, std::vector<uint64_t>{1, 2, 3}, kTimeout);
  for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(block_equal(expect, from[i], mine, to[i])) << i;
  const char done = 1;
  ASSERT_EQ(write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace tp
