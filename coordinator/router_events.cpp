#include "coordinator/router_events.h"

#include <map>

#include "kvstore/kv_event_subscriber.h"

namespace tp {

void RouterEvents::start() {
  thread_ = std::thread([this] {
    KvEventSubscriber sub;
    std::map<int, std::pair<int64_t, std::string>> subscribed;  // replica -> (generation, endpoint)
    int64_t malformed_logged = 0;
    while (!stop_.load()) {
      std::map<int, int64_t> generation;
      for (const ReplicaView& r : replicas_.snapshot()) {
        const bool want = r.joined && r.up && !r.events_endpoint.empty();
        auto it = subscribed.find(r.id);
        const bool have = it != subscribed.end() && it->second.first == r.generation;
        if (want && !have) {
          try {
            sub.connect(r.id, r.events_endpoint);
            subscribed[r.id] = {r.generation, r.events_endpoint};
          } catch (const std::exception& e) {
            log_(std::string("kv events: ") + e.what());
          }
        } else if (!want && it != subscribed.end()) {
          sub.disconnect(r.id);
          subscribed.erase(it);
        }
        generation[r.id] = r.generation;
      }
      const std::vector<ReceivedKvBatch> got = sub.poll(50);
      int64_t gaps = 0;
      for (const ReceivedKvBatch& b : got) {
        gaps += b.gap;
        replicas_.apply(b.key, generation[b.key], b.batch);
      }
      metrics_.kv_batches(int64_t(got.size()), gaps, sub.n_malformed());
      if (sub.n_malformed() > malformed_logged) {
        log_("kv events: a malformed message was skipped: " + sub.last_error());
        malformed_logged = sub.n_malformed();
      }
    }
  });
}

void RouterEvents::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace tp
