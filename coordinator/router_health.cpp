#include "coordinator/router_health.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/http_client.h"

namespace tp {

double prometheus_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    return std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return -1;
}

RouterHealth::RouterHealth(RouterReplicas& replicas, RouterHealthOptions opt, LogFn log)
    : replicas_(replicas), opt_(opt), log_(std::move(log)) {}

void RouterHealth::check(const ReplicaView& r) {
  HttpClientRequest q;
  q.connect_timeout_s = opt_.timeout_s;
  q.idle_timeout_s = opt_.timeout_s;
  bool ok = false;
  std::string reason, endpoint;
  double kv_usage = 0;
  try {
    const auto [host, port] = parse_base_url(r.url);
    q.target = "/health";
    const HttpClientResponse h = http_call(host, port, q);
    ok = h.status == 200;
    if (!ok) reason = "GET /health answered " + std::to_string(h.status) + ": " + h.body.substr(0, 200);
    if (ok && !r.up) {
      q.target = "/kv_events";
      const HttpClientResponse e = http_call(host, port, q);
      if (e.status == 200) {
        const auto j = nlohmann::json::parse(e.body, nullptr, false);
        if (j.is_object() && j.value("enabled", false)) endpoint = j.value("endpoint", std::string());
      }
    }
    if (ok) {
      q.target = "/metrics";
      const HttpClientResponse m = http_call(host, port, q);
      double v = prometheus_value(m.body, "vllm:kv_cache_usage_perc");
      if (v < 0) v = prometheus_value(m.body, "tpserve:kv_cache_usage_perc");
      kv_usage = v < 0 ? 0 : v;
    }
  } catch (const std::exception& e) {
    ok = false;
    reason = e.what();
  }
  const bool was_up = r.up;
  replicas_.health(r.id, ok, reason, endpoint, kv_usage, opt_.unhealthy_after);
  for (const ReplicaView& now : replicas_.snapshot()) {
    if (now.id != r.id) continue;
    if (!was_up && now.up)
      log_("replica " + r.url + " is up" + (endpoint.empty() ? " (no KV events)" : " (KV events at " + endpoint + ")"));
    if (was_up && !now.up) log_("replica " + r.url + " is down: " + now.down_reason);
  }
}

void RouterHealth::check_all() {
  std::vector<std::thread> ts;
  for (const ReplicaView& r : replicas_.snapshot())
    if (r.joined) ts.emplace_back([this, r] { check(r); });
  for (auto& t : ts) t.join();
}

void RouterHealth::start() {
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      lk.unlock();
      check_all();
      lk.lock();
      cv_.wait_for(lk, std::chrono::milliseconds(int64_t(opt_.interval_s * 1000)), [this] { return stop_; });
    }
  });
}

void RouterHealth::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tp
