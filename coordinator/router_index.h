// The router's global prefix index: block hash -> the replicas holding that block, fed by the replicas' KV
// events (stored, removed, all cleared) and by the router itself (a replica marked down holds nothing).
// Hashes are the replicas' chained block hashes (h_i = H(h_{i-1}, tokens of block i)), so a hit on block i
// implies the whole prefix up to i.
// Expected blocks: the prompt blocks of a request the router has sent to a replica and that has not ended. The
// replica publishes them only as its prefill commits them (and the router sees them one event poll later), so
// without them a burst of requests sharing a prefix (a system prompt, a conversation's next turn sent before the
// previous events arrived) would look uncached everywhere and be spread over the replicas, each computing the
// prefix again. overlap() counts a block a replica holds or is expected to hold (SGLang's router inserts a
// request's prompt into its tree of a worker when it routes it, for the same reason); expected blocks are counted
// per request (expect/unexpect pairs) and are independent of the stored ones (cleared() keeps them: the requests
// in flight end and unexpect theirs).
// Pure data structure: no I/O, no clock; not thread-safe (one owner).
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
  // A request with these prompt blocks was sent to `replica` / has ended there (one unexpect per expect).
  void expect(int replica, const std::vector<uint64_t>& chain);
  void unexpect(int replica, const std::vector<uint64_t>& chain);  // counts never go below 0

  // Leading blocks of `chain` (a request's chained block hashes, block 0 first) that `replica` holds (and, with
  // `expected`, is expected to hold): the length of the longest prefix of the chain present on it.
  int64_t overlap(int replica, const std::vector<uint64_t>& chain, bool expected = true) const;
  int64_t n_blocks(int replica) const;    // blocks `replica` holds (stored, not expected)
  int64_t n_holders(uint64_t hash) const;  // replicas holding `hash`
  int64_t n_expected(int replica) const;  // distinct blocks expected on `replica`
  int64_t n_held_or_expected(int replica) const;  // distinct blocks stored or expected on `replica`

 private:
  std::unordered_map<uint64_t, std::set<int>> holders_;            // hash -> replicas
  std::unordered_map<int, std::unordered_set<uint64_t>> blocks_;   // replica -> hashes
  std::unordered_map<int, std::unordered_map<uint64_t, int64_t>> expected_;  // replica -> hash -> requests
};

}  // namespace tp
