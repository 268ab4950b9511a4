// The receiving replica's side of the HTTP exchange with a holder replica (issue 15, deliverable 3): asks the
// holder (POST {holder}/v1/kv/export with the prompt's token ids) which leading blocks it holds and where its
// ranks' UCX workers are, and releases the holder's pin afterwards (POST {holder}/v1/kv/release, from a thread of
// its own so the engine thread never waits on HTTP).
//
// Holder answer (api_handlers.cpp): {"pin_id", "block_size", "tp", "blocks": [n], "block_hashes": [n],
// "ranks": [{"tp_rank", "ucx_address"}] (tp entries, in rank order)}.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/kv_import.h"

namespace tp {

class KvFetchClient {
 public:
  using LogFn = std::function<void(const std::string&)>;
  // tp: this replica's TP degree (the holder's must equal it: rank t pulls from rank t). log: one line per import
  // (what happened, or why it fell back to recomputing); may be empty.
  KvFetchClient(int tp, LogFn log = {}, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  ~KvFetchClient();
  KvFetchClient(const KvFetchClient&) = delete;
  KvFetchClient& operator=(const KvFetchClient&) = delete;

  // Asks `holder` (a base URL, http://HOST:PORT) about `tokens`. Never throws for the holder's failures: the
  // KvImport then carries the error (the engine counts it and the prompt is recomputed). Throws InputError for a
  // URL that is not http://HOST:PORT (the request's fault: 400).
  std::shared_ptr<KvImport> prepare(const std::string& holder, const std::vector<int32_t>& tokens);

 private:
  void release_loop();

  int tp_;
  LogFn log_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, uint64_t>> releases_;  // (holder URL, pin id)
  bool stop_ = false;
  std::thread releaser_;
};

}  // namespace tp
