#include "coordinator/sim_cost_model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace tp {

double ring_all_reduce_s(double bytes, int64_t n, const LinkSpec& link) {
  if (n <= 1) return 0;
  const double k = double(n - 1);
  return 2 * k / double(n) * bytes / link.bandwidth_Bps + 2 * k * link.latency_s;
}

double gemm_efficiency(const HardwareCard& hw, double m) {
  if (m <= 0) return hw.compute_efficiency;
  return hw.compute_efficiency * m / (m + hw.m_half);
}

double roofline_s(const HardwareCard& hw, double peak_flops, double flops, double bytes, double m) {
  const double compute = flops > 0 ? flops / (peak_flops * gemm_efficiency(hw, m)) : 0;
  const double memory = bytes / (hw.mem_Bps * hw.mem_efficiency);
  return std::max(compute, memory);
}

CostModel::CostModel(const ModelShape& shape, const HardwareCard& hw, int64_t tp, PlanFormat weights,
                     const KvCost& kv)
    : shape_(shape), hw_(hw), tp_(tp) {
  if (tp < 1) throw InputError("simulate: tp must be >= 1");
  const bool fp8 = weights == PlanFormat::FP8 || weights == PlanFormat::INT8;
  peak_ = fp8 && hw.peak_fp8_flops > 0 ? hw.peak_fp8_flops : hw.peak_bf16_flops;
  weight_bytes_per_param_ = weight_bytes(shape, weights, 1).bits_per_param / 8;  // Stored: the file's mean
  const double h = double(shape.hidden), hd = double(shape.head_dim);
  attn_params_ = h * double(shape.n_heads + 2 * shape.n_kv_heads) * hd + double(shape.n_heads) * hd * h;
  if (shape.is_moe()) attn_params_ += h * double(shape.n_experts);  // router
  mlp_params_ = 3 * h * double(shape.intermediate);
  local_heads_ = std::max<int64_t>(1, shape.n_heads / tp);
  local_kv_heads_ = std::max<int64_t>(1, shape.n_kv_heads / tp);
  fp_ = kv_footprint(shape, local_kv_heads_, kv);
  link_ = tp > hw.devices_per_node ? hw.inter : hw.intra;
}

StepCost CostModel::step(const StepPlan& plan) const {
  std::vector<Chunk> chunks;
  chunks.reserve(plan.seqs.size());
  for (const SeqPlan& s : plan.seqs) chunks.push_back({s.start_pos, int64_t(s.tokens.size()), s.want_logits});
  return step(chunks);
}

namespace {

// sum_{i=0}^{n-1} min(s + i + 1, cap): the context the new tokens [s, s + n) attend to.
double attended(int64_t s, int64_t n, int64_t cap) {
  const int64_t lo = s + 1, hi = s + n;  // contexts run lo..hi
  if (cap <= 0 || hi <= cap) return 0.5 * double(lo + hi) * double(n);
  if (lo >= cap) return double(cap) * double(n);
  const int64_t k = cap - lo + 1;  // terms below or at cap
  return 0.5 * double(lo + cap) * double(k) + double(cap) * double(n - k);
}

}  // namespace

StepCost CostModel::step(const std::vector<Chunk>& chunks) const {
  StepCost c;
  int64_t m = 0, n_logits = 0;
  double attn_flops = 0, kv_bytes = 0;
  const int64_t n_full = shape_.n_layers - shape_.n_sliding_layers;
  const double per_token_layer = double(fp_.layer_bytes_per_token);
  for (const Chunk& ch : chunks) {
    m += ch.n;
    n_logits += ch.want_logits ? 1 : 0;
    const double ctx_full = attended(ch.start, ch.n, 0);
    const double ctx_slide = attended(ch.start, ch.n, shape_.sliding_window);
    attn_flops += 4.0 * double(shape_.head_dim) * double(local_heads_) *
                  (double(n_full) * ctx_full + double(shape_.n_sliding_layers) * ctx_slide);
    const int64_t end = ch.start + ch.n;
    const int64_t slide_end = shape_.sliding_window > 0 ? std::min(end, shape_.sliding_window) : end;
    kv_bytes += per_token_layer * (double(n_full) * double(end) + double(shape_.n_sliding_layers) * double(slide_end));
  }
  if (m == 0) return c;
  const double tp = double(tp_), layers = double(shape_.n_layers), md = double(m);
  // Linear layers.
  double active_mlp = mlp_params_, touched_mlp = mlp_params_;
  if (shape_.is_moe()) {
    const double e = double(shape_.n_experts), k = double(shape_.n_experts_per_token);
    active_mlp = k * mlp_params_;
    touched_mlp = e * (1 - std::pow(1 - k / e, md)) * mlp_params_;
  }
  const double attn_bytes_per_param = shape_.is_moe() ? 2.0 : weight_bytes_per_param_;
  const double mlp_bytes_per_param = weight_bytes_per_param_;
  const double flops = 2 * md * layers * (attn_params_ + active_mlp) / tp;
  const double bytes = layers * (attn_params_ * attn_bytes_per_param + touched_mlp * mlp_bytes_per_param) / tp;
  c.linear_s = roofline_s(hw_, peak_, flops, bytes, md);
  if (n_logits > 0) {
    const double head = double(shape_.hidden) * double(shape_.vocab) / tp;
    c.lm_head_s = roofline_s(hw_, peak_, 2 * double(n_logits) * head, attn_bytes_per_param * head, double(n_logits));
  }
  const double attn_compute = attn_flops / (hw_.peak_bf16_flops * hw_.attention_efficiency);
  c.attention_s = std::max(attn_compute, kv_bytes / (hw_.mem_Bps * hw_.mem_efficiency));
  c.comm_s = 2 * layers * ring_all_reduce_s(md * double(shape_.hidden) * double(hw_.act_bytes), tp_, link_);
  c.overhead_s = hw_.step_overhead_s + hw_.token_overhead_s * md + hw_.logit_overhead_s * double(n_logits);
  return c;
}

}  // namespace tp
