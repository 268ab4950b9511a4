#include "coordinator/router_index.h"

namespace tp {

void PrefixIndex::stored(int replica, const std::vector<uint64_t>& block_hashes) {
  for (const uint64_t h : block_hashes) {
    holders_[h].insert(replica);
    blocks_[replica].insert(h);
  }
}

void PrefixIndex::removed(int replica, const std::vector<uint64_t>& block_hashes) {
  auto b = blocks_.find(replica);
  if (b == blocks_.end()) return;
  for (const uint64_t h : block_hashes) {
    if (!b->second.erase(h)) continue;
    auto it = holders_.find(h);
    if (it == holders_.end()) continue;
    it->second.erase(replica);
    if (it->second.empty()) holders_.erase(it);
  }
}

void PrefixIndex::cleared(int replica) {
  auto b = blocks_.find(replica);
  if (b == blocks_.end()) return;
  const std::vector<uint64_t> hashes(b->second.begin(), b->second.end());
  removed(replica, hashes);
  blocks_.erase(replica);
}

int64_t PrefixIndex::overlap(int replica, const std::vector<uint64_t>& chain) const {
  const auto b = blocks_.find(replica);
  if (b == blocks_.end()) return 0;
  int64_t n = 0;
  for (const uint64_t h : chain) {
    if (!b->second.count(h)) break;
    ++n;
  }
  return n;
}

int64_t PrefixIndex::n_blocks(int replica) const {
  const auto b = blocks_.find(replica);
  return b == blocks_.end() ? 0 : int64_t(b->second.size());
}

int64_t PrefixIndex::n_holders(uint64_t hash) const {
  const auto it = holders_.find(hash);
  return it == holders_.end() ? 0 : int64_t(it->second.size());
}

}  // namespace tp
