// The seed's experiment on our engine, with the real model:
//  (1) At a fixed KV budget, N requests whose max context is C but whose real lengths follow a realistic
//      distribution (prompt lengths log-normal, median P, clipped to [8, C/2]; outputs uniform in [G/2, G]),
//      all submitted at once: static reservation of C tokens per request (scheduler.kv_reservation: static)
//      vs paged allocation, for each KV dtype of --kv-dtypes (cache.dtype: the same budget holds more blocks
//      of a smaller dtype). Reports the pool's blocks and token capacity, mean and peak concurrency (running
//      sequences per step), peak KV tokens (the most tokens stored at once = Σ computed positions of running
//      sequences, the concurrent tokens admitted), output tok/s, and KV utilization = tokens stored ÷ pool
//      capacity, averaged over steps.
//  (2) Prefix caching (first KV dtype only): TTFT of requests that share a S-token system prompt (+ a short distinct question),
//      run one at a time: the first (cold) vs the rest (warm), and the same with prefix caching off.
//  (3) Parallel sampling (first KV dtype only): one request with n = N choices over a P-token prompt (the prompt is prefilled once
//      and its blocks forked) vs N separate requests with that prompt submitted together. Reports tokens run
//      through the model, peak KV blocks in use, mean TTFT over the choices, output tok/s.
//   kv_bench --model PATH [--dtype bf16|f32] [--kv-dtypes bf16,...] [--threads N] [--budget-mb 96] [--context 2048] [--requests 48]
//            [--prompt-median 120] [--gen 32] [--system 1000] [--warm 4] [--choices 8] [--choice-prompt 500]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/kv_dtype.h"
#include "coordinator/engine.h"
#include "launch/cli_args.h"
#include "launch/model_group.h"
#include "launch/worker_executor.h"

namespace {

using namespace tp;
using Clock = std::chrono::steady_clock;

struct LoadResult {
  double wall_s = 0, mean_running = 0, peak_running = 0, mean_util = 0;
  int64_t generated = 0, preemptions = 0, peak_tokens = 0;
};

LoadResult run_load(ModelGroup& g, Config cfg, const std::string& mode, const std::vector<Request>& reqs) {
  cfg.scheduler.kv_reservation = mode;
  WorkerExecutor exec(*g.worker);
  Engine engine(g.engine_config(cfg), exec);
  for (const Request& r : reqs) engine.submit(r);
  LoadResult res;
  const double capacity = double(engine.config().scheduler.n_blocks) * engine.config().scheduler.block_size;
  int64_t steps = 0;
  const auto t0 = Clock::now();
  while (engine.has_work()) {
    engine.step();
    const BlockManager& bm = engine.scheduler().block_manager();
    const auto running = engine.scheduler().running_ids();
    int64_t stored = 0;
    for (int64_t id : running)
      if (bm.has_seq(id)) stored += bm.n_computed(id);
    res.mean_running += double(running.size());
    res.peak_tokens = std::max(res.peak_tokens, stored);
    res.peak_running = std::max(res.peak_running, double(running.size()));
    res.mean_util += double(stored) / capacity;
    ++steps;
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  res.mean_running /= double(steps);
  res.mean_util /= double(steps);
  res.generated = engine.metrics().n_generation_tokens;
  res.preemptions = engine.metrics().n_preemptions;
  return res;
}

double ttft_one(Engine& engine, std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  double ttft = 0;
  r.on_output = [&](const RequestOutput& o) {
    if (o.finished) ttft = std::chrono::duration<double>(o.times.first_token - o.times.arrival).count();
  };
  engine.submit(std::move(r));
  engine.run_until_idle();
  return ttft;
}

struct ChoicesResult {
  double wall_s = 0, mean_ttft_s = 0;
  int64_t computed = 0, peak_blocks = 0, generated = 0;
};

// `n` choices of `prompt` (gen tokens each, sampled with seeds 1..n): as one request with n choices, or as n
// requests with one choice each, submitted together.
ChoicesResult run_choices(ModelGroup& g, const Config& cfg, const std::vector<int32_t>& prompt, int32_t n, int64_t gen,
                          bool one_request) {
  WorkerExecutor exec(*g.worker);
  Engine engine(g.engine_config(cfg), exec);
  ChoicesResult res;
  double ttft_sum = 0;
  int64_t n_ttft = 0;
  auto on_output = [&](const RequestOutput& o) {
    if (o.n_generated == 1 && !o.new_tokens.empty()) {
      ttft_sum += std::chrono::duration<double>(o.times.first_token - o.times.arrival).count();
      ++n_ttft;
    }
  };
  for (int32_t i = 0; i < (one_request ? 1 : n); ++i) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = gen;
    r.ignore_eos = true;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = uint64_t(1 + i);
    r.n = one_request ? n : 1;
    r.on_output = on_output;
    engine.submit(std::move(r));
  }
  const auto t0 = Clock::now();
  while (engine.has_work()) {
    engine.step();
    res.peak_blocks = std::max<int64_t>(res.peak_blocks, engine.scheduler().block_manager().n_in_use());
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  res.mean_ttft_s = n_ttft ? ttft_sum / double(n_ttft) : 0;
  res.computed = engine.metrics().n_computed_tokens;
  res.generated = engine.metrics().n_generation_tokens;
  return res;
}

int run(int argc, char** argv) {
  const CommandSpec spec{
      "kv_bench",
      "static vs paged KV reservation, prefix caching, parallel sampling (see the header of bench/kv_bench.cpp)",
      {OptionSpec::required_value("model", "PATH", "GGUF file or HF model directory"),
       OptionSpec::value("dtype", "bf16|f32", "bf16", "runtime weight dtype"),
       OptionSpec::value("kv-dtypes", "LIST", "bf16", "KV dtypes of experiment (1), comma-separated (cache.dtype)"),
       OptionSpec::value("threads", "N", "2", "compute threads"),
       OptionSpec::value("budget-mb", "MB", "96", "KV budget in MiB (cache.memory_mb)"),
       OptionSpec::value("context", "C", "2048", "max context per request (cache.max_context)"),
       OptionSpec::value("requests", "N", "48", "requests of experiment (1)"),
       OptionSpec::value("prompt-median", "P", "120", "median prompt length of experiment (1)"),
       OptionSpec::value("gen", "G", "32", "max output tokens of experiment (1)"),
       OptionSpec::value("system", "S", "1000", "shared system prompt tokens of experiment (2)"),
       OptionSpec::value("warm", "W", "4", "warm requests of experiment (2)"),
       OptionSpec::value("choices", "N", "8", "choices of experiment (3)"),
       OptionSpec::value("choice-prompt", "P", "500", "prompt tokens of experiment (3)")}};
  const CliArgs a(spec, std::vector<std::string>(argv + 1, argv + argc));
  if (a.help()) {
    std::fputs(usage_text(spec).c_str(), stdout);
    return 0;
  }
  Config cfg;
  cfg.model.path = a.required("model");
  cfg.model.dtype = *a.str("dtype");
  cfg.cache.memory_mb = a.integer("budget-mb", 1, 1 << 20);
  cfg.cache.max_context = a.integer("context", 16, 1 << 20);
  cfg.scheduler.max_num_seqs = 256;
  cfg.scheduler.max_num_batched_tokens = 2048;
  const int64_t n_req = a.integer("requests", 1, 100000), median = a.integer("prompt-median", 1, 1 << 20);
  const int64_t gen = a.integer("gen", 2, 1 << 20), system = a.integer("system", 1, 1 << 20);
  const int64_t warm = a.integer("warm", 1, 1000);
  const int32_t choices = int32_t(a.integer("choices", 2, 64));
  const int64_t choice_prompt = a.integer("choice-prompt", 2, 1 << 20);
  std::vector<std::string> kv_dtypes;
  for (std::string list = *a.str("kv-dtypes"); !list.empty();) {
    const size_t comma = list.find(',');
    kv_dtypes.push_back(list.substr(0, comma));
    parse_kv_dtype(kv_dtypes.back(), "--kv-dtypes");
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  if (kv_dtypes.empty()) throw UsageError("--kv-dtypes: give at least one KV dtype");
  if (kv_dtypes.size() > 1 && launched_by_mpi())
    throw UsageError("--kv-dtypes: one KV dtype per run under mpirun (a group initializes MPI once)");
  const int threads = int(a.integer("threads", 1, 1024));
  cfg.cache.dtype = kv_dtypes[0];
  ModelGroup g(&argc, &argv, cfg, threads);
  const int64_t vocab = g.model->config().vocab, C = cfg.cache.max_context;

  // (1) the load
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> plen(std::log(double(median)), 0.8);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab - 1));
  std::uniform_int_distribution<int64_t> glen(gen / 2, gen);
  std::vector<Request> reqs;
  int64_t sum_len = 0;
  for (int64_t i = 0; i < n_req; ++i) {
    Request r;
    const int64_t n = std::clamp<int64_t>(int64_t(plen(rng)), 8, C / 2);
    for (int64_t j = 0; j < n; ++j) r.prompt.push_back(tok(rng));
    r.max_tokens = glen(rng);
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    sum_len += n + r.max_tokens;
    reqs.push_back(std::move(r));
  }
  std::printf("model %s (%s), %d threads; KV budget %lld MiB, blocks of %lld tokens; max context C = %lld\n",
              cfg.model.path.c_str(), cfg.model.dtype.c_str(), g.threads, (long long)cfg.cache.memory_mb,
              (long long)g.pool->shape().block_size, (long long)C);
  std::printf("load: %lld requests, prompt log-normal median %lld (clipped to [8, %lld]), output uniform [%lld, %lld]; "
              "mean real length %.0f tokens\n\n",
              (long long)n_req, (long long)median, (long long)(C / 2), (long long)(gen / 2), (long long)gen,
              double(sum_len) / double(n_req));
  std::printf("| KV dtype | block bytes | blocks | token capacity | mode | mean running | peak running | peak KV tokens "
              "| output tok/s | KV utilization | preemptions | wall s |\n");
  std::printf("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& kv : kv_dtypes) {
    Config c = cfg;
    c.cache.dtype = kv;
    std::unique_ptr<ModelGroup> other;  // the first dtype's group also serves experiments (2) and (3)
    if (kv != kv_dtypes[0]) other = std::make_unique<ModelGroup>(&argc, &argv, c, threads);
    ModelGroup& group = other ? *other : g;
    const KvPoolShape& ps = group.pool->shape();
    for (const char* mode : {"static", "paged"}) {
      const LoadResult r = run_load(group, c, mode, reqs);
      std::printf("| %s | %lld | %lld | %lld | %s | %.1f | %.0f | %lld | %.1f | %.1f%% | %lld | %.1f |\n", kv.c_str(),
                  (long long)ps.block_bytes(), (long long)ps.n_blocks, (long long)(ps.n_blocks * ps.block_size), mode,
                  r.mean_running, r.peak_running, (long long)r.peak_tokens, double(r.generated) / r.wall_s,
                  100.0 * r.mean_util, (long long)r.preemptions, r.wall_s);
      std::fflush(stdout);
    }
  }

  // (2) prefix caching: a shared system prompt, one request at a time
  std::vector<int32_t> sys;
  for (int64_t j = 0; j < system; ++j) sys.push_back(tok(rng));
  std::printf("\nprefix caching (KV %s): %lld-token shared system prompt + a distinct 16-token question, one request at "
              "a time\n\n",
              kv_dtypes[0].c_str(), (long long)system);
  std::printf("| prefix caching | cold TTFT s | warm TTFT s (mean of %lld) | speed-up |\n|---|---:|---:|---:|\n",
              (long long)warm);
  for (bool caching : {false, true}) {
    Config c = cfg;
    c.cache.prefix_caching = caching;
    WorkerExecutor exec(*g.worker);
    Engine engine(g.engine_config(c), exec);
    auto prompt = [&] {
      std::vector<int32_t> p = sys;
      for (int j = 0; j < 16; ++j) p.push_back(tok(rng));
      return p;
    };
    const double cold = ttft_one(engine, prompt());
    double warm_sum = 0;
    for (int64_t i = 0; i < warm; ++i) warm_sum += ttft_one(engine, prompt());
    const double w = warm_sum / double(warm);
    std::printf("| %s | %.3f | %.3f | %.1fx |\n", caching ? "on" : "off", cold, w, cold / w);
  }

  // (3) parallel sampling: n choices of one prompt
  std::vector<int32_t> cp;
  for (int64_t j = 0; j < choice_prompt; ++j) cp.push_back(tok(rng));
  std::printf("\nparallel sampling (KV %s): %d choices of one %lld-token prompt, %lld tokens each (temperature 0.8)\n\n",
              kv_dtypes[0].c_str(), choices, (long long)choice_prompt, (long long)gen);
  std::printf("| submitted as | tokens run | peak KV blocks | mean TTFT s | output tok/s | wall s |\n"
              "|---|---:|---:|---:|---:|---:|\n");
  for (bool one : {false, true}) {
    const ChoicesResult r = run_choices(g, cfg, cp, choices, gen, one);
    std::printf("| %s | %lld | %lld | %.3f | %.1f | %.1f |\n",
                one ? ("1 request, n = " + std::to_string(choices)).c_str()
                    : (std::to_string(choices) + " requests, n = 1").c_str(),
                (long long)r.computed, (long long)r.peak_blocks, r.mean_ttft_s, double(r.generated) / r.wall_s,
                r.wall_s);
    std::fflush(stdout);
  }
  g.worker->shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_bench: %s\n", e.what());
    return 1;
  }
}
