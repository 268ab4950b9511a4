// The router's global prefix index: block hash -> the replicas holding that block, fed by the replicas' KV
// events (stored, removed, all cleared) and by the router itself (a replica marked down holds nothing).
// Hashes are the replicas' chained block hashes (h_i = H(h_{i-1}, tokens of block i)), so a hit on block i
// implies the whole prefix up to i. Pure data structure: no I/O, no clock; not thread-safe (one owner).
#pragma once
#include <cstdint>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tp {

class PrefixIndex {
 public:
  void stored(int replica, const std::vector<uint64_t>& block_hashes);
  void removed(int replica, const std::vector<uint64_t>& block_hashes);  // unknown hashes are ignored
  void cleared(int replica);  // AllBlocksCleared, or the replica went down

  // Leading blocks of `chain` (a request's chained block hashes, block 0 first) that `replica` holds: the
  // length of the longest prefix of the chain present on it.
  int64_t overlap(int replica, const std::vector<uint64_t>& chain) const;
  int64_t n_blocks(int replica) const;    // blocks `replica` holds
  int64_t n_holders(uint64_t hash) const;  // replicas holding `hash`

 private:
  std::unordered_map<uint64_t, std::set<int>> holders_;            // hash -> replicas
  std::unordered_map<int, std::unordered_set<uint64_t>> blocks_;   // replica -> hashes
};

}  // namespace tp
