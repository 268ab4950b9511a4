// Plain values of the KV block exchange between replicas (issue 15 deliverable 3), as the coordinator sees it:
//   holder:   KvExport — the leading cached blocks of a prompt it pinned for a fetcher (Engine::export_kv);
//   receiver: KvImport — what a request brings from the holder's answer (coordinator/kv_fetch_client.h) for the
//             engine to fetch before the request is scheduled (Engine, coordinator/engine_kv.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tp {

struct KvExport {
  uint64_t pin_id = 0;                // 0: nothing pinned (no leading block cached)
  int32_t block_size = 0;
  std::vector<int32_t> blocks;        // [n] the holder's block ids of the prompt's blocks 0 .. n-1
  std::vector<uint64_t> block_hashes; // [n] their chained hashes h_i = H(h_{i-1}, tokens of block i)
};

struct KvImport {
  // Non-empty: asking the holder already failed (unreachable, bad answer); the engine counts a failure and the
  // request recomputes its prompt. The fields below are then unused.
  std::string error;
  std::string holder;                          // the holder's base URL (logs)
  int32_t block_size = 0;
  std::vector<std::string> holder_addresses;   // [holder tp] UCX worker address of each holder rank
  std::vector<int32_t> holder_blocks;          // [n] holder block ids of the prompt's blocks 0 .. n-1
  std::vector<uint64_t> block_hashes;          // [n] the holder's chained hashes of those blocks
  int64_t timeout_ms = 5000;                   // per fetch
  // The holder keeps the blocks pinned until about then (its answer's pin_ms after the answer arrived). The
  // engine does not start a fetch that could outlast it: unpinned blocks may be evicted and rewritten.
  std::chrono::steady_clock::time_point pinned_until{};
  // Called once on the engine thread after the fetch (or the decision not to fetch): ok = blocks imported; what
  // happened in words (a failure's reason, or the cost figures). Releases the holder's pin and logs; must not
  // block (the release goes out asynchronously).
  std::function<void(bool ok, const std::string& what)> on_done;
};

}  // namespace tp
