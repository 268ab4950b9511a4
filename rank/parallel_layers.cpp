#include "rank/parallel_layers.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"
#include "kernels/cpu/ops.h"

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

template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

}  // namespace

// ------------------------------------------------------------------------------------------ StackedLinear
StackedLinear::StackedLinear(std::vector<cpu::Weight> parts) : parts_(std::move(parts)) {
  for (const cpu::Weight& w : parts_) {
    if (n_out_ > 0 && w.n_in() != n_in_)
      throw Error("StackedLinear: parts of " + std::to_string(n_in_) + " and " + std::to_string(w.n_in()) + " columns");
    n_in_ = w.n_in();
    n_out_ += w.n_out();
  }
}

void StackedLinear::forward(const float* x, int64_t m, float* y) const {
  if (parts_.size() == 1) {
    cpu::linear(x, m, parts_[0], y);
    return;
  }
  int64_t r0 = 0;
  for (const cpu::Weight& w : parts_) {  // each part into scratch, then into its columns of y
    float* part = grow(scratch_, m * w.n_out());
    cpu::linear(x, m, w, part);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(y + i * n_out_ + r0, part + i * w.n_out(), size_t(w.n_out()) * sizeof(float));
    r0 += w.n_out();
  }
}

int64_t StackedLinear::n_bytes() const {
  int64_t n = 0;
  for (const cpu::Weight& w : parts_) n += w.n_bytes();
  return n;
}

// ----------------------------------------------------------------------------------- Column / Row parallel
ColumnParallelLinear::ColumnParallelLinear(const ModelFile& f, const WeightLoadOptions& o, int64_t n_in,
                                           const std::vector<RowSlice>& parts)
    : w_(load_linear(f, o, n_in, {0, n_in}, parts)) {}

RowParallelLinear::RowParallelLinear(const ModelFile& f, const WeightLoadOptions& o, const std::string& name,
                                     int64_t n_out, int64_t n_in_total, Range cols, Communicator* comm, double* comm_s)
    : w_(load_linear(f, o, n_in_total, cols, {{name, n_out, {0, n_out}}})),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      comm_s_(comm_s) {}

void RowParallelLinear::forward(const float* x, int64_t m, float* y) const {
  w_.forward(x, m, y);
  if (comm_) timed(comm_s_, [&] { comm_->all_reduce_sum(y, size_t(m * w_.n_out())); });
}

// ------------------------------------------------------------------------------------------- Embedding
VocabParallelEmbedding::VocabParallelEmbedding(const ModelFile& f, Range rows, Communicator* comm, double* comm_s)
    : rows_(rows), comm_(comm && comm->size() > 1 ? comm : nullptr), comm_s_(comm_s) {
  const ModelConfig& c = f.config();
  hidden_ = c.hidden;
  table_ = &f.require("token_embd.weight", {c.vocab, c.hidden});
  if (hidden_ % dtype_block_elems(table_->dtype) != 0)
    throw FormatError(f.path(), "token_embd.weight", "row length is not a multiple of the block size");
  check_embedding_rows(f, *table_, hidden_, rows_);
}

void VocabParallelEmbedding::forward(const int32_t* ids, int64_t n, float* x) const {
  const int64_t row_bytes = dtype_row_bytes(table_->dtype, hidden_);
  if (!comm_) {
    cpu::embedding(table_->data, table_->dtype, row_bytes, hidden_, ids, n, x);
    return;
  }
  for (int64_t t = 0; t < n; ++t) {  // rows outside this rank's shard are zero: the all-reduce fills them in
    if (rows_.contains(ids[t]))
      cpu::embedding(table_->data, table_->dtype, row_bytes, hidden_, ids + t, 1, x + t * hidden_);
    else
      std::memset(x + t * hidden_, 0, size_t(hidden_) * sizeof(float));
  }
  timed(comm_s_, [&] { comm_->all_reduce_sum(x, size_t(n * hidden_)); });
}

int64_t VocabParallelEmbedding::n_bytes() const { return rows_.size() * dtype_row_bytes(table_->dtype, hidden_); }

// ---------------------------------------------------------------------------------------------- lm_head
ParallelLmHead::ParallelLmHead(const ModelFile& f, const WeightLoadOptions& o, const TpLayout& layout, Communicator* comm,
                               double* comm_s)
    : vocab_(f.config().vocab),
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
  w_ = StackedLinear(load_linear(f, o, c.hidden, {0, c.hidden}, {{tied ? "token_embd.weight" : "output.weight", c.vocab, rows}}));
}

void ParallelLmHead::forward(const float* h, int64_t n, float* logits) const {
  if (!comm_) {
    w_.forward(h, n, logits);
    return;
  }
  if (n == 0) return;
  // Each rank computes its shard [n, local] (padded rows -inf), then every rank gathers [tp, n, local] and keeps
  // the real vocab columns.
  float* shard = grow(shard_, n * local_);
  float* tmp = grow(tmp_, n * std::max<int64_t>(real_, 1));
  if (real_ > 0) w_.forward(h, n, tmp);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(shard + r * local_, tmp + r * real_, size_t(real_) * sizeof(float));
    std::fill(shard + r * local_ + real_, shard + (r + 1) * local_, -std::numeric_limits<float>::infinity());
  }
  float* all = grow(gathered_, tp_ * n * local_);
  timed(comm_s_, [&] { comm_->all_gather(shard, size_t(n * local_) * sizeof(float), all); });
  for (int64_t r = 0; r < n; ++r)
    for (int g = 0; g < tp_; ++g) {
      const int64_t col0 = g * local_, k = std::min(local_, vocab_ - col0);
      if (k > 0) std::memcpy(logits + r * vocab_ + col0, all + (g * n + r) * local_, size_t(k) * sizeof(float));
    }
}

}  // namespace tp
