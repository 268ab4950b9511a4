// `tpserve simulate`: our real Scheduler and BlockManager driven by a cost model (coordinator/sim_run.h) for a
// model card on a hardware card (configs/hardware/NAME.yaml) at a TP x DP shape over N nodes, on a workload
// file. Prints throughput, TTFT / ITL percentiles, KV usage and preemptions (a table, or JSON with --json).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "coordinator/sim_run.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_card.h"

namespace tp {
namespace {

namespace fs = std::filesystem;

// NAME -> configs/hardware/NAME.yaml (./configs/hardware, else above the binary); a path is taken as it is.
std::string hardware_path(const std::string& spec) {
  std::error_code ec;
  if (fs::is_regular_file(spec, ec)) return spec;
  std::vector<fs::path> dirs{"configs/hardware"};
  for (fs::path d = fs::read_symlink("/proc/self/exe", ec).parent_path(); !ec && !d.empty() && d != d.root_path();
       d = d.parent_path())
    dirs.push_back(d / "configs" / "hardware");
  std::string known;
  for (const fs::path& d : dirs) {
    if (fs::is_regular_file(d / (spec + ".yaml"), ec)) return (d / (spec + ".yaml")).string();
    if (known.empty() && fs::is_directory(d, ec))
      for (const auto& e : fs::directory_iterator(d, ec))
        if (e.path().extension() == ".yaml") known += (known.empty() ? "" : ", ") + e.path().stem().string();
  }
  throw UsageError("simulate: unknown --gpu '" + spec + "' (no configs/hardware/" + spec + ".yaml; cards: " +
                   (known.empty() ? "none found" : known) + ")");
}

nlohmann::json pct_json(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}};
}

}  // namespace

const CommandSpec& simulate_spec() {
  static const CommandSpec spec{
      "simulate",
      "predict serving on a GPU cluster: the real scheduler over a cost model",
      {
          OptionSpec::required_value("model", "NAME|PATH",
                                     "model card name (configs/models), card file, GGUF or HF dir"),
          OptionSpec::required_value("gpu", "NAME|PATH", "hardware card: H100, H200, A100, cpu-... (configs/hardware)"),
          OptionSpec::required_value("workload", "FILE", "workload YAML or JSONL trace"),
          OptionSpec::computed("concurrency", "C", "the workload's arrivals",
                               "closed loop at C clients (a JSONL trace: its requests in order, times ignored)"),
          OptionSpec::value("tp", "T", "1", "tensor-parallel degree"),
          OptionSpec::value("dp", "D", "1", "data-parallel replicas (round-robin router)"),
          OptionSpec::computed("nodes", "N", "ceil(tp x dp / devices per node)", "nodes"),
          OptionSpec::value("weights", "FORMAT", "bf16",
                            "weight format: bf16, fp8, int8, int4, mxfp4, f32, or stored (a model file's own bytes)"),
          OptionSpec::value("kv-dtype", "DTYPE", "bf16", "KV cache dtype: bf16, f32, fp8, int8, f16"),
          OptionSpec::computed("kv-mem", "SIZE", "memory - weights - reserve", "KV bytes per rank"),
          OptionSpec::value("block-size", "B", "16", "tokens per KV block"),
          OptionSpec::value("max-num-seqs", "N", "256", "running sequences per replica"),
          OptionSpec::value("max-num-batched-tokens", "N", "8192", "tokens per step"),
          OptionSpec::computed("context", "C", "the model's max context, else 8192", "max tokens per sequence"),
          OptionSpec::computed("cards", "DIR", "./configs/models", "where model cards are looked up"),
          OptionSpec::flag("no-prefix-caching", "disable the prefix cache"),
          OptionSpec::flag("json", "print JSON"),
      },
      "Deterministic for a workload's seed. Step time model: coordinator/sim_cost_model.h."};
  return spec;
}

int run_simulate(const CliArgs& a) {
  SimOptions o;
  o.model = load_model(a.required("model"), a.str("cards")).shape;
  const std::string hw_file = hardware_path(a.required("gpu"));
  o.hw = load_hardware_card(hw_file);
  Workload w = load_workload(a.required("workload"));
  if (a.str("concurrency")) {
    w.concurrency = a.integer("concurrency", 0, 1, 1 << 20);
    w.rate = 0;
  }
  o.tp = a.integer("tp", 1, 4096);
  o.dp = a.integer("dp", 1, 1 << 20);
  o.nodes = a.integer("nodes", (o.tp * o.dp + o.hw.devices_per_node - 1) / o.hw.devices_per_node, 1, 1 << 20);
  try {
    o.weights = parse_plan_format(*a.str("weights"));
    o.kv = parse_kv_cost(*a.str("kv-dtype"));
    if (auto k = a.str("kv-mem")) o.kv_mem_bytes = parse_byte_size(*k, "--kv-mem");
  } catch (const InputError& e) {
    throw UsageError(std::string("simulate: ") + e.what());
  }
  o.block_size = a.integer("block-size", 1, 1024);
  o.max_num_seqs = a.integer("max-num-seqs", 1, 1 << 20);
  o.max_num_batched_tokens = a.integer("max-num-batched-tokens", 1, 1 << 24);
  o.max_context = a.integer("context", 0, 1, int64_t(1) << 30);
  o.prefix_caching = !a.flag("no-prefix-caching");
  const SimReport r = simulate(o, w);
  if (a.flag("json")) {
    nlohmann::json j = {
        {"model", o.model.name}, {"hardware", o.hw.name}, {"hardware_card", hw_file}, {"tp", o.tp}, {"dp", o.dp},
        {"nodes", o.nodes}, {"weights", std::string(plan_format_name(o.weights))}, {"kv_dtype", o.kv.name},
        {"requests", int64_t(w.requests.size())}, {"finished", r.n_finished}, {"rejected", r.n_rejected},
        {"kv_blocks_per_replica", r.n_blocks}, {"kv_budget_bytes_per_rank", r.kv_budget_bytes},
        {"weight_bytes_per_rank", r.weight_bytes_per_rank}, {"makespan_s", r.makespan_s},
        {"req_per_s", r.req_per_s}, {"output_tok_per_s", r.out_tok_per_s}, {"ttft_s", pct_json(r.ttft_s)},
        {"itl_s", pct_json(r.itl_s)}, {"e2e_s", pct_json(r.e2e_s)}, {"kv_usage_mean", r.kv_usage_mean},
        {"kv_usage_peak", r.kv_usage_peak}, {"preemptions", r.n_preemptions}, {"steps", r.n_steps},
        {"time_s", {{"linear", r.linear_s}, {"attention", r.attention_s}, {"comm", r.comm_s}, {"overhead", r.overhead_s}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const double busy = r.linear_s + r.attention_s + r.comm_s + r.overhead_s;
  auto share = [&](double x) { return busy > 0 ? 100 * x / busy : 0.0; };
  std::printf("simulate: %s on %s, tp %lld x dp %lld over %lld node(s), weights %s, KV %s\n", o.model.name.c_str(),
              o.hw.name.c_str(), (long long)o.tp, (long long)o.dp, (long long)o.nodes,
              std::string(plan_format_name(o.weights)).c_str(), o.kv.name.c_str());
  std::printf("  weights/rank %s, KV/rank %s = %lld blocks of %lld tokens per replica\n",
              format_si_bytes(r.weight_bytes_per_rank).c_str(), format_si_bytes(r.kv_budget_bytes).c_str(),
              (long long)r.n_blocks, (long long)o.block_size);
  std::printf("  requests %lld: finished %lld, rejected %lld; steps %lld; makespan %.3f s\n",
              (long long)w.requests.size(), (long long)r.n_finished, (long long)r.n_rejected, (long long)r.n_steps,
              r.makespan_s);
  std::printf("  throughput %.3f req/s, %.1f output tok/s\n", r.req_per_s, r.out_tok_per_s);
  std::printf("  TTFT ms  p50 %.2f  p90 %.2f  p99 %.2f\n", 1e3 * r.ttft_s.p50, 1e3 * r.ttft_s.p90, 1e3 * r.ttft_s.p99);
  std::printf("  ITL ms   p50 %.2f  p90 %.2f  p99 %.2f\n", 1e3 * r.itl_s.p50, 1e3 * r.itl_s.p90, 1e3 * r.itl_s.p99);
  std::printf("  KV usage mean %.1f%%, peak %.1f%%; preemptions %lld\n", 100 * r.kv_usage_mean,
              100 * r.kv_usage_peak, (long long)r.n_preemptions);
  std::printf("  step time: linear %.1f%%, attention %.1f%%, all-reduce %.1f%%, overhead %.1f%%\n",
              share(r.linear_s), share(r.attention_s), share(r.comm_s), share(r.overhead_s));
  return 0;
}

}  // namespace tp
