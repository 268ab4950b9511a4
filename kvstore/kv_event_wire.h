// KV events on the wire, exactly as vLLM's ZmqEventPublisher sends them (vllm/distributed/kv_events.py), so an
// external KV-aware router reads ours and ours reads vLLM's:
//   one ZeroMQ multipart message = [topic bytes, sequence number (8 bytes, big-endian), payload]
//   payload = msgpack of KVEventBatch, a msgspec array-like struct: [ts (float64 seconds since the epoch),
//             [event, ...]] plus data_parallel_rank as a third element when set;
//   event   = a tagged array-like struct, the tag (class name) first:
//             ["BlockStored", [hash, ...], parent_hash | nil, [token id, ...], block_size, lora_id | nil, medium | nil]
//             ["BlockRemoved", [hash, ...], medium | nil]
//             ["AllBlocksCleared"]
// Hashes are unsigned 64-bit integers (vLLM's ExternalBlockHash may also be bytes: decoding accepts up to 8 bytes,
// big-endian). Pure functions, no I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/kv_events.h"

namespace tp {

struct KvEventBatch {
  double ts = 0;                              // seconds since the Unix epoch
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;  // which replica of a dp group published it (none: not given)
  bool operator==(const KvEventBatch&) const = default;
};

// The msgpack payload of one batch.
std::string encode_kv_event_batch(const KvEventBatch& batch);
// Throws InputError naming the element that is malformed ("kv event batch: events[2][0]: unknown tag 'X'").
KvEventBatch decode_kv_event_batch(std::string_view payload);

// The 8-byte big-endian sequence frame and back (InputError unless exactly 8 bytes).
std::string encode_kv_event_seq(uint64_t seq);
uint64_t decode_kv_event_seq(std::string_view frame);

}  // namespace tp
