// Capacity arithmetic: weight bytes, KV bytes per token and per sequence, how many KV blocks a rank's budget
// holds, and how many sequences fit. One source of truth for `tpserve plan` and the engine's start-up report.
// Pure arithmetic on numbers: no TP validation here — the caller computes the KV heads one rank holds
// (parallel/tp_layout: n_kv_heads / tp, or 1 when tp > n_kv_heads and KV heads are replicated).
//
// Units: every *_bytes is bytes; tokens are tokens. Sizes given by users parse with parse_byte_size:
// SI suffixes are powers of 1000 (K, KB, M, MB, G, GB, T, TB: "80GB" = 80e9), binary suffixes powers of 1024
// (KiB, MiB, GiB, TiB, also Ki, Mi, Gi, Ti: "80GiB" = 80 * 2^30); no suffix or B means bytes.
//
// KV model (DESIGN §4): one token of one full-attention layer holds 2 (K and V) x kv_heads x head_dim x
// dtype_bytes; a dtype with block scales (int8, common/kv_dtype.h) adds 2 x kv_heads x 4 B per block and layer
// (one F32 scale per block, KV head and tensor). A sliding-window layer holds only the last `sliding_window` tokens of a sequence, so past the
// window a token costs only the full-attention layers ("long-context" bytes per token).
// Paged allocation rounds a sequence up to whole blocks of `block_size` tokens: a full layer holds
// ceil(n / block_size) blocks, a sliding layer min(that, the blocks a window can straddle =
// ceil((window - 1) / block_size) + 1). block_size 1 gives the exact token count.
//
// Weight model (bits per parameter, scales included):
//   f32 32, bf16 16, fp8 8 and int8 8 (per-channel scales ignored: < 0.1%),
//   int4 4.5 (4-bit values + one f16 scale per group of 32), mxfp4 4.25 (32 e2m1 values + one e8m0 scale).
// A quantized format applies to the bulk of the weights and the rest stays bf16, as checkpoints ship:
//   MoE model:   the routed experts' parameters are quantized; attention, router, embeddings, norms are bf16
//                (gpt-oss-120b in mxfp4: 114.7 B expert params x 4.25 bits + 2.1 B x 16 bits = 65.2 GB).
//   dense model: everything but the token embedding, lm_head and norms is quantized.
// f32 and bf16 apply to every parameter. Weight bytes per rank = ceil(total / tp) (norms replicated and
// vocab padding ignored: < 0.01%).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/kv_dtype.h"
#include "common/model_config.h"

namespace tp {

inline constexpr int64_t kKiB = int64_t(1) << 10;
inline constexpr int64_t kMiB = int64_t(1) << 20;
inline constexpr int64_t kGiB = int64_t(1) << 30;

// Parses "80GB", "80GiB", "15G", "512MiB", "1.5TB", "4096" (case-insensitive suffix, optional space).
// Throws InputError naming `what` (e.g. "--gpu-mem") and the text on garbage, a negative or non-finite
// number, or a value that does not fit in int64.
int64_t parse_byte_size(std::string_view text, std::string_view what);
// "65.19 GB" (SI, 2 decimals) for >= 1e9, "75.50 MB", "36.00 KB", "512 B".
std::string format_si_bytes(int64_t bytes);
// "60.71 GiB", "72.00 KiB", "512 B" (binary units).
std::string format_binary_bytes(int64_t bytes);

// What the planner needs to know about a model. Counts > 0 unless stated.
struct ModelShape {
  std::string name;
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;       // feed-forward length (per expert for MoE)
  int64_t vocab = 0;
  int64_t max_context = 0;        // trained context; 0: unknown
  bool tied_embeddings = false;
  int64_t n_params = 0;           // total parameters
  int64_t n_active_params = 0;    // parameters used per token (MoE: shared + top-k experts); = n_params if dense
  int64_t n_expert_params = 0;    // parameters inside the routed experts; 0 if dense
  int64_t n_experts = 0;          // routed experts per layer; 0 if dense
  int64_t n_experts_per_token = 0;
  int64_t n_sliding_layers = 0;   // layers with sliding-window attention, [0, n_layers]
  int64_t sliding_window = 0;     // tokens a sliding layer keeps; > 0 when n_sliding_layers > 0
  // A model file's weights as stored (0: a card): the bytes of its tensors — quantized blocks, packed codes, scales,
  // dense embedding and norms — and what they are ("gguf q4_1 + q8_0", "compressed-tensors pack-quantized", "bf16").
  int64_t stored_bytes = 0;
  std::string stored_format;

  bool is_moe() const { return n_expert_params > 0; }
  // Parameters of the token embedding, the lm_head (unless tied) and the RMSNorm weights.
  int64_t n_embedding_and_norm_params() const;
};

// The shape of a model file's header; n_params = the sum of its tensors' elements (given by the caller).
// Dense, no sliding window.
ModelShape model_shape_from(const ModelConfig& config, int64_t n_params);

// ---- weights ----

// Stored: a model file's own bytes (ModelShape::stored_bytes), whatever mix of formats it holds.
enum class PlanFormat : uint8_t { F32, BF16, FP8, INT8, INT4, MXFP4, Stored };

// "f32", "bf16", "fp8", "int8", "int4", "mxfp4", "stored" (case-insensitive). Throws InputError listing them.
PlanFormat parse_plan_format(std::string_view name);
std::string_view plan_format_name(PlanFormat f);
// Bits per parameter including scales (table above); Stored: 0 (the file's own: WeightBytes::bits_per_param).
double plan_format_bits(PlanFormat f);

struct WeightBytes {
  PlanFormat format = PlanFormat::BF16;
  int64_t n_format_params = 0;    // parameters stored in `format`
  int64_t n_bf16_params = 0;      // the rest, stored in bf16 (0 when format is f32 or bf16)
  int64_t total_bytes = 0;        // all ranks together
  int64_t per_rank_bytes = 0;     // ceil(total_bytes / tp)
  double bits_per_param = 0;      // of `format` (plan_format_bits); Stored: total_bytes × 8 / the parameters
};
// Stored: total_bytes = shape.stored_bytes (InputError when 0: a card has no file).
WeightBytes weight_bytes(const ModelShape& shape, PlanFormat format, int64_t tp);

// GPUs needed to hold the weights alone: ceil(total_weight_bytes / (gpu_mem - reserve)); -1 when nothing
// is usable (reserve >= gpu_mem).
int64_t min_gpus_for_weights(int64_t total_weight_bytes, int64_t gpu_mem_bytes, int64_t reserve_bytes);
// KV budget of one rank: gpu_mem - weights_per_rank - reserve (may be negative: does not fit).
inline int64_t kv_budget_bytes(int64_t gpu_mem_bytes, int64_t weight_bytes_per_rank, int64_t reserve_bytes) {
  return gpu_mem_bytes - weight_bytes_per_rank - reserve_bytes;
}

// ---- KV cache ----

// What a KV cache dtype costs. The sizes are common/kv_dtype.h's (the one statement of them, shared with the
// pool and the kernels): the start-up report, `tpserve plan`, /metrics and KvPool all take them from here.
struct KvCost {
  std::string name = "bf16";  // "bf16", "f32", "fp8_e4m3", "int8", or "f16" (planning only)
  int64_t dtype_bytes = 2;    // per element
  int64_t scale_bytes = 0;    // per (block, KV head) of K and of V in one layer: 4 for int8 with block scales
};
// The cost of a pool of dtype t; tensor_scales: fp8 / int8 scaled per layer tensor (no block scales).
KvCost kv_cost(KvDType t, bool tensor_scales = false);
// Parses `tpserve plan --kv-dtype`: a cache.dtype name (bf16, f32, fp8_e4m3, int8 with block scales), "fp8"
// (= fp8_e4m3) or "f16" (2 bytes: planning for GPUs; the CPU pool does not store it); case-insensitive. Throws
// InputError listing them.
KvCost parse_kv_cost(std::string_view name);

// What one token costs in the KV cache of `kv_heads` KV heads (all of a model's, or one rank's).
struct KvFootprint {
  std::string dtype;               // the KvCost's name; empty when made from dtype_bytes alone
  int64_t n_layers = 0;
  int64_t n_sliding_layers = 0;
  int64_t sliding_window = 0;
  int64_t kv_heads = 0;            // KV heads held (per rank: local, replicated ones counted)
  int64_t head_dim = 0;
  int64_t dtype_bytes = 0;
  int64_t scale_bytes = 0;            // per (block, KV head, tensor) of one layer (KvCost::scale_bytes)
  int64_t layer_bytes_per_token = 0;  // 2 x kv_heads x head_dim x dtype_bytes
  int64_t layer_scale_bytes_per_block = 0;  // 2 x kv_heads x scale_bytes
  int64_t bytes_per_token = 0;        // every layer: the cost of a token within the window (scales excluded)
  int64_t long_bytes_per_token = 0;   // full-attention layers only: a token past the window; = bytes_per_token
                                      // without sliding layers
  int64_t scale_bytes_per_block = 0;  // every layer: n_layers x layer_scale_bytes_per_block

  // One block of block_size tokens in every layer, scales included: what KvPool allocates per block.
  int64_t block_bytes(int64_t block_size) const { return block_size * bytes_per_token + scale_bytes_per_block; }
};
// kv_heads: the model's n_kv_heads for the whole model, or a rank's local KV heads (>= 1).
KvFootprint kv_footprint(const ModelShape& shape, int64_t kv_heads, const KvCost& cost);
// The same without scales or a dtype name (kv_dtype_bytes per element).
KvFootprint kv_footprint(const ModelShape& shape, int64_t kv_heads, int64_t kv_dtype_bytes);

// KV bytes one sequence of `tokens` tokens holds, rounded up to whole blocks (block_size 1: exact).
int64_t kv_bytes_for_context(const KvFootprint& fp, int64_t tokens, int64_t block_size = 1);

// A uniform paged pool (as KvPool): every layer has n_blocks blocks of block_size tokens.
struct KvPoolPlan {
  int64_t budget_bytes = 0;
  int64_t block_size = 0;          // tokens per block
  int64_t block_bytes = 0;         // fp.block_bytes(block_size): block_size x bytes_per_token + block scales
  int64_t n_blocks = 0;            // floor(budget / block_bytes); 0 when the budget is <= 0
  int64_t token_capacity = 0;      // n_blocks x block_size
};
KvPoolPlan kv_pool_plan(const KvFootprint& fp, int64_t budget_bytes, int64_t block_size);

// How many sequences of `tokens` tokens fit in a budget. A static max-context reservation is
// concurrency(fp, budget, max_context, bs); paged allocation at a mean length L is concurrency(fp, budget, L, bs).
struct Concurrency {
  int64_t tokens = 0;              // per sequence
  int64_t bytes_per_seq = 0;       // kv_bytes_for_context(fp, tokens, block_size)
  int64_t n_seqs = 0;              // floor(budget / bytes_per_seq); 0 when the budget is <= 0
};
Concurrency concurrency(const KvFootprint& fp, int64_t budget_bytes, int64_t tokens, int64_t block_size);

// The engine's start-up lines for one rank (fp: per rank), each ending in '\n':
//   KV cache per rank: 46080 B/token (2 x 30 layers x 3 KV heads x 64 x 4 B f32), block 16 tokens = 737280 B
//   KV pool per rank: 728 blocks = 11648 tokens in 536870912 B (512.00 MiB)
//   max concurrency: 1 at the max context of 8192 tokens, 5 at 2048, 1 at 8192
// plus, with sliding layers, the long-context bytes per token on the first line, and with block scales (int8)
//   "..., + 720 B/block of scales (2 x 30 layers x 3 KV heads x 4 B), block 16 tokens = 185040 B".
// The dtype name follows the element bytes when fp.dtype is set.
std::string capacity_report(const KvFootprint& fp, int64_t budget_bytes, int64_t block_size, int64_t max_context);

}  // namespace tp
