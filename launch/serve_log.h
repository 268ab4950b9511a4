// What `tpserve serve` says while it runs, as Logger lines (common/log.h; text or JSON by the logger's format):
//   - one access line per finished request (log_access);
//   - a periodic stats line like vLLM's (StatsLogger), computed from two EngineMetrics snapshots.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "common/log.h"
#include "coordinator/engine.h"
#include "coordinator/http_server.h"

namespace tp {

// One line for a finished request. Level: error for 5xx, warn for 4xx, info otherwise.
//   text: <time> INFO  POST /v1/completions 200 id=cmpl-1 prompt_tokens=5 output_tokens=8 ttft_s=0.045
//         total_s=0.312 bytes=812 peer=127.0.0.1:40112
//   json: {"time":…,"level":"info","msg":"POST /v1/completions 200","event":"access","method":"POST",
//          "route":"/v1/completions","status":200,"id":"cmpl-1","prompt_tokens":5,…}
// id, prompt_tokens and output_tokens appear when the handler reported a request id (or a token count);
// ttft_s when it reported one (>= 0); error (the server's message, then the handler's) when there is one;
// ignored (the request fields the handler ignored) when any; incomplete=true when the response was cut short.
// A request the server refused before reading it (503 at the connection cap) has method and route "-".
// Seconds are rounded to 0.1 ms.
void log_access(Logger& log, const AccessRecord& r);

// Engine activity over one interval.
struct EngineStats {
  double prompt_tokens_per_s = 0;      // (now.n_prompt_tokens - before.n_prompt_tokens) / seconds
  double generation_tokens_per_s = 0;  // (now.n_generation_tokens - before.n_generation_tokens) / seconds
  int64_t n_running = 0;               // now
  int64_t n_waiting = 0;               // now
  double kv_usage_perc = 0;            // 100 × now.kv_usage
  // 100 × Δprefix_hit_tokens / Δprefix_query_tokens over the interval; 0 when nothing was looked up.
  double prefix_hit_rate_perc = 0;
};
EngineStats engine_stats(const EngineMetrics& before, const EngineMetrics& now, double seconds);

// "Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s, Running: 1 reqs, Waiting: 0
// reqs, KV cache usage: 3.1%, Prefix cache hit rate: 50.0%" (one decimal).
std::string stats_message(const EngineStats& s);

// Every interval_s, the stats line of the interval just ended, logged only when its text differs from the
// last one logged (an idle server logs nothing; the first idle interval after activity logs its zeros once).
// interval_s <= 0: never.
class StatsLogger {
 public:
  using Clock = std::chrono::steady_clock;
  StatsLogger(Logger& log, double interval_s) : log_(log), interval_s_(interval_s) {}
  // Call often (every few hundred ms) with the engine's current metrics and the time they were taken.
  // Returns true when it logged a line.
  bool tick(const EngineMetrics& now, Clock::time_point t);

 private:
  Logger& log_;
  double interval_s_;
  bool started_ = false;
  EngineMetrics prev_;
  Clock::time_point prev_t_{};
  std::string last_;  // the last message logged (at start: the idle line, so idleness logs nothing)
};

}  // namespace tp
