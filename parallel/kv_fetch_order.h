// KvFetchOrder: the coordinator's order to every rank of a TP group to pull KV blocks from another replica
// (kvstore/kv_transfer.h), and KvFetchOutcome, what the group reports back. The leader broadcasts a StepPlan of
// kind FetchKv, then this order (two broadcasts: the size, then the bytes); every rank t pulls
// holder_blocks[i] from holder_addresses[t] into its local_blocks[i]; then one all-reduce says which ranks failed.
//
// Wire (little-endian): magic "TPKF", version, fetch_id, timeout_ms, n_ranks, n_blocks, total_bytes, checksum
// (FNV-1a 32 over every byte but itself); then per rank uint32 length + address bytes; then int32
// holder_blocks[n], int32 local_blocks[n], uint64 chain_hashes[n]. deserialize validates every count against the
// buffer and throws tp::Error naming the field.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tp {

class Communicator;

struct KvFetchOrder {
  uint64_t fetch_id = 0;
  int64_t timeout_ms = 5000;                  // per rank, > 0
  std::vector<std::string> holder_addresses;  // [tp] the holder's UCX worker address of each TP rank (hex)
  std::vector<int32_t> holder_blocks;         // [n] block ids in the holder's pool, >= 0
  std::vector<int32_t> local_blocks;          // [n] block ids in this replica's pool, >= 0
  std::vector<uint64_t> chain_hashes;         // [n] the chained hash of each block, verified by the coordinator
  bool operator==(const KvFetchOrder&) const = default;
};

struct KvFetchOutcome {
  bool ok = false;
  std::string error;          // !ok: the leader's own error, or which ranks failed
  int64_t bytes_per_rank = 0; // the leader's received block bytes
  double seconds = 0;         // the leader's fetch time (the slowest rank is waited for by the all-reduce)
};

inline constexpr uint32_t kKvFetchOrderMagic = 0x464b5054;  // "TPKF"
inline constexpr uint64_t kMaxKvFetchOrderBytes = uint64_t(1) << 28;

std::vector<uint8_t> serialize(const KvFetchOrder& order);
KvFetchOrder deserialize_kv_fetch_order(std::span<const uint8_t> bytes);
// Collective over `comm`: root sends `order`, the others receive it. Throws tp::Error on a malformed buffer.
void broadcast_fetch_order(Communicator& comm, KvFetchOrder& order, int root);

}  // namespace tp
