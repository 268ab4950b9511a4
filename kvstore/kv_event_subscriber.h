// Receives KV event batches from any number of publishers (KvEventPublisher, or vLLM's ZmqEventPublisher) over
// one ZeroMQ SUB socket per publisher. Each publisher is named by a caller's key (the router: a replica index).
// Malformed messages are counted and skipped, never thrown out of poll(). Not thread-safe: one thread owns it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvstore/kv_event_wire.h"

namespace tp {

struct ReceivedKvBatch {
  int key = 0;          // the publisher's key given to connect()
  uint64_t seq = 0;     // its sequence number
  bool gap = false;     // seq skipped numbers since the previous batch from this publisher (messages were lost)
  KvEventBatch batch;
};

class KvEventSubscriber {
 public:
  KvEventSubscriber();
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Subscribes to `endpoint` under `key` (replacing what `key` had); topic "" takes every message. Throws
  // InputError naming the endpoint when ZeroMQ refuses it.
  void connect(int key, const std::string& endpoint, const std::string& topic = "");
  void disconnect(int key);
  bool connected(int key) const { return socks_.count(key) != 0; }
  // Waits up to timeout_ms for messages, then returns every batch already queued (possibly none).
  std::vector<ReceivedKvBatch> poll(int timeout_ms);
  int64_t n_malformed() const { return n_malformed_; }
  // The last malformed message's error, for a log line.
  const std::string& last_error() const { return last_error_; }

 private:
  struct Sub {
    void* sock = nullptr;
    std::string endpoint;
    bool seen = false;
    uint64_t last_seq = 0;
  };
  void* ctx_ = nullptr;
  std::map<int, Sub> socks_;
  int64_t n_malformed_ = 0;
  std::string last_error_;
};

}  // namespace tp
