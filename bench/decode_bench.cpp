// Prefill and decode throughput of one sequence, the way llama-bench measures it:
// pp = a P-token prompt (steps of at most 512 tokens; tok/s), tg = G single-token decode steps (tok/s), each
// repeated R times after one warm-up, both after a context of D tokens (--depth / -d D, llama-bench's -d: pp
// runs at positions [D, D + P), tg at [D, D + G)); the D context tokens are prefilled once, untimed, and every
// repetition overwrites only the positions after them. Prints mean ± stddev, the share of each phase spent in
// paged attention (attn = ForwardTimes::attention_s / total_s) and, under mpirun (tp = ranks), in
// all-reduce/all-gather on rank 0 (comm); for tg also in the linear layers and lm_head (linear = linear_s / total_s)
// and outside the model's forward (= (wall − total_s) / wall: the Worker's step around it). Token ids are fixed pseudo-random ids (content does not change the
// cost). --batch B > 1 adds batched decode: B sequences each with a 64-token context, G steps of one token per
// sequence in one forward each; tok/s = B · G / seconds. GGUF block-quantized weights run as they are
// (--quantized keep) or dequantized to --dtype. The last column, bytes/token, is the weight bytes a decode step
// streams: every linear slice and the lm_head (resident bytes less the mapped embedding rows, of which one row
// a token is read).
// TP_BENCH_CPU=1 also prints to stderr, per repetition (warm-up included), the pp and tg rates in this thread's CPU time
// beside the wall-clock one: on a machine shared with other jobs the wall rate counts the time the scheduler gave
// away (at 1 thread the forward runs in this thread, so the CPU-time rate is the step's own cost).
// The KV budget is 256 MiB or 64 KiB a token of D + max(P, G), whichever is more (cache.dtype bf16).
//   [mpirun -np T] decode_bench --model PATH [--dtype bf16|f32] [--quantized keep|dequantize] [--device cpu|cuda]
//                               [--threads N] [--gguf-prefill int8|bf16]
//                               [--pp 512] [--tg 128] [--depth 0 | -d 0] [--reps 3] [--batch 1]
//                               [--gpu-memory-utilization 0.9]
//   decode_bench --model PATH [--device cuda] --first-logits FILE --ids "ID ..."   (the logits after a prompt)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
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

// --first-logits: the logits after `ids` (one prefill, tp 1) as raw little-endian float32 [vocab] in `out`, for
// comparing runtimes (launch/gpu_check.py's (b) against transformers); prints vocab, argmax and max.
int write_first_logits(tp::ModelGroup& g, const std::vector<int32_t>& ids, const std::string& out) {
  if (!g.is_leader()) throw tp::UsageError("--first-logits runs at tp 1");
  tp::SequenceRunner seq(*g.worker, int64_t(ids.size()) + 1, 4096);
  const std::vector<float>& logits = seq.feed(ids);
  std::FILE* f = std::fopen(out.c_str(), "wb");
  const bool written = f && std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
  if (!f || std::fclose(f) != 0 || !written) throw tp::Error("cannot write " + out);
  const auto top = std::max_element(logits.begin(), logits.end());
  std::printf("first logits: vocab %zu argmax %lld max %.6f -> %s\n", logits.size(), (long long)(top - logits.begin()),
              double(*top), out.c_str());
  return 0;
}

int run(int argc, char** argv) {
  using tp::OptionSpec;
  const tp::CommandSpec spec{"decode_bench",
                             "prefill (pp) and decode (tg) throughput of one sequence, llama-bench style",
                             {OptionSpec::required_value("model", "PATH", "GGUF file or HF model directory"),
                              OptionSpec::value("dtype", "bf16|f32", "bf16", "runtime weight dtype"),
                              OptionSpec::value("quantized", "keep|dequantize", "keep", "GGUF block weights"),
                              OptionSpec::value("device", "cpu|cuda", "cpu", "where the forward runs"),
                              OptionSpec::value("batch", "B", "1", "also decode B sequences a step (B > 1)"),
                              OptionSpec::value("threads", "N", "1", "compute threads per rank"),
                              OptionSpec::value("gguf-prefill", "int8|bf16", "int8",
                                                "GGUF kept quantized, calls of >= 64 rows: int8 tiles, or W "
                                                "dequantized to BF16 + oneDNN (cpu::set_gguf_prefill_bf16)"),
                              OptionSpec::value("pp", "P", "512", "prompt tokens of the prefill step"),
                              OptionSpec::value("tg", "G", "128", "single-token decode steps"),
                              OptionSpec::value("depth", "D", "0", "context tokens before pp and tg (alias -d)"),
                              OptionSpec::value("reps", "R", "3", "repetitions after one warm-up"),
                              OptionSpec::value("gpu-memory-utilization", "U", "0.9",
                                                "cuda: share of the device for weights, activations and KV"),
                              OptionSpec::value("first-logits", "FILE", "",
                                                "instead of timing: write the logits after --ids as float32 [vocab]"),
                              OptionSpec::value("ids", "\"ID ...\"", "", "the prompt token ids for --first-logits")}};
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& s : args)
    if (s == "-d") s = "--depth";
  const tp::CliArgs a(spec, args);
  if (a.help()) {
    std::fputs(tp::usage_text(spec).c_str(), stdout);
    return 0;
  }
  tp::Config cfg;
  cfg.model.path = a.required("model");
  cfg.model.dtype = *a.str("dtype");
  cfg.model.quantized = *a.str("quantized");
  cfg.model.device = *a.str("device");
  const std::string gguf_prefill = *a.str("gguf-prefill");
  if (gguf_prefill != "int8" && gguf_prefill != "bf16") {
    std::fprintf(stderr, "decode_bench: --gguf-prefill must be int8 or bf16, got '%s'\n", gguf_prefill.c_str());
    return 2;
  }
  tp::cpu::set_gguf_prefill_bf16(gguf_prefill == "bf16");
  cfg.cache.gpu_memory_utilization = a.real("gpu-memory-utilization", 0.01, 1.0);
  const int64_t batch = a.integer("batch", 1, 4096);
  const int64_t pp = a.integer("pp", 1, 1 << 20), tg = a.integer("tg", 1, 1 << 20);
  const int reps = int(a.integer("reps", 1, 1000));
  const int64_t depth = a.integer("depth", 0, 1 << 24);
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  cfg.parallel.tp = world ? std::atoi(world) : 1;
  cfg.cache.memory_mb = std::max<int64_t>(256, (depth + std::max(pp, tg)) / 16);
  const std::string logits_out = a.str("first-logits").value_or("");
  std::vector<int32_t> first_ids;
  if (!logits_out.empty()) {
    std::istringstream in(a.str("ids").value_or(""));
    for (long long t; in >> t;) first_ids.push_back(int32_t(t));
    if (first_ids.empty() || !in.eof())
      throw tp::UsageError("--first-logits needs --ids: token ids separated by spaces");
    cfg.cache.memory_mb = 256;
  }
  tp::ModelGroup g(&argc, &argv, cfg, int(a.integer("threads", 1, 1024)));
  std::fprintf(stderr, "%s\n", g.report().c_str());
  if (!logits_out.empty()) return write_first_logits(g, first_ids, logits_out);
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
  double pp_comm = 0, pp_total = 0, tg_comm = 0, tg_total = 0, pp_attn = 0, tg_attn = 0, tg_lin = 0, tg_wall = 0;
  // One sequence over the pool's first blocks in descending order (as SequenceRunner takes them).
  const int64_t bs = g.pool->shape().block_size, cap = depth + std::max(pp, tg);
  const int64_t n_seq_blocks = (cap + bs - 1) / bs;
  if (n_seq_blocks > g.pool->shape().n_blocks)
    throw tp::InputError("--depth " + std::to_string(depth) + " needs " + std::to_string(n_seq_blocks) +
                         " KV blocks, the pool has " + std::to_string(g.pool->shape().n_blocks));
  std::vector<int32_t> table;
  for (int64_t b = n_seq_blocks - 1; b >= 0; --b) table.push_back(int32_t(b));
  std::vector<float> logits;
  // Tokens [i, i + n) of ids at positions start + [0, n), in steps of at most 512.
  auto feed = [&](const std::vector<int32_t>& ids, int64_t start) {
    for (size_t i = 0; i < ids.size(); i += 512) {
      const size_t n = std::min<size_t>(512, ids.size() - i);
      tp::StepPlan plan;
      tp::SeqPlan& s = plan.seqs.emplace_back();
      s.tokens.assign(ids.begin() + long(i), ids.begin() + long(i + n));
      s.start_pos = start + int64_t(i);
      s.block_table = table;
      s.want_logits = i + n == ids.size();
      g.worker->lead(plan, logits);
    }
  };
  std::vector<int32_t> context(static_cast<size_t>(depth));
  for (auto& t : context) t = pick(rng);
  feed(context, 0);
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    times = {};
    auto t0 = clock::now();
    timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    feed(prompt, depth);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    auto t1 = clock::now();
    const tp::ForwardTimes after_pp = times;
    times = {};
    auto t2 = clock::now();
    timespec c2, c3;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c2);
    for (int64_t i = 0; i < tg; ++i) feed({prompt[size_t(i % pp)]}, depth + i);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c3);
    auto t3 = clock::now();
    if (std::getenv("TP_BENCH_CPU") != nullptr) {
      const double cpu_s = double(c3.tv_sec - c2.tv_sec) + 1e-9 * double(c3.tv_nsec - c2.tv_nsec);
      const double pp_cpu_s = double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec);
      std::fprintf(stderr, "pp%lld cpu %.2f tok/s wall %.2f tok/s\n", (long long)pp, double(pp) / pp_cpu_s,
                   double(pp) / std::chrono::duration<double>(t1 - t0).count());
      std::fprintf(stderr, "tg%lld cpu %.2f tok/s wall %.2f tok/s\n", (long long)tg, double(tg) / cpu_s,
                   double(tg) / std::chrono::duration<double>(t3 - t2).count());
    }
    if (r < 0) continue;
    pp_rates.push_back(double(pp) / std::chrono::duration<double>(t1 - t0).count());
    tg_rates.push_back(double(tg) / std::chrono::duration<double>(t3 - t2).count());
    pp_comm += after_pp.comm_s;
    pp_attn += after_pp.attention_s;
    tg_attn += times.attention_s;
    tg_lin += times.linear_s;
    tg_wall += std::chrono::duration<double>(t3 - t2).count();
    pp_total += after_pp.total_s;
    tg_comm += times.comm_s;
    tg_total += times.total_s;
  }
  // Batched decode: B sequences of a 64-token context, one token each a step.
  std::vector<double> batch_rates;
  double b_attn = 0, b_lin = 0, b_total = 0;  // ForwardTimes of the timed batched steps [s]
  if (batch > 1) {
    constexpr int64_t kContext = 64;
    const int64_t per_seq = (kContext + tg + bs - 1) / bs;
    if (per_seq * batch > g.pool->shape().n_blocks)
      throw tp::InputError("--batch " + std::to_string(batch) + " needs " + std::to_string(per_seq * batch) +
                           " KV blocks, the pool has " + std::to_string(g.pool->shape().n_blocks));
    for (int r = -1; r < reps; ++r) {
      tp::StepPlan prefill;
      for (int64_t i = 0; i < batch; ++i) {
        tp::SeqPlan& s = prefill.seqs.emplace_back();
        s.seq_id = i;
        s.tokens.assign(prompt.begin(), prompt.begin() + std::min<int64_t>(kContext, pp));
        s.tokens.resize(size_t(kContext), 1);
        for (int64_t b = 0; b < per_seq; ++b) s.block_table.push_back(int32_t(i * per_seq + b));
      }
      g.worker->lead(prefill, logits);
      times = {};
      const auto t0 = clock::now();
      for (int64_t step = 0; step < tg; ++step) {
        tp::StepPlan plan;
        for (int64_t i = 0; i < batch; ++i) {
          tp::SeqPlan& s = plan.seqs.emplace_back();
          s.seq_id = i;
          s.tokens = {prompt[size_t((step + i) % pp)]};
          s.start_pos = kContext + step;
          s.block_table = prefill.seqs[size_t(i)].block_table;
          s.want_logits = true;
        }
        g.worker->lead(plan, logits);
      }
      const auto t1 = clock::now();
      if (r < 0) continue;
      batch_rates.push_back(double(batch * tg) / std::chrono::duration<double>(t1 - t0).count());
      b_attn += times.attention_s;
      b_lin += times.linear_s;
      b_total += times.total_s;
    }
  }
  g.worker->shutdown();
  const Stat sp = stats(pp_rates), st = stats(tg_rates);
  const tp::TensorView* embd = g.file->find("token_embd.weight");
  const int64_t embd_bytes = embd ? embd->n_bytes / g.model->config().vocab * g.model->layout().local_real_vocab_rows() : 0;
  const int64_t streamed = g.model->resident_weight_bytes() - embd_bytes;
  std::string batch_text;
  if (batch > 1) {
    const Stat sb = stats(batch_rates);
    char buf[192];
    std::snprintf(buf, sizeof buf, " | tg%lld x b%lld %.2f ± %.2f tok/s (attn %.1f%%, linear %.1f%%)", (long long)tg,
                  (long long)batch, sb.mean, sb.sd, 100.0 * b_attn / b_total, 100.0 * b_lin / b_total);
    batch_text = buf;
  }
  std::printf("tpserve | %s | %s%s | tp %d | threads/rank %d | depth %lld | pp%lld %.2f ± %.2f tok/s (comm %.1f%%, "
              "attn %.1f%%) | tg%lld %.2f ± %.2f tok/s (comm %.1f%%, attn %.1f%%, linear %.1f%%, outside forward %.1f%%)%s | weights/rank %.1f MiB | "
              "bytes/token %.1f MiB\n",
              g.model->config().name.c_str(), cfg.model.dtype.c_str(),
              cfg.model.quantized == "keep" ? "" : " (dequantized)", g.model->layout().tp, g.threads,
              (long long)depth, (long long)pp, sp.mean, sp.sd, 100.0 * pp_comm / pp_total, 100.0 * pp_attn / pp_total,
              (long long)tg, st.mean, st.sd,
              100.0 * tg_comm / tg_total, 100.0 * tg_attn / tg_total, 100.0 * tg_lin / tg_total,
              100.0 * (tg_wall - tg_total) / tg_wall,
              batch_text.c_str(), double(g.model->resident_weight_bytes()) / (1 << 20),
              double(streamed) / (1 << 20));
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
