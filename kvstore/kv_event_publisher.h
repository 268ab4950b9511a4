// Publishes KV event batches over a ZeroMQ PUB socket in vLLM's wire shape (kvstore/kv_event_wire.h): one
// multipart message [topic, seq (8 bytes big-endian, 0, 1, 2, ...), msgpack KVEventBatch] per publish().
// PUB drops messages when no subscriber is connected or a subscriber's queue is full (high-water mark 100k
// messages), as vLLM's publisher does; a subscriber sees a gap in seq and can resynchronize.
// Not thread-safe: one thread publishes (the engine thread).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvstore/kv_event_wire.h"

namespace tp {

class KvEventPublisher {
 public:
  // Binds `endpoint` ("tcp://127.0.0.1:*": any free port); throws InputError naming the endpoint and ZeroMQ's
  // error when it cannot.
  KvEventPublisher(const std::string& endpoint, std::string topic);
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The endpoint actually bound, with its port ("tcp://127.0.0.1:41235"), for subscribers to connect to.
  const std::string& endpoint() const { return endpoint_; }
  // Sends one batch of `events` stamped with the current time (nothing when `events` is empty). Never blocks.
  void publish(const std::vector<KvEvent>& events);
  uint64_t n_published() const { return seq_; }  // batches sent so far

 private:
  void* ctx_ = nullptr;
  void* sock_ = nullptr;
  std::string endpoint_, topic_;
  uint64_t seq_ = 0;
};

}  // namespace tp
