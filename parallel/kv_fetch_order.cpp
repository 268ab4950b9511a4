#include "parallel/kv_fetch_order.h"

#include <cstring>

#include "common/error.h"
#include "parallel/communicator.h"

namespace tp {
namespace {

struct Header {
  uint32_t magic, version;
  uint64_t fetch_id;
  int64_t timeout_ms;
  uint32_t n_ranks, n_blocks;
  uint64_t total_bytes;
  uint32_t checksum, reserved;
};
constexpr uint32_t kVersion = 1;
constexpr size_t kChecksumAt = offsetof(Header, checksum);

uint32_t fnv1a(std::span<const uint8_t> b) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i >= kChecksumAt && i < kChecksumAt + 4) continue;
    h = (h ^ b[i]) * 16777619u;
  }
  return h;
}

[[noreturn]] void bad(const std::string& why) { throw Error("KvFetchOrder: " + why); }

template <class T>
void put(std::vector<uint8_t>& out, const T* p, size_t n) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n * sizeof(T));
}

}  // namespace

std::vector<uint8_t> serialize(const KvFetchOrder& o) {
  const size_t n = o.holder_blocks.size();
  if (n == 0 || o.local_blocks.size() != n || o.chain_hashes.size() != n) bad("block lists of different or zero length");
  if (o.holder_addresses.empty()) bad("no holder address");
  if (o.timeout_ms <= 0) bad("timeout_ms <= 0");
  std::vector<uint8_t> out;
  Header h{kKvFetchOrderMagic, kVersion, o.fetch_id, o.timeout_ms, uint32_t(o.holder_addresses.size()), uint32_t(n), 0, 0, 0};
  put(out, &h, 1);
  for (const std::string& a : o.holder_addresses) {
    const uint32_t len = uint32_t(a.size());
    put(out, &len, 1);
    put(out, a.data(), a.size());
  }
  put(out, o.holder_blocks.data(), n);
  put(out, o.local_blocks.data(), n);
  put(out, o.chain_hashes.data(), n);
  if (out.size() > kMaxKvFetchOrderBytes) bad("exceeds kMaxKvFetchOrderBytes");
  const uint64_t total = out.size();
  std::memcpy(out.data() + offsetof(Header, total_bytes), &total, 8);
  const uint32_t sum = fnv1a(out);
  std::memcpy(out.data() + kChecksumAt, &sum, 4);
  return out;
}

KvFetchOrder deserialize_kv_fetch_order(std::span<const uint8_t> b) {
  Header h{};
  if (b.size() < sizeof h) bad("buffer of " + std::to_string(b.size()) + " bytes is shorter than its header");
  std::memcpy(&h, b.data(), sizeof h);
  if (h.magic != kKvFetchOrderMagic) bad("bad magic");
  if (h.version != kVersion) bad("version " + std::to_string(h.version) + " is not " + std::to_string(kVersion));
  if (h.total_bytes != b.size()) bad("total_bytes " + std::to_string(h.total_bytes) + " != buffer " + std::to_string(b.size()));
  if (h.checksum != fnv1a(b)) bad("checksum mismatch");
  if (h.reserved != 0) bad("reserved field is not 0");
  if (h.timeout_ms <= 0) bad("timeout_ms <= 0");
  if (h.n_ranks == 0 || h.n_blocks == 0) bad("no rank or no block");
  KvFetchOrder o;
  o.fetch_id = h.fetch_id;
  o.timeout_ms = h.timeout_ms;
  size_t at = sizeof h;
  for (uint32_t r = 0; r < h.n_ranks; ++r) {
    uint32_t len = 0;
    if (b.size() - at < 4) bad("address " + std::to_string(r) + " runs past the end");
    std::memcpy(&len, b.data() + at, 4);
    at += 4;
    if (b.size() - at < len) bad("address " + std::to_string(r) + " runs past the end");
    o.holder_addresses.emplace_back(reinterpret_cast<const char*>(b.data() + at), len);
    at += len;
  }
  const size_t n = h.n_blocks;
  if ((b.size() - at) != n * 16) bad("block lists: " + std::to_string(b.size() - at) + " bytes for " + std::to_string(n) + " blocks");
  o.holder_blocks.resize(n);
  o.local_blocks.resize(n);
  o.chain_hashes.resize(n);
  std::memcpy(o.holder_blocks.data(), b.data() + at, n * 4);
  std::memcpy(o.local_blocks.data(), b.data() + at + n * 4, n * 4);
  std::memcpy(o.chain_hashes.data(), b.data() + at + n * 8, n * 8);
  for (size_t i = 0; i < n; ++i)
    if (o.holder_blocks[i] < 0 || o.local_blocks[i] < 0) bad("block id < 0 at " + std::to_string(i));
  return o;
}

void broadcast_fetch_order(Communicator& comm, KvFetchOrder& order, int root) {
  std::vector<uint8_t> bytes;
  uint64_t size = 0;
  if (comm.rank() == root) {
    bytes = serialize(order);
    size = bytes.size();
  }
  comm.broadcast(&size, sizeof size, root);
  if (size < sizeof(Header) || size > kMaxKvFetchOrderBytes)
    throw Error("rank " + std::to_string(comm.rank()) + ": broadcast_fetch_order: root announced " + std::to_string(size) + " bytes");
  bytes.resize(size);
  comm.broadcast(bytes.data(), bytes.size(), root);
  if (comm.rank() != root) order = deserialize_kv_fetch_order(bytes);
}

}  // namespace tp
