#include "coordinator/metrics.h"

#include <cstdio>
#include <utility>

namespace tp {
namespace {

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void line(std::string& out, const std::string& name, const std::string& type, const std::string& help,
          const std::string& labels, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + "{" + labels + "} " + fmt(value) + "\n";
}

const std::vector<double> kLatencyBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                            0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBounds = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                        0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, int64_t n) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i] += n;
  sum_ += v * double(n);
  count_ += n;
}

std::string Histogram::render(const std::string& name, const std::string& help, const std::string& labels) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? fmt(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + fmt(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
  return out;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)), ttft_(kLatencyBounds), itl_(kItlBounds), e2e_(kLatencyBounds) {}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}

void ServerMetrics::observe_itl(double s, int64_t n) {
  std::lock_guard lk(mu_);
  itl_.observe(s, n);
}

void ServerMetrics::observe_finished(double e2e, const std::string& reason) {
  std::lock_guard lk(mu_);
  e2e_.observe(e2e);
  ++finished_by_reason_[reason];
}

void ServerMetrics::observe_http(int status) {
  std::lock_guard lk(mu_);
  ++http_by_status_[status];
}

std::string ServerMetrics::render(const EngineMetrics& m) const {
  const std::string lb = "model_name=\"" + model_name_ + "\"";
  std::string out;
  // Gauges, as of the engine's latest step.
  line(out, "tpserve:num_requests_running", "gauge", "Requests in the running batch (scheduler running list).", lb,
       double(m.n_running));
  line(out, "tpserve:num_requests_waiting", "gauge",
       "Requests waiting: the scheduler queue plus submitted but not yet seen by a step.", lb, double(m.n_waiting));
  line(out, "tpserve:kv_cache_usage_perc", "gauge",
       "KV-cache usage, 0..1 = n_blocks_in_use / n_blocks (blocks held by running sequences).", lb, m.kv_usage);
  line(out, "tpserve:kv_cache_blocks_total", "gauge", "KV blocks in the pool (per rank; every rank has as many).",
       lb, double(m.n_blocks));
  // Counters since start.
  line(out, "tpserve:prefix_cache_queries_total", "counter",
       "Prompt tokens looked up in the prefix cache (per allocation, readmissions included).", lb,
       double(m.prefix_query_tokens));
  line(out, "tpserve:prefix_cache_hits_total", "counter",
       "Prompt tokens found in the prefix cache; hit rate = hits / queries.", lb, double(m.prefix_hit_tokens));
  line(out, "tpserve:prompt_tokens_total", "counter",
       "Sum of prompt lengths over admitted requests (once per request).", lb, double(m.n_prompt_tokens));
  line(out, "tpserve:generation_tokens_total", "counter", "Generated tokens delivered to requests.", lb,
       double(m.n_generation_tokens));
  line(out, "tpserve:computed_tokens_total", "counter",
       "Tokens run through the model: prefill + decode, recomputation after preemption included.", lb,
       double(m.n_computed_tokens));
  line(out, "tpserve:num_preemptions_total", "counter", "Sequences preempted (blocks freed, recomputed later).", lb,
       double(m.n_preemptions));
  line(out, "tpserve:engine_steps_total", "counter", "Engine forwards run.", lb, double(m.n_steps));
  line(out, "tpserve:requests_submitted_total", "counter", "Requests accepted by the engine.", lb,
       double(m.n_submitted));
  std::lock_guard lk(mu_);
  out += "# HELP tpserve:request_success_total Finished requests by finish reason.\n"
         "# TYPE tpserve:request_success_total counter\n";
  for (const auto& [reason, n] : finished_by_reason_)
    out += "tpserve:request_success_total{" + lb + ",finished_reason=\"" + reason + "\"} " + std::to_string(n) +
           "\n";
  out += "# HELP tpserve:http_responses_total HTTP responses sent, by status code.\n"
         "# TYPE tpserve:http_responses_total counter\n";
  for (const auto& [status, n] : http_by_status_)
    out += "tpserve:http_responses_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  out += ttft_.render("tpserve:time_to_first_token_seconds", "first_token - arrival, per request.", lb);
  out += itl_.render("tpserve:inter_token_latency_seconds",
                     "Time between consecutive token deliveries of a request, per token after the first.", lb);
  out += e2e_.render("tpserve:e2e_request_latency_seconds", "finish - arrival, per finished request.", lb);
  return out;
}

}  // namespace tp
