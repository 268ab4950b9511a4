// Prefill and decode throughput of one sequence, the way llama-bench measures it:
// pp = a P-token prompt in one step (tok/s), tg = G single-token decode steps (tok/s), each repeated R times
// on a fresh sequence after one warm-up; prints mean ± stddev, and under mpirun (tp = ranks) the share of
// each phase spent in all-reduce/all-gather on rank 0. Token ids are fixed pseudo-random ids (content does
// not change the cost).
//   [mpirun -np T] decode_bench --model PATH [--dtype bf16|f32] [--threads N] [--pp 512] [--tg 128] [--reps 3]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "launch/cli_args.h"
#include "launch/model_group.h"
#include "rank/sequence_runner.h"

namespace {

struct Stat {
  double mean = 0, sd = 0;
};

Stat stats(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0.0;
  return s;
}

int run(int argc, char** argv) {
  using tp::OptionSpec;
  const tp::CommandSpec spec{"decode_bench",
                             "prefill (pp) and decode (tg) throughput of one sequence, llama-bench style",
                             {OptionSpec::required_value("model", "PATH", "GGUF file or HF model directory"),
                              OptionSpec::value("dtype", "bf16|f32", "bf16", "runtime weight dtype"),
                              OptionSpec::value("threads", "N", "1", "compute threads per rank"),
                              OptionSpec::value("pp", "P", "512", "prompt tokens of the prefill step"),
                              OptionSpec::value("tg", "G", "128", "single-token decode steps"),
                              OptionSpec::value("reps", "R", "3", "repetitions after one warm-up")}};
  const tp::CliArgs a(spec, std::vector<std::string>(argv + 1, argv + argc));
  if (a.help()) {
    std::fputs(tp::usage_text(spec).c_str(), stdout);
    return 0;
  }
  tp::Config cfg;
  cfg.model.path = a.required("model");
  cfg.model.dtype = *a.str("dtype");
  const int64_t pp = a.integer("pp", 1, 1 << 20), tg = a.integer("tg", 1, 1 << 20);
  const int reps = int(a.integer("reps", 1, 1000));
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  cfg.parallel.tp = world ? std::atoi(world) : 1;
  cfg.cache.memory_mb = 256;
  tp::ModelGroup g(&argc, &argv, cfg, int(a.integer("threads", 1, 1024)));
  std::fprintf(stderr, "%s\n", g.report().c_str());
  if (!g.is_leader()) {
    g.worker->serve();
    return 0;
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(g.model->config().vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(pp));
  for (auto& t : prompt) t = pick(rng);

  using clock = std::chrono::steady_clock;
  std::vector<double> pp_rates, tg_rates;
  tp::ForwardTimes& times = g.model->times();
  double pp_comm = 0, pp_total = 0, tg_comm = 0, tg_total = 0;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    times = {};
    tp::SequenceRunner pre(*g.worker, pp);
    auto t0 = clock::now();
    pre.feed(prompt);
    auto t1 = clock::now();
    const tp::ForwardTimes after_pp = times;
    times = {};
    tp::SequenceRunner dec(*g.worker, tg);
    auto t2 = clock::now();
    for (int64_t i = 0; i < tg; ++i) dec.feed({prompt[size_t(i % pp)]});
    auto t3 = clock::now();
    if (r < 0) continue;
    pp_rates.push_back(double(pp) / std::chrono::duration<double>(t1 - t0).count());
    tg_rates.push_back(double(tg) / std::chrono::duration<double>(t3 - t2).count());
    pp_comm += after_pp.comm_s;
    pp_total += after_pp.total_s;
    tg_comm += times.comm_s;
    tg_total += times.total_s;
  }
  g.worker->shutdown();
  const Stat sp = stats(pp_rates), st = stats(tg_rates);
  std::printf("tpserve | %s | %s | tp %d | threads/rank %d | pp%lld %.2f ± %.2f tok/s (comm %.1f%%) | "
              "tg%lld %.2f ± %.2f tok/s (comm %.1f%%) | weights/rank %.1f MiB\n",
              g.model->config().name.c_str(), cfg.model.dtype.c_str(), g.model->layout().tp, g.threads, (long long)pp,
              sp.mean, sp.sd, 100.0 * pp_comm / pp_total, (long long)tg, st.mean, st.sd, 100.0 * tg_comm / tg_total,
              double(g.model->resident_weight_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
}
