#include "coordinator/sim_run.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <queue>

#include "common/error.h"
#include "coordinator/scheduler.h"
#include "coordinator/sim_executor.h"

namespace tp {
namespace {

struct Replica {
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<SimExecutor> exec;
  double clock = 0;
};

struct Track {
  double arrival = -1, first = -1, last = -1;
  int64_t n_out = 0;
};

Percentiles summarize(const std::vector<double>& v) {
  Percentiles p;
  if (v.empty()) return p;
  p.p50 = percentile(v, 50);
  p.p90 = percentile(v, 90);
  p.p99 = percentile(v, 99);
  double s = 0;
  for (double x : v) s += x;
  p.mean = s / double(v.size());
  return p;
}

int64_t context_of(const SimOptions& o) {
  return o.max_context > 0 ? o.max_context : (o.model.max_context > 0 ? o.model.max_context : 8192);
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(p / 100 * double(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

void validate_sim_options(const SimOptions& o) {
  if (o.tp < 1) throw InputError("simulate: --tp must be >= 1");
  if (o.dp < 1) throw InputError("simulate: --dp must be >= 1");
  if (o.nodes < 1) throw InputError("simulate: --nodes must be >= 1");
  if (o.model.n_heads % o.tp != 0)
    throw InputError("simulate: --tp " + std::to_string(o.tp) + " must divide the " + std::to_string(o.model.n_heads) +
                     " attention heads of " + o.model.name);
  const int64_t devices = o.nodes * o.hw.devices_per_node;
  if (o.tp * o.dp > devices)
    throw InputError("simulate: --tp " + std::to_string(o.tp) + " x --dp " + std::to_string(o.dp) + " = " +
                     std::to_string(o.tp * o.dp) + " devices; " + std::to_string(o.nodes) + " node(s) of " +
                     o.hw.name + " hold " + std::to_string(devices));
  if (o.block_size < 1) throw InputError("simulate: --block-size must be >= 1");
}

int64_t sim_kv_blocks(const SimOptions& o, int64_t* budget_out, int64_t* weights_out) {
  const WeightBytes wb = weight_bytes(o.model, o.weights, o.tp);
  const int64_t kv_heads = std::max<int64_t>(1, o.model.n_kv_heads / o.tp);
  const KvFootprint fp = kv_footprint(o.model, kv_heads, o.kv);
  const int64_t budget =
      o.kv_mem_bytes > 0 ? o.kv_mem_bytes : kv_budget_bytes(o.hw.memory_bytes, wb.per_rank_bytes, o.hw.reserve_bytes);
  const KvPoolPlan pool = kv_pool_plan(fp, budget, o.block_size);
  if (budget_out) *budget_out = budget;
  if (weights_out) *weights_out = wb.per_rank_bytes;
  if (pool.n_blocks < 1)
    throw InputError("simulate: " + o.model.name + " does not fit at tp " + std::to_string(o.tp) + " on " + o.hw.name +
                     ": weights " + format_si_bytes(wb.per_rank_bytes) + " per rank + reserve " +
                     format_si_bytes(o.hw.reserve_bytes) + " of " + format_si_bytes(o.hw.memory_bytes) +
                     " leave no KV block of " + format_si_bytes(pool.block_bytes));
  return std::min<int64_t>(pool.n_blocks, std::numeric_limits<int32_t>::max());
}

SimReport simulate(const SimOptions& o, const Workload& w) {
  validate_sim_options(o);
  SimReport rep;
  rep.n_blocks = sim_kv_blocks(o, &rep.kv_budget_bytes, &rep.weight_bytes_per_rank);
  SchedulerConfig sc;
  sc.n_blocks = int32_t(rep.n_blocks);
  sc.block_size = int32_t(o.block_size);
  sc.max_num_seqs = o.max_num_seqs;
  sc.max_num_batched_tokens = o.max_num_batched_tokens;
  sc.max_context = context_of(o);
  sc.prefix_caching = o.prefix_caching;
  const CostModel model(o.model, o.hw, o.tp, o.weights, o.kv);
  std::vector<Replica> reps(size_t(o.dp));
  for (Replica& r : reps) {
    r.sched = std::make_unique<Scheduler>(sc);
    r.exec = std::make_unique<SimExecutor>(model);
  }

  const int64_t n = int64_t(w.requests.size());
  std::vector<Track> track(static_cast<size_t>(n));
  // Arrivals: (time, request index), earliest first, ties by index.
  using Arrival = std::pair<double, int64_t>;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals;
  int64_t next_closed = 0;
  const bool closed = w.concurrency > 0;  // a trace too: its requests in file order, arrivals ignored
  if (closed) {
    for (; next_closed < std::min(n, w.concurrency); ++next_closed) arrivals.push({0.0, next_closed});
  } else {
    for (int64_t i = 0; i < n; ++i) arrivals.push({w.requests[size_t(i)].arrival_s, i});
  }
  auto release_next = [&](double t) {
    if (closed && next_closed < n) arrivals.push({t, next_closed++});
  };

  int64_t rr = 0;
  std::vector<double> ttft, itl, e2e;
  double kv_sum = 0;
  int64_t kv_samples = 0;
  double first_arrival = std::numeric_limits<double>::infinity(), last_finish = 0;

  for (;;) {
    // The busy replica that finishes its step soonest.
    Replica* busy = nullptr;
    for (Replica& r : reps)
      if (!r.sched->idle() && (!busy || r.clock < busy->clock)) busy = &r;
    if (!arrivals.empty() && (!busy || arrivals.top().first <= busy->clock)) {
      const auto [t, i] = arrivals.top();
      arrivals.pop();
      const SimRequest& req = w.requests[size_t(i)];
      track[size_t(i)].arrival = t;
      first_arrival = std::min(first_arrival, t);
      if (req.prompt_len + req.output_len - 1 > sc.max_context ||
          sc.blocks_for(req.prompt_len + req.output_len) > sc.n_blocks) {
        ++rep.n_rejected;
        release_next(t);
        continue;
      }
      Replica& r = reps[size_t(rr++ % o.dp)];
      if (r.sched->idle()) r.clock = std::max(r.clock, t);
      auto s = std::make_unique<Sequence>();
      s->id = i;
      s->request_id = i;
      s->tokens = req.prompt;
      s->n_prompt = req.prompt_len;
      s->max_tokens = req.output_len;
      s->ignore_eos = true;
      r.sched->add(std::move(s));
      continue;
    }
    if (!busy) break;
    ScheduledStep step = busy->sched->schedule();
    if (step.empty()) throw Error("simulate: the scheduler planned nothing with work waiting (a request larger than the pool?)");
    StepResult result;
    busy->exec->execute(step.plan, result);
    const StepCost& c = busy->exec->last_cost();
    busy->clock += c.total_s();
    rep.linear_s += c.linear_s + c.lm_head_s;
    rep.attention_s += c.attention_s;
    rep.comm_s += c.comm_s;
    rep.overhead_s += c.overhead_s;
    ++rep.n_steps;
    busy->sched->commit(step);
    const double now = busy->clock;
    for (size_t k = 0; k < result.seq_ids.size(); ++k) {
      const int64_t id = result.seq_ids[k];
      Sequence* s = busy->sched->find(id);
      Track& tr = track[size_t(id)];
      if (tr.first < 0) {
        tr.first = now;
        ttft.push_back(now - tr.arrival);
      } else {
        itl.push_back(now - tr.last);
      }
      tr.last = now;
      ++tr.n_out;
      ++rep.n_output_tokens;
      s->tokens.push_back(result.tokens[k]);
      if (s->n_generated() >= s->max_tokens) {
        busy->sched->remove(id);
        e2e.push_back(now - tr.arrival);
        ++rep.n_finished;
        last_finish = std::max(last_finish, now);
        release_next(now);
      }
    }
    const BlockManager& bm = busy->sched->block_manager();
    const double used = double(bm.n_in_use()) / double(bm.n_blocks());
    kv_sum += used;
    ++kv_samples;
    rep.kv_usage_peak = std::max(rep.kv_usage_peak, used);
  }
  for (const Replica& r : reps) rep.n_preemptions += r.sched->n_preemptions();
  rep.makespan_s = rep.n_finished > 0 ? last_finish - first_arrival : 0;
  if (rep.makespan_s > 0) {
    rep.req_per_s = double(rep.n_finished) / rep.makespan_s;
    rep.out_tok_per_s = double(rep.n_output_tokens) / rep.makespan_s;
  }
  rep.ttft_s = summarize(ttft);
  rep.itl_s = summarize(itl);
  rep.e2e_s = summarize(e2e);
  rep.kv_usage_mean = kv_samples > 0 ? kv_sum / double(kv_samples) : 0;
  return rep;
}

}  // namespace tp
