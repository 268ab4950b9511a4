// `tpserve serve`'s log lines: the access line's fields in text and JSON, and the stats line's arithmetic and
// when it is printed (only when it changed).
#include "launch/serve_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace tp {
namespace {

// The lines a logger wrote into a temporary file.
struct Captured {
  FILE* f = std::tmpfile();
  ~Captured() { std::fclose(f); }
  std::vector<std::string> lines() {
    std::fflush(f);
    std::rewind(f);
    std::string all;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) all.append(buf, n);
    std::vector<std::string> out;
    std::istringstream in(all);
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
  }
};

AccessRecord completion_record() {
  AccessRecord r;
  r.method = "POST";
  r.path = "/v1/completions";
  r.status = 200;
  r.duration_s = 0.31234;
  r.peer = "127.0.0.1:40112";
  r.bytes_sent = 812;
  r.log.request_id = "cmpl-1";
  r.log.n_prompt_tokens = 5;
  r.log.n_output_tokens = 8;
  r.log.ttft_s = 0.04512;
  return r;
}

TEST(ServeLog, AccessLineText) {
  Captured c;
  Logger log(LogFormat::Text, LogLevel::Info, c.f);
  log_access(log, completion_record());
  AccessRecord h;
  h.method = "GET";
  h.path = "/health";
  h.status = 200;
  h.peer = "127.0.0.1:1";
  log_access(log, h);
  AccessRecord bad = completion_record();
  bad.status = 400;
  bad.error = "temperature must be in [0, 2]";
  bad.log = {};
  bad.log.ignored_fields = {"user", "logit_bias"};
  log_access(log, bad);
  AccessRecord refused;
  refused.status = 503;
  refused.error = "too many open connections";
  refused.complete = false;
  log_access(log, refused);
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].substr(24),
            " INFO  POST /v1/completions 200 id=cmpl-1 prompt_tokens=5 output_tokens=8 ttft_s=0.0451 total_s=0.3123 "
            "bytes=812 peer=127.0.0.1:40112");
  EXPECT_EQ(lines[1].substr(24), " INFO  GET /health 200 total_s=0 bytes=0 peer=127.0.0.1:1");
  EXPECT_EQ(lines[2].substr(24),
            " WARN  POST /v1/completions 400 total_s=0.3123 bytes=812 peer=127.0.0.1:40112 "
            "error=\"temperature must be in [0, 2]\" ignored=[user,logit_bias]");
  EXPECT_EQ(lines[3].substr(24),
            " ERROR - - 503 total_s=0 bytes=0 peer=\"\" error=\"too many open connections\" incomplete=true");
}

TEST(ServeLog, AccessLineJson) {
  Captured c;
  Logger log(LogFormat::Json, LogLevel::Info, c.f);
  AccessRecord r = completion_record();
  r.log.error = "aborted";
  r.error = "send timed out";
  log_access(log, r);
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["event"], "access");
  EXPECT_EQ(j["msg"], "POST /v1/completions 200");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["route"], "/v1/completions");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["prompt_tokens"], 5);
  EXPECT_EQ(j["output_tokens"], 8);
  EXPECT_DOUBLE_EQ(j["ttft_s"].get<double>(), 0.0451);
  EXPECT_DOUBLE_EQ(j["total_s"].get<double>(), 0.3123);
  EXPECT_EQ(j["bytes"], 812);
  EXPECT_EQ(j["error"], "send timed out; aborted");
  EXPECT_FALSE(j.contains("ignored"));
}

TEST(ServeLog, EngineStatsOverAnInterval) {
  EngineMetrics a, b;
  a.n_prompt_tokens = 100;
  b.n_prompt_tokens = 300;
  a.n_generation_tokens = 50;
  b.n_generation_tokens = 90;
  a.prefix_query_tokens = 10;
  b.prefix_query_tokens = 210;
  a.prefix_hit_tokens = 5;
  b.prefix_hit_tokens = 55;
  b.n_running = 3;
  b.n_waiting = 2;
  b.kv_usage = 0.125;
  const EngineStats s = engine_stats(a, b, 4.0);
  EXPECT_DOUBLE_EQ(s.prompt_tokens_per_s, 50.0);
  EXPECT_DOUBLE_EQ(s.generation_tokens_per_s, 10.0);
  EXPECT_EQ(s.n_running, 3);
  EXPECT_EQ(s.n_waiting, 2);
  EXPECT_DOUBLE_EQ(s.kv_usage_perc, 12.5);
  EXPECT_DOUBLE_EQ(s.prefix_hit_rate_perc, 25.0);
  EXPECT_EQ(stats_message(s),
            "Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 3 reqs, "
            "Waiting: 2 reqs, KV cache usage: 12.5%, Prefix cache hit rate: 25.0%");
  EXPECT_DOUBLE_EQ(engine_stats(b, b, 4.0).prefix_hit_rate_perc, 0.0);  // no lookups: 0, not NaN
}

TEST(ServeLog, StatsLineOnlyWhenSomethingChanged) {
  Captured c;
  Logger log(LogFormat::Text, LogLevel::Info, c.f);
  StatsLogger stats(log, 10.0);
  using std::chrono::seconds;
  const auto t0 = StatsLogger::Clock::now();
  EngineMetrics m;
  EXPECT_FALSE(stats.tick(m, t0));
  EXPECT_FALSE(stats.tick(m, t0 + seconds(10)));  // idle: nothing to say
  m.n_generation_tokens = 200;
  m.n_running = 1;
  EXPECT_FALSE(stats.tick(m, t0 + seconds(15)));  // within the interval
  EXPECT_TRUE(stats.tick(m, t0 + seconds(20)));   // 200 tokens over 10 s
  m.n_running = 0;
  EXPECT_TRUE(stats.tick(m, t0 + seconds(30)));   // back to idle: said once
  EXPECT_FALSE(stats.tick(m, t0 + seconds(40)));  // and not again
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("Avg generation throughput: 20.0 tokens/s, Running: 1 reqs"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("Avg generation throughput: 0.0 tokens/s, Running: 0 reqs"), std::string::npos) << lines[1];
  StatsLogger off(log, 0);
  m.n_generation_tokens = 1000;
  EXPECT_FALSE(off.tick(EngineMetrics{}, t0));
  EXPECT_FALSE(off.tick(m, t0 + seconds(100)));
}

}  // namespace
}  // namespace tp
