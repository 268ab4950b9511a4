#include "launch/serve_log.h"

#include <cmath>
#include <cstdio>

namespace tp {
namespace {

double round_to_tenth_ms(double s) { return std::round(s * 1e4) / 1e4; }

}  // namespace

void log_access(Logger& log, const AccessRecord& r) {
  const std::string method = r.method.empty() ? "-" : r.method;
  const std::string route = r.path.empty() ? "-" : r.path;
  std::vector<LogField> f = {{"event", "access", false},
                             {"method", method, false},
                             {"route", route, false},
                             {"status", r.status, false}};
  const ResponseLog& l = r.log;
  if (!l.request_id.empty() || l.n_prompt_tokens > 0 || l.n_output_tokens > 0) {
    if (!l.request_id.empty()) f.emplace_back("id", l.request_id);
    f.emplace_back("prompt_tokens", l.n_prompt_tokens);
    f.emplace_back("output_tokens", l.n_output_tokens);
  }
  if (l.ttft_s >= 0) f.emplace_back("ttft_s", round_to_tenth_ms(l.ttft_s));
  f.emplace_back("total_s", round_to_tenth_ms(r.duration_s));
  f.emplace_back("bytes", r.bytes_sent);
  f.emplace_back("peer", r.peer);
  std::string error = r.error;
  if (!l.error.empty() && l.error != error) error += (error.empty() ? "" : "; ") + l.error;
  if (!error.empty()) f.emplace_back("error", error);
  if (!l.ignored_fields.empty()) f.emplace_back("ignored", l.ignored_fields);
  if (!r.complete) f.emplace_back("incomplete", true);
  const LogLevel level = r.status >= 500 ? LogLevel::Error : r.status >= 400 ? LogLevel::Warn : LogLevel::Info;
  log.log(level, method + " " + route + " " + std::to_string(r.status), f);
}

EngineStats engine_stats(const EngineMetrics& before, const EngineMetrics& now, double seconds) {
  EngineStats s;
  if (seconds > 0) {
    s.prompt_tokens_per_s = double(now.n_prompt_tokens - before.n_prompt_tokens) / seconds;
    s.generation_tokens_per_s = double(now.n_generation_tokens - before.n_generation_tokens) / seconds;
  }
  s.n_running = now.n_running;
  s.n_waiting = now.n_waiting;
  s.kv_usage_perc = 100.0 * now.kv_usage;
  const int64_t queries = now.prefix_query_tokens - before.prefix_query_tokens;
  if (queries > 0) s.prefix_hit_rate_perc = 100.0 * double(now.prefix_hit_tokens - before.prefix_hit_tokens) / double(queries);
  return s;
}

std::string stats_message(const EngineStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %lld reqs, "
                "Waiting: %lld reqs, KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
                s.prompt_tokens_per_s, s.generation_tokens_per_s, (long long)s.n_running, (long long)s.n_waiting,
                s.kv_usage_perc, s.prefix_hit_rate_perc);
  return buf;
}

bool StatsLogger::tick(const EngineMetrics& now, Clock::time_point t) {
  if (interval_s_ <= 0) return false;
  if (!started_) {
    started_ = true;
    prev_ = now;
    prev_t_ = t;
    last_ = stats_message(engine_stats(now, now, interval_s_));
    return false;
  }
  const double seconds = std::chrono::duration<double>(t - prev_t_).count();
  if (seconds < interval_s_) return false;
  const EngineStats s = engine_stats(prev_, now, seconds);
  prev_ = now;
  prev_t_ = t;
  const std::string msg = stats_message(s);
  if (msg == last_) return false;
  last_ = msg;
  log_.info(msg, {{"event", "stats", false},
                  {"prompt_tokens_per_s", s.prompt_tokens_per_s, false},
                  {"generation_tokens_per_s", s.generation_tokens_per_s, false},
                  {"running", s.n_running, false},
                  {"waiting", s.n_waiting, false},
                  {"kv_cache_usage_perc", s.kv_usage_perc, false},
                  {"prefix_cache_hit_rate_perc", s.prefix_hit_rate_perc, false}});
  return true;
}

}  // namespace tp
