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

void PrefixIndex::expect(int replica, const std::vector<uint64_t>& chain) {
  if (chain.empty()) return;
  auto& e = expected_[replica];
  for (const uint64_t h : chain) ++e[h];
}

void PrefixIndex::unexpect(int replica, const std::vector<uint64_t>& chain) {
  auto e = expected_.find(replica);
  if (e == expected_.end()) return;
  for (const uint64_t h : chain) {
    auto it = e->second.find(h);
    if (it != e->second.end() && --it->second <= 0) e->second.erase(it);
  }
  if (e->second.empty()) expected_.erase(e);
}

int64_t PrefixIndex::overlap(int replica, const std::vector<uint64_t>& chain, bool expected) const {
  const auto b = blocks_.find(replica);
  const auto e = expected ? expected_.find(replica) : expected_.end();
  int64_t n = 0;
  for (const uint64_t h : chain) {
    const bool held = (b != blocks_.end() && b->second.count(h)) || (e != expected_.end() && e->second.count(h));
    if (!held) break;
    ++n;
  }
  return n;
}

int64_t PrefixIndex::n_expected(int replica) const {
  const auto e = expected_.find(replica);
  return e == expected_.end() ? 0 : int64_t(e->second.size());
}

int64_t PrefixIndex::n_blocks(int replica) const {
  const auto b = blocks_.find(replica);
  return b == blocks_.end() ? 0 : int64_t(b->second.size());
}

int64_t PrefixIndex::n_holders(uint64_t hash) const {
  const auto it = holders_.find(hash);
  return it == holders_.end() ? 0 : int64_t(it->second.size());
}

int64_t PrefixIndex::n_held_or_expected(int replica) const {
  int64_t n = n_blocks(replica);
  const auto e = expected_.find(replica);
  if (e == expected_.end()) return n;
  const auto b = blocks_.find(replica);
  for (const auto& [h, count] : e->second) n += b == blocks_.end() || !b->second.count(h);
  return n;
}

}  // namespace tp
