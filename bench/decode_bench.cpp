// Prefill and decode throughput of one sequence, the way llama-bench measures it:
// pp = a P-token prompt in one step (tok/s), tg = G single-token decode steps (tok/s), each repeated R times
// on a fresh sequence; prints mean ± stddev. Token ids are fixed pseudo-random ids (content does not change
// the cost).
//   decode_bench --model PATH [--dtype bf16|f32] [--threads N] [--pp 512] [--tg 128] [--reps 3]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "launch/cli_args.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const tp::CliArgs a("decode_bench", std::vector<std::string>(argv + 1, argv + argc),
                        {"model", "dtype", "threads", "pp", "tg", "reps"}, {});
    const std::string path = a.required("model");
    const tp::DType dtype = tp::parse_dtype(a.str("dtype").value_or("bf16"));
    const int threads = int(a.integer("threads", 1, 1, 1024));
    const int64_t pp = a.integer("pp", 512, 1, 1 << 20), tg = a.integer("tg", 128, 1, 1 << 20);
    const int reps = int(a.integer("reps", 3, 1, 1000));
    tp::cpu::set_num_threads(threads);
    auto file = tp::open_model(path);
    tp::LlamaModel model(*file, dtype);
    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(file->config().vocab - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(pp));
    for (auto& t : prompt) t = pick(rng);

    using clock = std::chrono::steady_clock;
    std::vector<double> pp_rates, tg_rates;
    for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
      tp::LocalRunner pre(model, pp + 1);
      auto t0 = clock::now();
      pre.seq.feed(prompt);
      auto t1 = clock::now();
      tp::LocalRunner dec(model, tg + 1);
      auto t2 = clock::now();
      for (int64_t i = 0; i < tg; ++i) dec.seq.feed({prompt[size_t(i % pp)]});
      auto t3 = clock::now();
      if (r < 0) continue;
      pp_rates.push_back(double(pp) / std::chrono::duration<double>(t1 - t0).count());
      tg_rates.push_back(double(tg) / std::chrono::duration<double>(t3 - t2).count());
    }
    const Stat sp = stats(pp_rates), st = stats(tg_rates);
    std::printf("tpserve | %s | %s | threads %d | pp%lld %.2f ± %.2f tok/s | tg%lld %.2f ± %.2f tok/s | weights %.1f MiB\n",
                file->config().name.c_str(), std::string(tp::dtype_name(dtype)).c_str(), threads, (long long)pp, sp.mean,
                sp.sd, (long long)tg, st.mean, st.sd, double(model.resident_weight_bytes()) / (1 << 20));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
}
