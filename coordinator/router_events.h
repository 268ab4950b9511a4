// The router's KV-event feed: one thread holding a KvEventSubscriber, connected to every replica that is up and
// publishes (RouterReplicas' events_endpoint, resubscribed when a replica comes back as a new generation), and
// applying each batch to the prefix index. Batches are polled every 50 ms at most.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "coordinator/router_metrics.h"
#include "coordinator/router_replicas.h"

namespace tp {

class RouterEvents {
 public:
  using LogFn = std::function<void(const std::string&)>;
  RouterEvents(RouterReplicas& replicas, RouterMetrics& metrics, LogFn log)
      : replicas_(replicas), metrics_(metrics), log_(std::move(log)) {}
  ~RouterEvents() { stop(); }
  RouterEvents(const RouterEvents&) = delete;
  RouterEvents& operator=(const RouterEvents&) = delete;

  void start();
  void stop();

 private:
  RouterReplicas& replicas_;
  RouterMetrics& metrics_;
  LogFn log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tp
