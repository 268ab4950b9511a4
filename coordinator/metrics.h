// Prometheus metrics for GET /metrics: the engine's counters (EngineMetrics, snapshot after its latest step)
// plus per-request latency histograms observed by the HTTP layer. Names follow vLLM's (vllm:... ->
// tpserve:...) where a vLLM metric means the same thing. Text exposition format 0.0.4.
//
// Formulas (every time from RequestTimes, steady clock, in seconds):
//   time_to_first_token_seconds  = first_token - arrival                    (one observation per request)
//   inter_token_latency_seconds  = t(delivery k) - t(delivery k-1), k >= 2   (one per delivered token after the
//                                  first; a delivery of m tokens counts as m observations of interval / m)
//   e2e_request_latency_seconds  = last_token (or finish time) - arrival    (one per finished request)
// Thread-safe: observe_* from any thread, render() from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/engine.h"

namespace tp {

// A cumulative Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v, int64_t n = 1);
  // "# HELP/# TYPE" lines then name_bucket{le=...}, name_sum, name_count.
  std::string render(const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound (not cumulative); the last one is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void observe_ttft(double seconds);
  void observe_itl(double seconds, int64_t n_tokens);
  // A finished request: its e2e latency and finish reason ("stop", "length", "abort", "error").
  void observe_finished(double e2e_seconds, const std::string& finish_reason);
  // An HTTP response sent, by status code.
  void observe_http(int status);

  // The whole exposition text: engine gauges and counters from `m`, then the histograms.
  std::string render(const EngineMetrics& m) const;

 private:
  const std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_;
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<int, int64_t> http_by_status_;
};

}  // namespace tp
