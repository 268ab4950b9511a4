// The simulator's cost model: how long one engine step (a StepPlan) takes on one TP group of a hardware card.
// Roofline per part, per rank (every rank of a TP group does 1/tp of the work in lockstep):
//   linear     max(FLOPs / (peak x efficiency(M)), weight bytes / (mem_Bps x mem_efficiency)); peak = the
//              FP8 peak for fp8/int8 weights when the card has one, else the BF16 peak
//              FLOPs = 2 x M x active linear params / tp (M = tokens in the step); weight bytes: every linear
//              weight of a dense model / tp; for MoE the attention + router weights and the experts the step
//              touches, E x (1 - (1 - k/E)^M) per layer (expected distinct experts of M uniform top-k picks).
//              efficiency(M) = compute_efficiency x M / (M + m_half).
//   lm_head    the same roofline for the rows that want logits (hidden x vocab / tp weights, in the weight
//              format for a dense model, bf16 for MoE as kvstore/capacity counts them).
//   attention  max(FLOPs / (peak x attention_efficiency), KV bytes / (mem_Bps x mem_efficiency)); per sequence
//              of the plan, with its chunk at positions [s, s + n): FLOPs = 4 x head_dim x heads/tp x
//              sum over its new tokens of the context they attend to (capped at the window on sliding layers);
//              KV bytes = the context's K and V read once per layer (per-rank KV heads, kvstore/capacity).
//   comm       2 all-reduces per layer of M x hidden x act_bytes, ring over tp ranks on the slowest link they
//              span (NVLink within a node, the inter-node link once tp > devices_per_node):
//              t = 2(n-1)/n x bytes / beta + 2(n-1) x alpha.
//   overhead   step_overhead_s + token_overhead_s x M + logit_overhead_s x (rows that want logits): the fixed
//              cost of a step, the per-token work outside GEMMs and attention (embedding, norms, rope,
//              activations, KV writes), and per-row sampling.
// Not modelled: the logits all-gather, overlap of parts.
#pragma once
#include <cstdint>

#include "coordinator/sim_hardware.h"
#include "kvstore/capacity.h"
#include "parallel/step_plan.h"

namespace tp {

// Ring all-reduce of `bytes` over n ranks: 2(n-1)/n x bytes / link.bandwidth + 2(n-1) x link.latency; 0 for n <= 1.
double ring_all_reduce_s(double bytes, int64_t n, const LinkSpec& link);
// efficiency(M) = compute_efficiency x M / (M + m_half).
double gemm_efficiency(const HardwareCard& hw, double m);
// max(flops / (peak x efficiency(m)), bytes / (mem_Bps x mem_efficiency)).
double roofline_s(const HardwareCard& hw, double peak_flops, double flops, double bytes, double m);

// Seconds of one step, by part.
struct StepCost {
  double linear_s = 0, lm_head_s = 0, attention_s = 0, comm_s = 0, overhead_s = 0;
  double total_s() const { return linear_s + lm_head_s + attention_s + comm_s + overhead_s; }
};

class CostModel {
 public:
  // tp: ranks of one TP group (>= 1). weights: the format of the linear weights. kv: the KV cache dtype.
  CostModel(const ModelShape& shape, const HardwareCard& hw, int64_t tp, PlanFormat weights, const KvCost& kv);

  // The cost of a plan of sequences, each (start position, tokens this step, wants logits).
  StepCost step(const StepPlan& plan) const;
  // The same from counts: one sequence chunk per entry.
  struct Chunk {
    int64_t start = 0, n = 0;
    bool want_logits = false;
  };
  StepCost step(const std::vector<Chunk>& chunks) const;

  const LinkSpec& tp_link() const { return link_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }

 private:
  ModelShape shape_;
  HardwareCard hw_;
  int64_t tp_;
  double peak_;                    // FLOP/s for the weights' GEMMs
  double weight_bytes_per_param_;  // bytes of one quantized linear parameter
  double attn_params_ = 0;         // per layer, whole model: QKV + O (+ router for MoE)
  double mlp_params_ = 0;          // per layer, dense MLP or one expert
  int64_t local_kv_heads_ = 0, local_heads_ = 0;
  KvFootprint fp_;                 // per rank
  LinkSpec link_;
};

}  // namespace tp
