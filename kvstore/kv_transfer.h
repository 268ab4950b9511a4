// KV block transfer between replicas over UCX (ucp tag messages; tcp and shared-memory transports, RDMA where
// present). Rank t of replica A pulls blocks from rank t of replica B: both hold the same head partition, so a
// block moves byte for byte, with no resharding (DESIGN §1).
//
// One KvTransferAgent per rank. It serves its own KvPool to remote fetchers on a progress thread (holder side)
// and pulls blocks of remote pools into its pool on the caller's thread (receiver side), each on its own ucp
// worker. The pool must be host memory. The holder's coordinator pins the blocks it offers (refcount), so the
// served blocks are full, committed and read-only while they are read; other blocks may be written meanwhile.
//
// Wire (host byte order, little-endian only):
//   request  tag kKvRequestTag:  RequestHeader {magic "KVRQ", version, request_id, reply_tag, layout fingerprint,
//            n_blocks, address_bytes} + the fetcher's worker address + int32 holder block ids [n] + uint64 chain
//            hashes [n]
//   reply    tag reply_tag:      ReplyHeader {magic "KVRP", status, request_id, n_blocks, block_bytes,
//            error_bytes} + uint64 checksums [n] + error text + packed blocks [n, block_bytes]
// A packed block is the block's bytes in every layer: K layer 0, V layer 0, K layer 1, ... (each
// KvBlockLayout::block_bytes(), block scales included), block_bytes = KvPoolShape::block_bytes().
// checksum_i = block_checksum(chain_hash_i, packed block i): computed by the holder over what it read from its
// pool, checked by the fetcher over what arrived, with the chain hash the fetcher's coordinator verified against
// its own token ids — a block corrupted in transit, or served for another chain hash, is rejected.
// The layout fingerprint (pool_fingerprint) must match: dtype, block size, local KV heads, head dim, layers.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "common/error.h"
#include "kvstore/kv_pool.h"

namespace tp {

// A fetch that failed: unreachable or dead holder, timeout, refused request, a checksum that does not match.
// The local blocks named by the fetch then hold unspecified bytes (the caller must not commit them).
struct KvTransferError : Error {
  using Error::Error;
};

// Hash of one packed block bound to its chain hash (64-bit words, multiply-xorshift mixing; not cryptographic).
uint64_t block_checksum(uint64_t chain_hash, std::span<const uint8_t> bytes);
// Identifies a pool layout: equal for two pools whose blocks can be copied byte for byte.
uint64_t pool_fingerprint(const KvPoolShape& shape);
// Copies blocks[i] of every layer, K and V, into out[i * block_bytes, (i + 1) * block_bytes) (see above).
// Throws Error for a block outside the pool or an output of the wrong size.
void pack_blocks(KvPool& pool, std::span<const int32_t> blocks, std::span<uint8_t> out);
// The inverse: writes in[i * block_bytes ...] into blocks[i] of every layer.
void unpack_blocks(KvPool& pool, std::span<const int32_t> blocks, std::span<const uint8_t> in);

struct KvTransferOptions {
  // Fault injection for tests: the holder flips one byte of every reply's first block after checksumming it.
  bool corrupt_replies_for_test = false;
};

// What one fetch did.
struct KvFetchStats {
  int64_t n_blocks = 0;
  int64_t bytes = 0;    // packed block bytes received
  double seconds = 0;   // request sent to blocks written into the pool
};

class KvTransferAgent {
 public:
  // Creates the ucp context and the two workers and starts the holder's progress thread. Throws
  // KvTransferError when UCX cannot start, Error when the pool is not host memory.
  explicit KvTransferAgent(KvPool& pool, KvTransferOptions options = {});
  ~KvTransferAgent();
  KvTransferAgent(const KvTransferAgent&) = delete;
  KvTransferAgent& operator=(const KvTransferAgent&) = delete;

  // The holder worker's address, hex-encoded (what a fetcher passes to fetch()).
  const std::string& address() const { return address_hex_; }

  // Pulls holder_blocks[i] of the agent at `holder_address` into local_blocks[i] of this pool and checks each
  // against chain_hashes[i] (all three the same length, >= 1). Blocks until done or `timeout`. Throws
  // KvTransferError naming the failure (a bad address, the holder unreachable or dead, a refused request, a
  // checksum mismatch naming the block, the timeout; its own address). One fetch at a time per agent (serialized).
  KvFetchStats fetch(const std::string& holder_address, std::span<const int32_t> holder_blocks,
                     std::span<const int32_t> local_blocks, std::span<const uint64_t> chain_hashes,
                     std::chrono::milliseconds timeout);

  // Requests served since start (tests).
  int64_t n_served() const { return n_served_.load(); }

 private:
  struct Ucx;
  void serve_loop();

  KvPool& pool_;
  KvTransferOptions options_;
  std::unique_ptr<Ucx> ucx_;
  std::string address_hex_;
  std::mutex fetch_mu_;
  uint64_t next_request_ = 1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> n_served_{0};
  std::thread server_;
};

}  // namespace tp
