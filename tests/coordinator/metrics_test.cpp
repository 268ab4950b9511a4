// ServerMetrics' exposition text: numbers as prometheus_client prints them, vLLM's names per prefix, cumulative
// buckets, and the per-request formulas fed with known times (binary fractions of a second, so sums are exact).
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>

#include "common/error.h"
#include "coordinator/metrics.h"

namespace tp {
namespace {

using std::chrono::milliseconds;

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

// The value of the sample line that starts with `series` (name + labels), or -1.
double value_of(const std::string& text, const std::string& series) {
  const size_t p = text.find("\n" + series + " ");
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + 1 + series.size() + 1));
}

const std::string kLb = R"(engine="0",model_name="m")";

std::string bucket(const std::string& name, const std::string& le) {
  return name + R"(_bucket{engine="0",le=")" + le + R"(",model_name="m"})";
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// Expected strings: Python 3.11 `prometheus_client.utils.floatToGoString(v)` (prometheus_client 0.26.0).
TEST(PromFloat, PrintsAsPrometheusClient) {
  struct Case {
    double v;
    const char* text;
  };
  for (const Case& c : {Case{0.005, "0.005"}, Case{1.0, "1.0"}, Case{0.0, "0.0"}, Case{2560.0, "2560.0"},
                        Case{16384.0, "16384.0"}, Case{0.3, "0.3"}, Case{0.1 + 0.2, "0.30000000000000004"},
                        Case{1e-4, "0.0001"}, Case{1e-5, "1e-05"}, Case{999999.0, "999999.0"}, Case{1e6, "1e+06"},
                        Case{1234567.5, "1.2345675e+06"}, Case{2e10, "2e+10"}, Case{1e16, "1e+16"},
                        Case{-1234567.5, "-1234567.5"}, Case{-0.25, "-0.25"}, Case{kInf, "+Inf"},
                        Case{-kInf, "-Inf"}})
    EXPECT_EQ(prom_float(c.v), c.text) << c.v;
  EXPECT_EQ(prom_float(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(Buckets125, AsVllmBuildsThem) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(9), (std::vector<double>{1, 2, 5}));
  EXPECT_TRUE(buckets_1_2_5(0).empty());
  const std::vector<double> b = buckets_1_2_5(8192);
  ASSERT_EQ(b.size(), 12u);
  EXPECT_EQ(b.back(), 5000);
}

TEST(Labels, SortedAndEscaped) {
  EXPECT_EQ(render_labels({}), "");
  EXPECT_EQ(render_labels({{"z", "1"}, {"a", "q\"b\\c\nd"}}), R"({a="q\"b\\c\nd",z="1"})");
}

TEST(Histogram, CumulativeUpperInclusiveBuckets) {
  Histogram h({0.005, 1.0});
  h.observe(0.005);  // on the bound: in it
  h.observe(0.5, 2);
  h.observe(3.0);
  EXPECT_EQ(h.render("x", "help", {{"model_name", "m"}}),
            "# HELP x help\n# TYPE x histogram\n"
            "x_bucket{le=\"0.005\",model_name=\"m\"} 1.0\n"
            "x_bucket{le=\"1.0\",model_name=\"m\"} 3.0\n"
            "x_bucket{le=\"+Inf\",model_name=\"m\"} 4.0\n"
            "x_count{model_name=\"m\"} 4.0\n"
            "x_sum{model_name=\"m\"} 4.005\n");
}

MetricsOptions options(const std::string& prefix) { return {"m", prefix, 100, 16, true, "int8", 11520, 185040}; }

TEST(ServerMetrics, VllmPrefixNamesTypesAndLabels) {
  ServerMetrics sm(options("vllm"));
  EngineMetrics em;
  em.n_running = 2;
  em.n_waiting = 3;
  em.kv_usage = 0.25;
  em.n_blocks = 64;
  em.n_prompt_tokens = 12;
  em.n_generation_tokens = 7;
  em.prefix_query_tokens = 40;
  em.prefix_hit_tokens = 16;
  em.n_preemptions = 1;
  em.n_steps = 9;
  const std::string t = sm.render(em);
  EXPECT_TRUE(has(t, "# TYPE vllm:num_requests_running gauge"));
  EXPECT_TRUE(has(t, "vllm:num_requests_running{" + kLb + "} 2.0"));
  EXPECT_TRUE(has(t, "vllm:num_requests_waiting{" + kLb + "} 3.0"));
  EXPECT_TRUE(has(t, "vllm:kv_cache_usage_perc{" + kLb + "} 0.25"));
  EXPECT_TRUE(has(t, "vllm:gpu_cache_usage_perc{" + kLb + "} 0.25"));
  EXPECT_TRUE(has(t, "# TYPE vllm:prompt_tokens_total counter"));
  EXPECT_TRUE(has(t, "vllm:prompt_tokens_total{" + kLb + "} 12.0"));
  EXPECT_TRUE(has(t, "vllm:generation_tokens_total{" + kLb + "} 7.0"));
  EXPECT_TRUE(has(t, "vllm:prefix_cache_queries_total{" + kLb + "} 40.0"));
  EXPECT_TRUE(has(t, "vllm:prefix_cache_hits_total{" + kLb + "} 16.0"));
  EXPECT_TRUE(has(t, "vllm:num_preemptions_total{" + kLb + "} 1.0"));
  EXPECT_TRUE(has(t, R"(vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0)"));
  EXPECT_TRUE(has(t, R"(vllm:cache_config_info{block_size="16",cache_dtype="int8",enable_prefix_caching="True",)"
                     R"(engine="0",num_gpu_blocks="64"} 1.0)"));
  // The KV footprint of the start-up report (kvstore/capacity): SmolLM2 at int8, blocks of 16.
  EXPECT_TRUE(has(t, "# TYPE tpserve:kv_cache_bytes_per_token gauge"));
  EXPECT_TRUE(has(t, "tpserve:kv_cache_bytes_per_token{" + kLb + "} 11520.0"));
  EXPECT_TRUE(has(t, "tpserve:kv_cache_block_bytes{" + kLb + "} 185040.0"));
  for (const char* r : {"stop", "length", "abort", "error", "repetition"})  // every reason, from the start
    EXPECT_TRUE(has(t, std::string(R"(vllm:request_success_total{engine="0",finished_reason=")") + r +
                           R"(",model_name="m"} 0.0)"))
        << r;
  EXPECT_TRUE(has(t, "tpserve:engine_steps_total{" + kLb + "} 9.0"));  // tpserve-only: always tpserve:
  for (const char* h : {"time_to_first_token_seconds", "inter_token_latency_seconds",
                        "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
                        "request_queue_time_seconds", "request_inference_time_seconds", "request_prefill_time_seconds",
                        "request_decode_time_seconds", "request_prompt_tokens", "request_generation_tokens",
                        "request_params_max_tokens", "request_params_n", "request_max_num_generation_tokens",
                        "iteration_tokens_total"})
    EXPECT_TRUE(has(t, std::string("# TYPE vllm:") + h + " histogram")) << h;
  EXPECT_EQ(t.find("tpserve:num_requests_running"), std::string::npos);
  // vLLM's bounds, printed as written.
  EXPECT_TRUE(has(t, bucket("vllm:time_to_first_token_seconds", "0.005") + " 0.0"));
  EXPECT_TRUE(has(t, bucket("vllm:time_to_first_token_seconds", "2560.0") + " 0.0"));
  EXPECT_TRUE(has(t, bucket("vllm:e2e_request_latency_seconds", "7680.0") + " 0.0"));
  EXPECT_TRUE(has(t, bucket("vllm:iteration_tokens_total", "16384.0") + " 0.0"));
  EXPECT_TRUE(has(t, bucket("vllm:request_prompt_tokens", "100.0") + " 0.0"));  // 1-2-5 up to max_model_len
  EXPECT_EQ(t.find("0.0050000"), std::string::npos);
}

TEST(ServerMetrics, TpservePrefix) {
  ServerMetrics sm(options("tpserve"));
  const std::string t = sm.render({});
  EXPECT_TRUE(has(t, "tpserve:num_requests_running{" + kLb + "} 0.0"));
  EXPECT_TRUE(has(t, "# TYPE tpserve:request_time_per_output_token_seconds histogram"));
  EXPECT_EQ(t.find("vllm:"), std::string::npos);
  EXPECT_EQ(t.find("gpu_cache_usage_perc"), std::string::npos);  // vLLM's legacy name only under vllm:
}

TEST(ServerMetrics, RejectsAnUnknownPrefix) { EXPECT_THROW(ServerMetrics(options("prom")), InputError); }

TEST(ServerMetrics, FinishedRequestFormulas) {
  ServerMetrics sm(options("vllm"));
  const SteadyTime t0 = std::chrono::steady_clock::now();
  FinishedChoice c0;  // queue 0.25, prefill 0.5, decode 2, inference 2.5, e2e 3, 5 tokens: tpot 2 / 4 = 0.5
  c0.finish_reason = "length";
  c0.n_generation_tokens = 5;
  c0.times = {t0, t0 + milliseconds(250), t0 + milliseconds(750), t0 + milliseconds(2750)};
  c0.finished = t0 + milliseconds(3000);
  FinishedChoice c1;  // one token: decode 0, tpot 0
  c1.finish_reason = "stop";
  c1.n_generation_tokens = 1;
  c1.times = {t0, t0 + milliseconds(250), t0 + milliseconds(500), t0 + milliseconds(500)};
  c1.finished = t0 + milliseconds(500);
  sm.observe_finished({7, 16, {c0, c1}});
  const std::string t = sm.render({});
  auto sum = [&](const char* h) { return value_of(t, std::string("vllm:") + h + "_sum{" + kLb + "}"); };
  auto count = [&](const char* h) { return value_of(t, std::string("vllm:") + h + "_count{" + kLb + "}"); };
  EXPECT_EQ(sum("e2e_request_latency_seconds"), 3.0 + 0.5);
  EXPECT_EQ(sum("request_queue_time_seconds"), 0.25 + 0.25);
  EXPECT_EQ(sum("request_prefill_time_seconds"), 0.5 + 0.25);
  EXPECT_EQ(sum("request_decode_time_seconds"), 2.0 + 0.0);
  EXPECT_EQ(sum("request_inference_time_seconds"), 2.5 + 0.25);
  EXPECT_EQ(sum("request_time_per_output_token_seconds"), 0.5 + 0.0);
  EXPECT_EQ(count("request_time_per_output_token_seconds"), 2);
  EXPECT_EQ(sum("request_prompt_tokens"), 14);  // per choice
  EXPECT_EQ(sum("request_generation_tokens"), 6);
  EXPECT_EQ(sum("request_params_max_tokens"), 32);
  EXPECT_EQ(sum("request_params_n"), 2);  // per request
  EXPECT_EQ(count("request_params_n"), 1);
  EXPECT_EQ(sum("request_max_num_generation_tokens"), 5);
  EXPECT_EQ(count("request_max_num_generation_tokens"), 1);
  // Cumulative buckets: queue 0.25 twice <= 0.3; e2e 0.5 <= 0.5, 3.0 <= 5.0 (2.5 < 3.0).
  EXPECT_EQ(value_of(t, bucket("vllm:request_queue_time_seconds", "0.3")), 2);
  EXPECT_EQ(value_of(t, bucket("vllm:e2e_request_latency_seconds", "0.3")), 0);
  EXPECT_EQ(value_of(t, bucket("vllm:e2e_request_latency_seconds", "0.5")), 1);
  EXPECT_EQ(value_of(t, bucket("vllm:e2e_request_latency_seconds", "2.5")), 1);
  EXPECT_EQ(value_of(t, bucket("vllm:e2e_request_latency_seconds", "5.0")), 2);
  EXPECT_EQ(value_of(t, bucket("vllm:e2e_request_latency_seconds", "+Inf")), 2);
  EXPECT_EQ(value_of(t, bucket("vllm:request_generation_tokens", "1.0")), 1);
  EXPECT_EQ(value_of(t, bucket("vllm:request_generation_tokens", "5.0")), 2);
  EXPECT_EQ(value_of(t, R"(vllm:request_success_total{engine="0",finished_reason="length",model_name="m"})"), 1);
  EXPECT_EQ(value_of(t, R"(vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"})"), 1);
}

TEST(ServerMetrics, AbortedWhileWaitingIsAllQueue) {
  ServerMetrics sm(options("vllm"));
  const SteadyTime t0 = std::chrono::steady_clock::now();
  FinishedChoice c;
  c.finish_reason = "abort";
  c.times.arrival = t0;  // never scheduled, no token
  c.finished = t0 + milliseconds(1500);
  sm.observe_finished({3, 0, {c}});
  const std::string t = sm.render({});
  auto sum = [&](const char* h) { return value_of(t, std::string("vllm:") + h + "_sum{" + kLb + "}"); };
  EXPECT_EQ(sum("e2e_request_latency_seconds"), 1.5);
  EXPECT_EQ(sum("request_queue_time_seconds"), 1.5);
  EXPECT_EQ(sum("request_prefill_time_seconds"), 0);
  EXPECT_EQ(sum("request_decode_time_seconds"), 0);
  EXPECT_EQ(sum("request_inference_time_seconds"), 0);
  EXPECT_EQ(value_of(t, "vllm:request_params_max_tokens_count{" + kLb + "}"), 0);  // max_tokens 0: not observed
  EXPECT_EQ(value_of(t, R"(vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"})"), 1);
}

TEST(ServerMetrics, IterationTokensPerForward) {
  ServerMetrics sm(options("vllm"));
  EngineMetrics m;
  m.n_steps = 1;  // a prefill of a 10-token prompt, sampling its first token
  m.n_prompt_tokens = 10;
  m.n_generation_tokens = 1;
  sm.observe_step(m);
  sm.observe_step(m);  // no forward since: nothing observed
  m.n_steps = 2;       // a decode step over 3 sequences
  m.n_generation_tokens = 4;
  sm.observe_step(m);
  sm.observe_iteration(100);
  const std::string t = sm.render(m);
  EXPECT_EQ(value_of(t, "vllm:iteration_tokens_total_count{" + kLb + "}"), 3);
  EXPECT_EQ(value_of(t, "vllm:iteration_tokens_total_sum{" + kLb + "}"), 11 + 3 + 100);
  EXPECT_EQ(value_of(t, bucket("vllm:iteration_tokens_total", "8.0")), 1);
  EXPECT_EQ(value_of(t, bucket("vllm:iteration_tokens_total", "16.0")), 2);
  EXPECT_EQ(value_of(t, bucket("vllm:iteration_tokens_total", "128.0")), 3);
}

TEST(ServerMetrics, LatenciesAndHttp) {
  ServerMetrics sm(options("vllm"));
  sm.observe_ttft(0.005);
  sm.observe_itl(0.05, 2);
  sm.observe_http(200);
  sm.observe_http(429);
  sm.observe_http(200);
  const std::string t = sm.render({});
  EXPECT_EQ(value_of(t, bucket("vllm:time_to_first_token_seconds", "0.005")), 1);
  EXPECT_EQ(value_of(t, bucket("vllm:time_to_first_token_seconds", "0.001")), 0);
  EXPECT_EQ(value_of(t, "vllm:inter_token_latency_seconds_count{" + kLb + "}"), 2);
  EXPECT_EQ(value_of(t, "vllm:inter_token_latency_seconds_sum{" + kLb + "}"), 0.1);
  EXPECT_EQ(value_of(t, R"(tpserve:http_responses_total{status="200"})"), 2);
  EXPECT_EQ(value_of(t, R"(tpserve:http_responses_total{status="429"})"), 1);
}

}  // namespace
}  // namespace tp
