// KV cache events in the shape of vLLM's KV events (vllm/distributed/kv_events.py), so KV-aware routers can
// consume ours: BlockStored (block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium),
// BlockRemoved (block_hashes, medium), AllBlocksCleared. Hashes are the BlockManager's chained block hashes
// (h_i = H(h_{i-1}, tokens of block i)); a hash is reported stored when the first block under it enters the
// prefix index and removed when the last one leaves (aliases of one prefix are one entry to a router).
// Plain values; the BlockManager records them (pure, no I/O), the engine publishes them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tp {

enum class KvEventKind { BlockStored, BlockRemoved, AllBlocksCleared };

struct KvEvent {
  KvEventKind kind = KvEventKind::BlockStored;
  std::vector<uint64_t> block_hashes;         // BlockStored, BlockRemoved
  std::optional<uint64_t> parent_block_hash;  // BlockStored: the previous block's hash; none for block 0
  std::vector<int32_t> token_ids;             // BlockStored: [block_hashes.size() x block_size]
  int32_t block_size = 0;                     // BlockStored
  std::optional<int64_t> lora_id;             // none: tpserve has no LoRA
  std::string medium = "CPU";                 // where the blocks live ("CPU" pools; "GPU" on the CUDA backend)
  bool operator==(const KvEvent&) const = default;
};

}  // namespace tp
