// The router's health checks: every interval_s, GET /health of every joined replica (in parallel, each within
// timeout_s). A 200 is a pass; anything else, or no answer, a failure; `unhealthy_after` failures in a row mark
// it down (RouterReplicas::health), so a replica that stops answering is down within
// unhealthy_after x (interval_s + timeout_s) — 2 x (1 + 1.5) = 5 s by default. A replica coming up is asked
// GET /kv_events (where it publishes its KV events); each pass also reads its KV usage from GET /metrics
// (vllm:kv_cache_usage_perc or tpserve:kv_cache_usage_perc; 0 when absent). Transitions are logged.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "coordinator/router_replicas.h"

namespace tp {

struct RouterHealthOptions {
  double interval_s = 1.0;
  double timeout_s = 1.5;
  int64_t unhealthy_after = 2;
};

class RouterHealth {
 public:
  using LogFn = std::function<void(const std::string&)>;
  RouterHealth(RouterReplicas& replicas, RouterHealthOptions opt, LogFn log);
  ~RouterHealth() { stop(); }
  RouterHealth(const RouterHealth&) = delete;
  RouterHealth& operator=(const RouterHealth&) = delete;

  void check_all();  // one round, now (also what the thread runs)
  void start();      // the periodic thread
  void stop();

 private:
  void check(const ReplicaView& r);

  RouterReplicas& replicas_;
  const RouterHealthOptions opt_;
  LogFn log_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// The value of the first sample of metric `name` (no labels or any labels) in Prometheus text; nullopt-like
// -1 when absent.
double prometheus_value(const std::string& text, const std::string& name);

}  // namespace tp
