// Hardware card for the simulator (configs/hardware/NAME.yaml): what one device (a GPU, or a CPU rank) and
// its links can do. Read by `tpserve simulate --gpu NAME`; the cost model (coordinator/sim_cost_model.h) turns
// it into step times.
//
// Units: FLOP/s, bytes/s (10^9 = GB/s), seconds, bytes. Every field is required unless marked optional:
//   name                   text
//   memory                 device memory, a byte size ("80GB", "141GB", "8GiB")
//   reserve                room for everything but weights and KV (optional, default "3GiB"; as `tpserve plan`)
//   peak_bf16_tflops       dense BF16 tensor peak, TFLOP/s
//   peak_fp8_tflops        dense FP8 peak, TFLOP/s (optional; 0: the BF16 peak is used for every format)
//   hbm_tbps               memory bandwidth, TB/s
//   mem_efficiency         fraction of hbm_tbps reached streaming weights / KV, (0, 1]
//   compute_efficiency     fraction of peak a large GEMM reaches, (0, 1]
//   m_half                 GEMM rows (tokens) at which efficiency(M) reaches half of compute_efficiency, >= 0:
//                          efficiency(M) = compute_efficiency x M / (M + m_half)
//   attention_efficiency   fraction of peak attention's FLOPs reach, (0, 1]
//   devices_per_node       devices one node holds (the NVLink domain), >= 1
//   intra_node_gbps, intra_node_latency_us   one device's all-reduce bandwidth and per-hop latency in a node
//   inter_node_gbps, inter_node_latency_us   the same across nodes (InfiniBand / Ethernet, per device)
//   step_overhead_us       fixed cost of one engine step (scheduling, plan broadcast, launches)
//   token_overhead_us      cost per token of a step outside the linear layers and attention (embedding, norms,
//                          rope, activations, KV writes) (optional, 0)
//   logit_overhead_us      cost per row that wants logits, beyond the lm_head GEMM (sampling over the vocabulary,
//                          detokenizing, streaming) (optional, 0)
//   act_bytes              bytes per activation element in an all-reduce (2: bf16, 4: f32) (optional, 2)
// A bad card is refused with a ConfigError naming the file and the field.
#pragma once
#include <cstdint>
#include <string>

namespace tp {

struct LinkSpec {
  double bandwidth_Bps = 0;  // bytes/s one device sends in a ring step (bus bandwidth), > 0
  double latency_s = 0;      // alpha: per hop, >= 0
};

struct HardwareCard {
  std::string name;
  int64_t memory_bytes = 0;
  int64_t reserve_bytes = int64_t(3) << 30;
  double peak_bf16_flops = 0;  // FLOP/s
  double peak_fp8_flops = 0;   // FLOP/s; 0: none
  double mem_Bps = 0;          // bytes/s
  double mem_efficiency = 1;
  double compute_efficiency = 1;
  double m_half = 0;
  double attention_efficiency = 1;
  int64_t devices_per_node = 1;
  LinkSpec intra, inter;
  double step_overhead_s = 0;
  double token_overhead_s = 0;  // per token of the step
  double logit_overhead_s = 0;  // per row that wants logits
  int64_t act_bytes = 2;

  // Throws ConfigError(where, field, reason) naming the first bad field.
  void validate(const std::string& where) const;
};

// Reads and validates a card. Throws ConfigError naming the file and the field.
HardwareCard load_hardware_card(const std::string& path);

}  // namespace tp
