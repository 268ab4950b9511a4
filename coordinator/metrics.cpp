#include "coordinator/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "common/error.h"

namespace tp {
namespace {

// vLLM's bounds (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                         1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBounds = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                                 0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBounds = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                                   5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBounds = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kParamsNBounds = {1, 2, 5, 10, 20};
const char* const kFinishReasons[] = {"stop", "length", "abort", "error", "repetition"};  // vLLM's, all exported

double secs(std::chrono::steady_clock::duration d) { return std::max(0.0, std::chrono::duration<double>(d).count()); }

std::string escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + escape(help, false) + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const MetricLabels& labels, double value) {
  out += name + render_labels(labels) + " " + prom_float(value) + "\n";
}

void single(std::string& out, const std::string& name, const char* type, const std::string& help,
            const MetricLabels& labels, double value) {
  header(out, name, type, help);
  sample(out, name, labels, value);
}

MetricLabels with(MetricLabels labels, const std::string& key, const std::string& value) {
  labels[key] = value;
  return labels;
}

}  // namespace

std::string prom_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t epos = sci.find('e');
  const bool neg = sci[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int e = std::stoi(sci.substr(epos + 1));
  // Python's repr: exponent form when e < -4 or e >= 16, else positional with at least one fractional digit.
  std::string s = neg ? "-" : "";
  if (e < -4 || e >= 16) {
    s += digits.substr(0, 1);
    if (digits.size() > 1) s += "." + digits.substr(1);
    const int ae = std::abs(e);
    s += std::string(e < 0 ? "e-" : "e+") + (ae < 10 ? "0" : "") + std::to_string(ae);
    return s;
  }
  if (e >= 0) {
    std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), size_t(e) + 1));
    int_part.resize(size_t(e) + 1, '0');
    const std::string frac = digits.size() > size_t(e) + 1 ? digits.substr(size_t(e) + 1) : "0";
    s += int_part + "." + frac;
  } else {
    s += "0." + std::string(size_t(-e - 1), '0') + digits;
  }
  // floatToGoString: Go switches to exponents sooner than Python (only positive values are rewritten).
  const size_t dot = s.find('.');
  if (v > 0 && dot > 6) {
    std::string mantissa = s.substr(0, 1) + "." + s.substr(1, dot - 1) + s.substr(dot + 1);
    while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.')) mantissa.pop_back();
    const std::string ex = std::to_string(dot - 1);
    return mantissa + "e+" + (ex.size() < 2 ? "0" : "") + ex;
  }
  return s;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1; max_value >= scale; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(double(m * scale));
    }
    if (scale > max_value / 10) break;
  }
  return out;
}

std::string render_labels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) out += (out.size() > 1 ? "," : "") + k + "=\"" + escape(v, true) + "\"";
  return out + "}";
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, int64_t n) {
  // Prometheus buckets are upper-inclusive: v lands in the first bound >= v.
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i] += n;
  sum_ += v * double(n);
  count_ += n;
}

std::string Histogram::render(const std::string& name, const std::string& help, const MetricLabels& labels) const {
  std::string out;
  header(out, name, "histogram", help);
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    sample(out, name + "_bucket", with(labels, "le", i < bounds_.size() ? prom_float(bounds_[i]) : "+Inf"),
           double(cum));
  }
  sample(out, name + "_count", labels, double(count_));
  sample(out, name + "_sum", labels, sum_);
  return out;
}

ServerMetrics::ServerMetrics(MetricsOptions options)
    : opt_(std::move(options)),
      labels_{{"engine", "0"}, {"model_name", opt_.model_name}},
      ttft_(kTtftBounds),
      itl_(kTokenLatencyBounds),
      e2e_(kRequestLatencyBounds),
      queue_(kRequestLatencyBounds),
      prefill_(kRequestLatencyBounds),
      decode_(kRequestLatencyBounds),
      inference_(kRequestLatencyBounds),
      tpot_(kTokenLatencyBounds),
      prompt_tokens_(buckets_1_2_5(opt_.max_model_len)),
      generation_tokens_(buckets_1_2_5(opt_.max_model_len)),
      max_tokens_(buckets_1_2_5(opt_.max_model_len)),
      n_(kParamsNBounds),
      max_generation_tokens_(buckets_1_2_5(opt_.max_model_len)),
      iteration_tokens_(kIterationTokenBounds) {
  if (opt_.prefix != "vllm" && opt_.prefix != "tpserve")
    throw InputError("metrics prefix must be vllm or tpserve, not '" + opt_.prefix + "'");
  for (const char* r : kFinishReasons) finished_by_reason_[r] = 0;
}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}

void ServerMetrics::observe_itl(double s, int64_t n) {
  std::lock_guard lk(mu_);
  itl_.observe(s, n);
}

void ServerMetrics::observe_finished(const FinishedRequestStats& r) {
  const SteadyTime now = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  int64_t max_generated = 0;
  for (const FinishedChoice& c : r.choices) {
    const RequestTimes& t = c.times;
    const SteadyTime finished = c.finished != SteadyTime{} ? c.finished : now;
    const SteadyTime scheduled = t.scheduled != SteadyTime{} ? t.scheduled : finished;
    const SteadyTime first = t.first_token != SteadyTime{} ? t.first_token : finished;
    const SteadyTime last = t.last_token != SteadyTime{} ? t.last_token : first;
    const double decode = secs(last - first);
    e2e_.observe(secs(finished - t.arrival));
    queue_.observe(secs(scheduled - t.arrival));
    prefill_.observe(secs(first - scheduled));
    decode_.observe(decode);
    inference_.observe(secs(last - scheduled));
    tpot_.observe(c.n_generation_tokens > 1 ? decode / double(c.n_generation_tokens - 1) : 0.0);
    prompt_tokens_.observe(double(r.n_prompt_tokens));
    generation_tokens_.observe(double(c.n_generation_tokens));
    if (r.max_tokens > 0) max_tokens_.observe(double(r.max_tokens));
    ++finished_by_reason_[c.finish_reason];
    max_generated = std::max(max_generated, c.n_generation_tokens);
  }
  if (r.choices.empty()) return;
  n_.observe(double(r.choices.size()));
  max_generation_tokens_.observe(double(max_generated));
}

void ServerMetrics::observe_iteration(int64_t n_tokens) {
  std::lock_guard lk(mu_);
  iteration_tokens_.observe(double(n_tokens));
}

void ServerMetrics::observe_step(const EngineMetrics& m) {
  std::lock_guard lk(mu_);
  if (m.n_steps != last_steps_)
    iteration_tokens_.observe(
        double((m.n_prompt_tokens - last_prompt_tokens_) + (m.n_generation_tokens - last_generation_tokens_)));
  last_steps_ = m.n_steps;
  last_prompt_tokens_ = m.n_prompt_tokens;
  last_generation_tokens_ = m.n_generation_tokens;
}

void ServerMetrics::observe_http(int status) {
  std::lock_guard lk(mu_);
  ++http_by_status_[status];
}

std::string ServerMetrics::render(const EngineMetrics& m) const {
  const MetricLabels& lb = labels_;
  std::string out;
  // Gauges, as of the engine's latest step.
  single(out, name("num_requests_running"), "gauge", "Requests in the running batch (sequences).", lb,
         double(m.n_running));
  single(out, name("num_requests_waiting"), "gauge",
         "Requests waiting: the scheduler queue plus submitted but not yet seen by a step.", lb, double(m.n_waiting));
  single(out, name("kv_cache_usage_perc"), "gauge",
         "KV-cache usage, 0..1 = KV blocks held by sequences / KV blocks in the pool.", lb, m.kv_usage);
  if (opt_.prefix == "vllm")
    single(out, name("gpu_cache_usage_perc"), "gauge",
           "KV-cache usage, 0..1 (vLLM's name before 0.10; the same value as vllm:kv_cache_usage_perc).", lb,
           m.kv_usage);
  header(out, name("engine_sleep_state"), "gauge", "Engine sleep state: awake 1 (tpserve never sleeps).");
  for (const char* s : {"awake", "discard_all", "weights_offloaded"})
    sample(out, name("engine_sleep_state"), with(lb, "sleep_state", s), std::string(s) == "awake" ? 1.0 : 0.0);
  single(out, name("cache_config_info"), "gauge", "KV cache configuration (labels); value 1.",
         {{"block_size", std::to_string(opt_.block_size)},
          {"cache_dtype", opt_.kv_dtype},
          {"enable_prefix_caching", opt_.prefix_caching ? "True" : "False"},
          {"engine", "0"},
          {"num_gpu_blocks", std::to_string(m.n_blocks)}},
         1.0);
  // Counters since start.
  single(out, name("prompt_tokens_total"), "counter",
         "Prompt tokens: sum of prompt lengths, once per request, at its first admission.", lb,
         double(m.n_prompt_tokens));
  single(out, name("generation_tokens_total"), "counter", "Generated tokens (every choice).", lb,
         double(m.n_generation_tokens));
  single(out, name("num_preemptions_total"), "counter", "Sequences preempted (blocks freed, recomputed later).", lb,
         double(m.n_preemptions));
  single(out, name("prefix_cache_queries_total"), "counter",
         "Prompt tokens looked up in the prefix cache (per allocation, readmissions included).", lb,
         double(m.prefix_query_tokens));
  single(out, name("prefix_cache_hits_total"), "counter",
         "Prompt tokens found in the prefix cache; hit rate = hits / queries.", lb, double(m.prefix_hit_tokens));
  single(out, "tpserve:kv_held_blocks", "gauge",
         "Cached KV blocks that waiting requests hold (their matched prefix, evicted after every other block).", lb,
         double(m.n_held_blocks));
  single(out, "tpserve:kv_held_blocks_evicted_total", "counter",
         "Held KV blocks evicted anyway because no other block was evictable (the request recomputes them).", lb,
         double(m.n_held_evicted));
  single(out, "tpserve:kv_cache_blocks_total", "gauge", "KV blocks in the pool (per rank; every rank has as many).",
         lb, double(m.n_blocks));
  single(out, "tpserve:kv_cache_bytes_per_token", "gauge",
         "KV bytes per token per rank: 2 x layers x local KV heads x head_dim x dtype bytes (block scales excluded).",
         lb, double(opt_.kv_bytes_per_token));
  single(out, "tpserve:kv_cache_block_bytes", "gauge",
         "KV bytes per block per rank: block_size x bytes per token + the block's scales (int8).", lb,
         double(opt_.kv_block_bytes));
  single(out, "tpserve:computed_tokens_total", "counter",
         "Tokens run through the model: prefill + decode, recomputation after preemption included.", lb,
         double(m.n_computed_tokens));
  single(out, "tpserve:engine_steps_total", "counter", "Engine forwards run.", lb, double(m.n_steps));
  // KV blocks between replicas (issue 15, deliverable 3).
  single(out, "tpserve:kv_fetch_requests_total", "counter",
         "Requests that named a replica holding their prefix (kv_transfer_params.fetch_from).", lb,
         double(m.kv_fetch_requests));
  single(out, "tpserve:kv_fetches_total", "counter", "Block fetches the ranks ran over UCX.", lb,
         double(m.kv_fetches));
  single(out, "tpserve:kv_fetch_failures_total", "counter",
         "Fetches that failed (holder unreachable or refusing, timeout, chain hash or checksum mismatch); each "
         "request recomputed its prompt.", lb, double(m.kv_fetch_failures));
  single(out, "tpserve:kv_fetch_recompute_total", "counter",
         "Requests whose prefix was recomputed because it was cheaper (fetch bytes / link rate >= tokens / prefill "
         "rate) or the holder held none of it.", lb, double(m.kv_fetch_recompute_by_cost));
  single(out, "tpserve:kv_fetched_blocks_total", "counter", "KV blocks fetched and entered in the prefix cache.", lb,
         double(m.kv_fetched_blocks));
  single(out, "tpserve:kv_fetched_tokens_total", "counter", "Prompt tokens whose KV was fetched, not computed.", lb,
         double(m.kv_fetched_tokens));
  single(out, "tpserve:kv_fetched_bytes_total", "counter", "KV bytes fetched by the leader rank (each rank as many).",
         lb, double(m.kv_fetched_bytes));
  single(out, "tpserve:kv_fetch_seconds_total", "counter", "Seconds the leader rank spent in successful fetches.", lb,
         m.kv_fetch_seconds);
  single(out, "tpserve:kv_exports_total", "counter", "Export requests answered with pinned blocks (holder side).", lb,
         double(m.kv_exports));
  single(out, "tpserve:kv_exported_blocks_total", "counter", "Blocks pinned for fetchers (holder side).", lb,
         double(m.kv_exported_blocks));
  single(out, "tpserve:kv_pinned_exports", "gauge", "Exports whose blocks are pinned now (holder side).", lb,
         double(m.kv_pins));
  single(out, "tpserve:requests_submitted_total", "counter", "Requests accepted by the engine.", lb,
         double(m.n_submitted));
  header(out, "tpserve:step_time_seconds_total", "counter",
         "Where the engine steps' time went, cumulative seconds by part: forward = linear + attention + "
         "communication + the rest of the ranks' forward; sample (leader, after the forward); schedule and "
         "postprocess (the engine's own, per step).");
  const ExecutorTimes& t = m.executor_times;
  const std::pair<const char*, double> parts[] = {
      {"linear", t.linear_s},   {"attention", t.attention_s},
      {"communication", t.comm_s},
      {"forward_other", std::max(0.0, t.forward_s - t.linear_s - t.attention_s - t.comm_s)},
      {"sample", t.sample_s}, {"schedule", m.schedule_s}, {"postprocess", m.postprocess_s}};
  for (const auto& [part, v] : parts) sample(out, "tpserve:step_time_seconds_total", with(lb, "part", part), v);

  std::lock_guard lk(mu_);
  header(out, name("request_success_total"), "counter", "Finished choices by finish reason.");
  for (const auto& [reason, n] : finished_by_reason_)
    sample(out, name("request_success_total"), with(lb, "finished_reason", reason), double(n));
  header(out, "tpserve:http_responses_total", "counter", "HTTP responses sent, by status code.");
  for (const auto& [status, n] : http_by_status_)
    sample(out, "tpserve:http_responses_total", {{"status", std::to_string(status)}}, double(n));

  out += ttft_.render(name("time_to_first_token_seconds"), "first_token - arrival, per choice.", lb);
  out += itl_.render(name("inter_token_latency_seconds"),
                     "Time between consecutive token deliveries of a choice, per token after the first.", lb);
  out += tpot_.render(name("request_time_per_output_token_seconds"),
                      "(last_token - first_token) / (generation tokens - 1) per finished choice; 0 for <= 1 token.",
                      lb);
  out += e2e_.render(name("e2e_request_latency_seconds"), "finished - arrival, per finished choice.", lb);
  out += queue_.render(name("request_queue_time_seconds"),
                       "scheduled (first admission) - arrival, per finished choice.", lb);
  out += inference_.render(name("request_inference_time_seconds"), "last_token - scheduled, per finished choice.", lb);
  out += prefill_.render(name("request_prefill_time_seconds"), "first_token - scheduled, per finished choice.", lb);
  out += decode_.render(name("request_decode_time_seconds"), "last_token - first_token, per finished choice.", lb);
  out += prompt_tokens_.render(name("request_prompt_tokens"), "Prompt length, per finished choice.", lb);
  out += generation_tokens_.render(name("request_generation_tokens"), "Tokens generated, per finished choice.", lb);
  out += max_tokens_.render(name("request_params_max_tokens"), "The max_tokens a choice ran with, per finished choice.",
                            lb);
  out += n_.render(name("request_params_n"), "The n parameter (choices), per finished request.", lb);
  out += max_generation_tokens_.render(name("request_max_num_generation_tokens"),
                                       "Max over a request's choices of their generated tokens, per finished request.",
                                       lb);
  out += iteration_tokens_.render(
      name("iteration_tokens_total"),
      "Prompt tokens first admitted + tokens sampled, per engine step that ran a forward.", lb);
  return out;
}

}  // namespace tp
