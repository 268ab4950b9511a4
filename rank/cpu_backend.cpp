#include "rank/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/error.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"

namespace tp {
namespace {

constexpr size_t kAlign = 64;

class CpuLinearWeight final : public LinearWeight {
 public:
  explicit CpuLinearWeight(cpu::Weight w) : w_(std::move(w)) {}
  int64_t n_out() const override { return w_.n_out(); }
  int64_t n_in() const override { return w_.n_in(); }
  int64_t n_bytes() const override { return w_.n_bytes(); }
  const cpu::Weight& weight() const { return w_; }

 private:
  cpu::Weight w_;
};

class CpuEmbeddingTable final : public EmbeddingTable {
 public:
  CpuEmbeddingTable(const void* table, DType type, int64_t row_stride, int64_t hidden, Range rows)
      : table(table), type(type), row_stride(row_stride), hidden(hidden), rows(rows) {}
  int64_t n_bytes() const override { return rows.size() * row_stride; }

  const void* table;
  DType type;
  int64_t row_stride, hidden;
  Range rows;
};

}  // namespace

void* CpuBackend::allocate(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  return ::operator new(size_t(bytes), std::align_val_t(kAlign));
}

void CpuBackend::deallocate(void* p) noexcept {
  if (p) ::operator delete(p, std::align_val_t(kAlign));
}

void CpuBackend::copy_to_device(void* dst, const void* host_src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, size_t(bytes));
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, size_t(bytes));
}

void CpuBackend::copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
                         int64_t rows) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // A prefill's q / k / v split out of the qkv rows (MiBs a layer) over the threads; a decode step's in this one.
  const int nt = rows * row_bytes >= (int64_t(1) << 18) ? cpu::num_threads() : 1;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, size_t(row_bytes));
}

void CpuBackend::fill(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::zero(void* p, int64_t bytes) {
  if (bytes > 0) std::memset(p, 0, size_t(bytes));
}

std::unique_ptr<LinearWeight> CpuBackend::upload(cpu::Weight w) { return std::make_unique<CpuLinearWeight>(std::move(w)); }

std::unique_ptr<EmbeddingTable> CpuBackend::upload_embedding(const void* table, DType type, int64_t row_stride,
                                                             int64_t hidden, Range rows) {
  return std::make_unique<CpuEmbeddingTable>(table, type, row_stride, hidden, rows);
}

void CpuBackend::embedding(const EmbeddingTable& table, const int32_t* ids, int64_t n, bool zero_outside, float* x) {
  const auto& t = static_cast<const CpuEmbeddingTable&>(table);
  if (!zero_outside) {
    cpu::embedding(t.table, t.type, t.row_stride, t.hidden, ids, n, x);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (t.rows.contains(ids[i]))
      cpu::embedding(t.table, t.type, t.row_stride, t.hidden, ids + i, 1, x + i * t.hidden);
    else
      std::memset(x + i * t.hidden, 0, size_t(t.hidden) * sizeof(float));
  }
}

void CpuBackend::rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  cpu::rmsnorm(x, weight, n, dim, eps, out);
}

void CpuBackend::add_inplace(float* x, const float* y, int64_t n) { cpu::add_inplace(x, y, n); }

void CpuBackend::add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps,
                             float* out) {
  cpu::add_rmsnorm(x, y, weight, n, dim, eps, out);
}

void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                      float base, RopeStyle style) {
  cpu::rope(x, n_tokens, n_heads, head_dim, positions, base, style);
}

void CpuBackend::silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) { cpu::silu_mul(gate_up, n, dim, out); }

void CpuBackend::linear(const LinearWeight& w, const float* x, int64_t m, float* y) {
  cpu::linear(x, m, static_cast<const CpuLinearWeight&>(w).weight(), y);
}

void CpuBackend::write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots,
                          const KvTensorView& k_pool, const KvTensorView& v_pool) {
  cpu::write_kv(k, v, n_tokens, slots, k_pool, v_pool);
}

void CpuBackend::paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads,
                                 const KvTensorView& k_pool, const KvTensorView& v_pool, const int32_t* block_table,
                                 float scale, float* out) {
  cpu::paged_attention(q, n_tokens, start_pos, n_heads, k_pool, v_pool, block_table, scale, out);
}

void CpuBackend::paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                                       const KvTensorView& k_pool, const KvTensorView& v_pool, float scale,
                                       float* out, int64_t /*fixed_context*/) {
  std::vector<cpu::AttentionSeqArgs> args;
  args.reserve(seqs.size());
  for (const AttentionSeq& s : seqs) args.push_back({s.n_tokens, s.start_pos, s.block_table});
  cpu::paged_attention_batch(q, args.data(), int64_t(args.size()), n_heads, k_pool, v_pool, scale, out);
}

void CpuBackend::all_reduce_sum(Communicator& comm, float* data, int64_t count) {
  comm.all_reduce_sum(data, size_t(count));
}

void CpuBackend::all_gather(Communicator& comm, const void* send, int64_t bytes_per_rank, void* recv) {
  comm.all_gather(send, size_t(bytes_per_rank), recv);
}

const cpu::Weight& cpu_weight(const LinearWeight& w) {
  const auto* c = dynamic_cast<const CpuLinearWeight*>(&w);
  if (!c) throw Error("cpu_weight: not a CPU backend weight");
  return c->weight();
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tp
