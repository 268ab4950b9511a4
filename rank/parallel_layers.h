// Tensor-parallel layers (Megatron style, parallel/tp_layout.h): each owns its slice of the weights and the
// communication its output needs, so the model's forward pass reads as the model.
//   ColumnParallelLinear  y = x · W_rowsᵀ: this rank's output rows (fused Q|K|V, gate|up); no communication.
//   RowParallelLinear     y = Σ_ranks x_cols · W_colsᵀ: this rank's input columns, then the all-reduce.
//   VocabParallelEmbedding  rows of the token table this rank holds (read through the mapping in the file's
//                         type); the others' rows are zero and the all-reduce fills them in.
//   ParallelLmHead        logits of this rank's vocab shard, all-gathered to [n, vocab] on every rank.
// Weights stay in the format they are stored in (rank/weight_loader.h); a fused layer may hold several
// weights (a GGUF mix that keeps attn_v in Q6_K beside Q4_K attn_q), run one after the other into their rows.
// Communication time is added to `comm_s` (seconds) when given. Shapes: x [m, n_in] and y [m, n_out], F32, in
// the backend's memory (rank/backend.h): every layer holds its weights and runs its ops on one Backend.
#pragma once
#include <cstdint>
#include <vector>

#include <memory>

#include "kernels/cpu/linear.h"
#include "parallel/communicator.h"
#include "rank/backend.h"
#include "parallel/tp_layout.h"
#include "rank/model_file.h"
#include "rank/weight_loader.h"

namespace tp {

// Weights stacked by rows: y[:, rows of weight i] = x · W_iᵀ.
class StackedLinear {
 public:
  StackedLinear() = default;
  // The parts uploaded to `backend` (which must outlive the layer).
  StackedLinear(Backend& backend, std::vector<cpu::Weight> parts);
  void forward(const float* x, int64_t m, float* y) const;
  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  int64_t n_bytes() const;
  const std::vector<std::unique_ptr<LinearWeight>>& parts() const { return parts_; }
  // Bytes of scratch forward() holds for m rows: [m, the largest part's rows] F32 when there are several parts.
  int64_t scratch_bytes(int64_t m) const;

 private:
  Backend* backend_ = nullptr;
  std::vector<std::unique_ptr<LinearWeight>> parts_;
  int64_t n_out_ = 0, n_in_ = 0;
  mutable DeviceBuffer scratch_;  // [m, part rows] when there are several parts
};

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;
  // The row slices `parts` (this rank's rows of each fused tensor [total_rows, n_in]), every column.
  ColumnParallelLinear(Backend& backend, const ModelFile& f, const WeightLoadOptions& o, int64_t n_in,
                       const std::vector<RowSlice>& parts);
  void forward(const float* x, int64_t m, float* y) const { w_.forward(x, m, y); }
  int64_t n_bytes() const { return w_.n_bytes(); }
  const StackedLinear& weight() const { return w_; }
  int64_t scratch_bytes(int64_t m) const { return w_.scratch_bytes(m); }

 private:
  StackedLinear w_;
};

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // Tensor `name` [n_out, n_in_total], this rank's input columns `cols`. comm: the TP group (nullptr: tp 1).
  RowParallelLinear(Backend& backend, const ModelFile& f, const WeightLoadOptions& o, const std::string& name,
                    int64_t n_out, int64_t n_in_total, Range cols, Communicator* comm, double* comm_s = nullptr);
  // y = the sum over ranks (every rank gets it).
  void forward(const float* x, int64_t m, float* y) const;
  int64_t n_bytes() const { return w_.n_bytes(); }
  int64_t scratch_bytes(int64_t m) const { return w_.scratch_bytes(m); }

 private:
  Backend* backend_ = nullptr;
  StackedLinear w_;
  Communicator* comm_ = nullptr;
  double* comm_s_ = nullptr;
};

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  // token_embd.weight [vocab, hidden], this rank's rows `rows`; NaN / inf in them refused at load.
  VocabParallelEmbedding(Backend& backend, const ModelFile& f, Range rows, Communicator* comm,
                         double* comm_s = nullptr);
  // x [n, hidden] for token ids [n] (in [0, vocab); backend memory).
  void forward(const int32_t* ids, int64_t n, float* x) const;
  // Bytes of the rows this rank reads.
  int64_t n_bytes() const;

 private:
  Backend* backend_ = nullptr;
  std::unique_ptr<EmbeddingTable> table_;
  int64_t hidden_ = 0;
  Communicator* comm_ = nullptr;
  double* comm_s_ = nullptr;
};

class ParallelLmHead {
 public:
  ParallelLmHead() = default;
  // output.weight, or token_embd.weight for tied models; this rank's shard of the layout's vocab rows.
  ParallelLmHead(Backend& backend, const ModelFile& f, const WeightLoadOptions& o, const TpLayout& layout,
                 Communicator* comm, double* comm_s = nullptr);
  // logits [n, vocab] (complete on every rank) for hidden states h [n, hidden].
  void forward(const float* h, int64_t n, float* logits) const;
  // Bytes of scratch forward() holds for n rows (its weight's, and with a TP group the shard and the gather).
  int64_t scratch_bytes(int64_t n) const;
  int64_t n_bytes() const { return w_.n_bytes(); }

 private:
  Backend* backend_ = nullptr;
  StackedLinear w_;
  int64_t vocab_ = 0, local_ = 0, real_ = 0;  // vocab; rows a shard pads to; this rank's real rows
  int tp_ = 1;
  Communicator* comm_ = nullptr;
  double* comm_s_ = nullptr;
  mutable DeviceBuffer tmp_, shard_, gathered_;
};

}  // namespace tp
