// The Llama forward pass on one rank of a tensor-parallel group, over a paged K/V pool.
//
// Sharding (parallel/tp_layout.h, Megatron style) lives in the parallel layers (rank/parallel_layers.h): each
// rank loads only its slice of every weight from the mapped file — Q/K/V rows of its heads (Q|K|V fused,
// column-parallel), O columns of its heads (row-parallel, all-reduced), gate|up rows and down columns of its
// intermediate range, embedding and lm_head rows of its vocab shard; norms replicated. Linear weights stay in
// the format they are stored in (dense ones in the runtime dtype, F32 or BF16; rank/weight_loader.h); the token
// embedding stays in the file's type and is read through the mapping.
//
// One step runs any number of sequences (a StepPlan's SeqPlans), each a run of new tokens at consecutive
// positions (a prefill chunk or one decode token). K/V of those tokens are written into the pool at the slots
// their block table gives, then attention reads every past position through the same table: there is no
// contiguous cache. Every rank of the group must call forward() with the same plan.
//
// The forward is written once against a Backend (rank/backend.h): the weights live in its memory and every op
// runs on it — kernels/cpu by default, the CUDA backend when model.device is cuda.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/model_config.h"
#include "kernels/cpu/linear.h"
#include "kvstore/kv_pool.h"
#include "parallel/communicator.h"
#include "parallel/step_plan.h"
#include "parallel/tp_layout.h"
#include "rank/backend.h"
#include "rank/model_file.h"
#include "rank/parallel_layers.h"

namespace tp {

// Seconds spent in the forwards, split by kind (accumulated until reset): total = linear + attention + comm +
// the rest (norms, rope, embedding lookups, KV writes).
struct ForwardTimes {
  double total_s = 0;
  double linear_s = 0;     // matrix products of the linear layers and the lm_head, communication excluded
  double attention_s = 0;  // paged attention
  double comm_s = 0;       // all-reduce + all-gather
  int64_t steps = 0;
};

// Called while the weights load: after each layer, with the layers done of n_layers and the bytes of weights
// this rank holds so far (the lm_head, converted first, included).
using LoadProgress = std::function<void(int64_t n_done, int64_t n_layers, int64_t bytes)>;

class LlamaModel {
 public:
  // runtime: F32 or BF16. comm: the TP group (nullptr or size 1: tp = 1). Throws InputError for an
  // impossible tp (naming the valid ones) or runtime dtype, FormatError for a missing or mis-shaped tensor, or
  // for a weight of this rank's slices holding NaN or ±inf in the file or after conversion to the runtime dtype
  // (naming the tensor and the first such element; one extra pass over the converted data).
  // backend: where the weights live and the forward runs (nullptr: cpu_backend()); it must outlive the model.
  LlamaModel(const ModelFile& file, DType runtime, Communicator* comm = nullptr, const LoadProgress& progress = {},
             Backend* backend = nullptr);
  // The same with every load option (rank/weight_loader.h: the runtime dtype, GGUF blocks kept or dequantized).
  LlamaModel(const ModelFile& file, const WeightLoadOptions& options, Communicator* comm = nullptr,
             const LoadProgress& progress = {}, Backend* backend = nullptr);
  LlamaModel(const LlamaModel&) = delete;  // the layers keep a pointer to times_
  LlamaModel& operator=(const LlamaModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const TpLayout& layout() const { return layout_; }
  Backend& backend() const { return *backend_; }
  // Bytes of weights this rank holds: its converted slices, the norms, and the rows of the mapped embedding
  // table it reads.
  int64_t resident_weight_bytes() const;

  // The pool shape this rank needs for n_blocks blocks of block_size tokens (local KV heads), K/V stored in
  // `dtype` (serving: cache.dtype; F32, the exact reference, for tests and tools that do not say).
  KvPoolShape kv_shape(int64_t n_blocks, int64_t block_size, KvDType dtype = KvDType::F32) const;

  // Runs one step. logits: [sum of seqs' n_logit_rows(), vocab] — per sequence in seqs order, the rows of its
  // prompt_targets (positions start_pos, start_pos + 1, ...) then, with want_logits, its last token's row;
  // complete on every rank.
  void forward(const std::vector<SeqPlan>& seqs, KvPool& pool, std::vector<float>& logits);

  // Bytes of activations (the backend's memory) forward() holds for a step of n_tokens tokens giving n_logit_rows
  // rows of logits: every scratch buffer at that size (they only grow). The activation peak of the largest step
  // the scheduler sends (kvstore/gpu_memory_plan.h); a counting backend measures the same (tests/rank).
  int64_t activation_bytes(int64_t n_tokens, int64_t n_logit_rows) const;

  ForwardTimes& times() { return times_; }
  // Steady-clock ns when the running forward last finished a layer (its all-reduces returned: every rank of
  // the group reached it); 0 before the first. Any thread (the stuck-step watchdog).
  int64_t progress_ns() const { return progress_ns_.load(std::memory_order_relaxed); }

  // Decode graphs (rank/cuda_graph_buckets.h): on a backend that supports them (CUDA) and at tp 1, a pure decode
  // step of n <= 128 sequences runs the graph of its bucket (padded with sequences that write nothing) and of
  // its context class (the smallest power of two >= 256 covering every position: attention's launch shape is
  // fixed by it), captured the first time the pair is seen (that step runs eagerly) and replayed after; every
  // graph is dropped when the backend allocates (a buffer may have moved). On by default; off with
  // set_graphs(false) or TPSERVE_CUDA_GRAPHS=0 in the environment.
  void set_graphs(bool on) { graphs_enabled_ = on; }
  // Graphs captured so far.
  int64_t n_graphs() const { return int64_t(graphs_.size()); }
  static constexpr int64_t kGraphMinContext = 256;

 private:
  // The step's host arrays (padded to pad_to sequences when > 0) into ids_/positions_/slots_, step_seqs_ and
  // attn_seqs_, copied to the backend's memory; returns the real logit rows.
  int64_t stage_step(const std::vector<SeqPlan>& seqs, int64_t block_size, int64_t pad_to);
  // Enqueues the forward of the staged step (seqs: step_seqs_) on the backend; returns its logits [rows, vocab]
  // in the backend's memory. fixed_ctx > 0: attention's launch shape for that context (graphs).
  float* enqueue_forward(const std::vector<SeqPlan>& seqs, KvPool& pool, int64_t fixed_ctx);

  struct Layer {
    DeviceBuffer attn_norm, ffn_norm;        // [hidden] F32
    ColumnParallelLinear qkv;                // [(local q + 2 local kv heads) head_dim, hidden]
    RowParallelLinear wo;                    // [hidden, local q heads head_dim], all-reduced
    ColumnParallelLinear gate_up;            // [2 local intermediate, hidden]
    RowParallelLinear down;                  // [hidden, local intermediate], all-reduced
  };

  ModelConfig cfg_;
  TpLayout layout_;
  Backend* backend_;
  ForwardTimes times_;                // before the layers, which keep &times_.comm_s
  std::atomic<int64_t> progress_ns_{0};
  VocabParallelEmbedding embd_;       // [vocab, hidden] in the file's type (only local rows are read)
  std::vector<Layer> layers_;
  DeviceBuffer output_norm_;          // [hidden] F32
  ParallelLmHead lm_head_;            // [local real vocab rows, hidden], gathered

  // Scratch, grown on demand: [n_tokens, ...]; host: the step's token ids, positions and slots as planned.
  DeviceBuffer x_, h_, qkv_, q_, k_, v_, attn_, gu_, mlp_, last_, logits_;
  DeviceBuffer d_ids_, d_positions_, d_slots_;  // copies of the host ones when the backend's memory is not host
  std::vector<int32_t> ids_, positions_;
  std::vector<int64_t> slots_;
  std::vector<Backend::AttentionSeq> attn_seqs_;  // the step's sequences for paged_attention_batch
  std::vector<SeqPlan> step_seqs_;                // the step's sequences, padding included

  bool single_rank_ = true;
  bool graphs_enabled_ = true;
  struct GraphKey {
    int64_t bucket, context;
    const void* pool;  // graphs hold the pool's addresses
    bool operator<(const GraphKey& o) const {
      return std::tie(bucket, context, pool) < std::tie(o.bucket, o.context, o.pool);
    }
  };
  struct Graph {
    int64_t graph;  // the backend's id
    float* logits;  // where its logits land
  };
  std::map<GraphKey, Graph> graphs_;
  int64_t graph_epoch_ = -1;  // the backend's allocation_epoch when the graphs were captured
};

}  // namespace tp
