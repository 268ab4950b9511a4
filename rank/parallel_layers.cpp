#include "rank/parallel_layers.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

using Clock = std::chrono::steady_clock;

// Runs f and adds its seconds to *acc (when given).
template <class F>
void timed(double* acc, F&& f) {
  const auto t0 = Clock::now();
  f();
  if (acc) *acc += std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// ------------------------------------------------------------------------------------------ StackedLinear
StackedLinear::StackedLinear(Backend& backend, std::vector<cpu::Weight> parts) : backend_(&backend) {
  for (cpu::Weight& w : parts) {
    if (n_out_ > 0 && w.n_in() != n_in_)
      throw Error("StackedLinear: parts of " + std::to_string(n_in_) + " and " + std::to_string(w.n_in()) + " columns");
    n_in_ = w.n_in();
    n_out_ += w.n_out();
    parts_.push_back(backend.upload(std::move(w)));
  }
}

void StackedLinear::forward(const float* x, int64_t m, float* y) const {
  if (parts_.size() == 1) {
    backend_->linear(*parts_[0], x, m, y);
    return;
  }
  int64_t r0 = 0;
  for (const auto& w : parts_) {  // each part into scratch, then into its columns of y
    float* part = grow_buffer<float>(*backend_, scratch_, m * w->n_out());
    backend_->linear(*w, x, m, part);
    backend_->copy_2d(y + r0, n_out_ * int64_t(sizeof(float)), part, w->n_out() * int64_t(sizeof(float)),
                      w->n_out() * int64_t(sizeof(float)), m);
    r0 += w->n_out();
  }
}

int64_t StackedLinear::scratch_bytes(int64_t m) const {
  if (parts_.size() <= 1) return 0;
  int64_t rows = 0;
  for (const auto& w : parts_) rows = std::max(rows, w->n_out());
  return m * rows * int64_t(sizeof(float));
}

int64_t StackedLinear::n_bytes() const {
  int64_t n = 0;
  for (const auto& w : parts_) n += w->n_bytes();
  return n;
}

// ----------------------------------------------------------------------------------- Column / Row parallel
ColumnParallelLinear::ColumnParallelLinear(Backend& backend, const ModelFile& f, const WeightLoadOptions& o,
                                           int64_t n_in, const std::vector<RowSlice>& parts)
    : w_(backend, load_linear(f, o, n_in, {0, n_in}, parts)) {}

RowParallelLinear::RowParallelLinear(Backend& backend, const ModelFile& f, const WeightLoadOptions& o,
                                     const std::string& name, int64_t n_out, int64_t n_in_total, Range cols,
                                     Communicator* comm, double* comm_s)
    : backend_(&backend),
      w_(backend, load_linear(f, o, n_in_total, cols, {{name, n_out, {0, n_out}}})),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      comm_s_(comm_s) {}

void RowParallelLinear::forward(const float* x, int64_t m, float* y) const {
  w_.forward(x, m, y);
  if (comm_) timed(comm_s_, [&] { backend_->all_reduce_sum(*comm_, y, m * w_.n_out()); });
}

// ------------------------------------------------------------------------------------------- Embedding
VocabParallelEmbedding::VocabParallelEmbedding(Backend& backend, const ModelFile& f, Range rows, Communicator* comm,
                                               double* comm_s)
    : backend_(&backend), comm_(comm && comm->size() > 1 ? comm : nullptr), comm_s_(comm_s) {
  const ModelConfig& c = f.config();
  hidden_ = c.hidden;
  const TensorView& table = f.require("token_embd.weight", {c.vocab, c.hidden});
  if (hidden_ % dtype_block_elems(table.dtype) != 0)
    throw FormatError(f.path(), "token_embd.weight", "row length is not a multiple of the block size");
  check_embedding_rows(f, table, hidden_, rows);
  table_ = backend.upload_embedding(table.data, table.dtype, dtype_row_bytes(table.dtype, hidden_), hidden_, rows);
}

void VocabParallelEmbedding::forward(const int32_t* ids, int64_t n, float* x) const {
  // With a TP group, rows outside this rank's shard are zero: the all-reduce fills them in.
  backend_->embedding(*table_, ids, n, comm_ != nullptr, x);
  if (comm_) timed(comm_s_, [&] { backend_->all_reduce_sum(*comm_, x, n * hidden_); });
}

int64_t VocabParallelEmbedding::n_bytes() const { return table_->n_bytes(); }

// ---------------------------------------------------------------------------------------------- lm_head
ParallelLmHead::ParallelLmHead(Backend& backend, const ModelFile& f, const WeightLoadOptions& o, const TpLayout& layout,
                               Communicator* comm, double* comm_s)
    : backend_(&backend),
      vocab_(f.config().vocab),
      local_(layout.vocab_rows.size()),
      real_(layout.local_real_vocab_rows()),
      tp_(layout.tp),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      comm_s_(comm_s) {
  // SmolLM2 and other tied models have no output.weight: the lm_head is the token embedding.
  const ModelConfig& c = f.config();
  const bool has_output = f.find("output.weight") != nullptr || f.find("output.weight_packed") != nullptr;
  const bool tied = c.tied_embeddings || !has_output;
  const Range rows{layout.vocab_rows.begin, layout.vocab_rows.begin + real_};
  w_ = StackedLinear(backend, load_linear(f, o, c.hidden, {0, c.hidden},
                                          {{tied ? "token_embd.weight" : "output.weight", c.vocab, rows}}));
}

int64_t ParallelLmHead::scratch_bytes(int64_t n) const {
  if (!comm_) return w_.scratch_bytes(n);
  if (n == 0) return 0;
  const int64_t f = sizeof(float);
  return w_.scratch_bytes(n) + n * local_ * f + n * std::max<int64_t>(real_, 1) * f + tp_ * n * local_ * f;
}

void ParallelLmHead::forward(const float* h, int64_t n, float* logits) const {
  if (!comm_) {
    w_.forward(h, n, logits);
    return;
  }
  if (n == 0) return;
  // Each rank computes its shard [n, local] (padded rows -inf), then every rank gathers [tp, n, local] and keeps
  // the real vocab columns.
  Backend& b = *backend_;
  constexpr int64_t kF = sizeof(float);
  float* shard = grow_buffer<float>(b, shard_, n * local_);
  float* tmp = grow_buffer<float>(b, tmp_, n * std::max<int64_t>(real_, 1));
  if (real_ > 0) w_.forward(h, n, tmp);
  b.copy_2d(shard, local_ * kF, tmp, real_ * kF, real_ * kF, n);
  if (local_ > real_)
    for (int64_t r = 0; r < n; ++r) b.fill(shard + r * local_ + real_, local_ - real_, -std::numeric_limits<float>::infinity());
  float* all = grow_buffer<float>(b, gathered_, tp_ * n * local_);
  timed(comm_s_, [&] { b.all_gather(*comm_, shard, n * local_ * kF, all); });
  for (int g = 0; g < tp_; ++g) {
    const int64_t col0 = g * local_, k = std::min(local_, vocab_ - col0);
    if (k > 0) b.copy_2d(logits + col0, vocab_ * kF, all + g * n * local_, local_ * kF, k * kF, n);
  }
}

}  // namespace tp
