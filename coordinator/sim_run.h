// The simulator's driver: D replicas (DP), each our real Scheduler + BlockManager over a SimExecutor, under one
// virtual clock. Events: arrivals (open loop from the workload's times; closed loop, concurrency C > 0 — a
// trace too, its times then ignored: C requests at t = 0, then the next one each time a request finishes) and
// steps (a replica that has work runs schedule -> execute -> commit, and its clock advances by the modelled step
// time; an arrival during a step waits for the step's end). A router sends each arrival to the next replica in
// turn (round robin). Generation ignores EOS: a request produces exactly output_len tokens. A request that can
// never fit (prompt + output > max_context, or more blocks than the pool) is rejected, as the server refuses it.
//
// Metrics (seconds of simulated time):
//   TTFT = first token time - arrival; ITL = gaps between a request's consecutive tokens (every gap counted);
//   e2e = last token - arrival; makespan = last finish - first arrival;
//   throughput = finished / makespan (req/s), output tokens / makespan (tok/s);
//   KV usage = blocks in use / pool blocks, sampled after every step of every replica (mean and peak).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/sim_cost_model.h"
#include "coordinator/sim_workload.h"

namespace tp {

struct SimOptions {
  ModelShape model;
  HardwareCard hw;
  int64_t tp = 1, dp = 1, nodes = 1;
  PlanFormat weights = PlanFormat::BF16;
  KvCost kv;
  int64_t kv_mem_bytes = 0;        // KV bytes per rank; 0: memory - weights per rank - reserve (the planner's)
  int64_t block_size = 16;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_context = 0;         // 0: the model's max context, else 8192
  bool prefix_caching = true;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct SimReport {
  int64_t n_blocks = 0;            // per replica
  int64_t kv_budget_bytes = 0;     // per rank
  int64_t weight_bytes_per_rank = 0;
  int64_t n_finished = 0, n_rejected = 0, n_preemptions = 0, n_steps = 0, n_output_tokens = 0;
  double makespan_s = 0, req_per_s = 0, out_tok_per_s = 0;
  Percentiles ttft_s, itl_s, e2e_s;
  double kv_usage_mean = 0, kv_usage_peak = 0;
  double linear_s = 0, attention_s = 0, comm_s = 0, overhead_s = 0;  // summed over every replica's steps
};

// The KV blocks one replica gets: the planner's arithmetic (kvstore/capacity). Throws InputError when the
// weights leave no room (the planner's numbers in the message).
int64_t sim_kv_blocks(const SimOptions& o, int64_t* budget_bytes = nullptr, int64_t* weight_bytes = nullptr);
// Checks tp/dp/nodes against the card and the model (InputError naming the option).
void validate_sim_options(const SimOptions& o);
SimReport simulate(const SimOptions& o, const Workload& w);

// p in [0, 100] of values (nearest rank on the sorted values); 0 when empty.
double percentile(std::vector<double> values, double p);

}  // namespace tp
