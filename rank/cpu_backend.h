// The CPU implementation of the Backend (rank/backend.h): host memory, kernels/cpu ops exactly as the forward
// called them before the seam (same kernels, same arguments, same results bit for bit). Weights stay as the
// loaders made them (cpu::Weight); the embedding is read through the file mapping.
#pragma once
#include "rank/backend.h"

namespace tp {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Stream stream() const override { return nullptr; }
  bool host_memory() const override { return true; }

  void* allocate(int64_t bytes) override;
  void deallocate(void* p) noexcept override;
  void copy_to_device(void* dst, const void* host_src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) override;
  void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
               int64_t rows) override;
  void fill(float* x, int64_t n, float value) override;
  void zero(void* p, int64_t bytes) override;
  void synchronize() override {}

  using Backend::upload;
  std::unique_ptr<LinearWeight> upload(cpu::Weight w) override;
  std::unique_ptr<EmbeddingTable> upload_embedding(const void* table, DType type, int64_t row_stride, int64_t hidden,
                                                   Range rows) override;

  void embedding(const EmbeddingTable& table, const int32_t* ids, int64_t n, bool zero_outside, float* x) override;
  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override;
  void add_inplace(float* x, const float* y, int64_t n) override;
  void add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps,
                   float* out) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
            RopeStyle style) override;
  void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) override;
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override;
  void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
                const KvTensorView& v_pool) override;
  void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                       const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out) override;
  // One kernels/cpu paged_attention_batch call (one parallel region for all the step's sequences).
  void paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                             const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                             int64_t fixed_context) override;
  void all_reduce_sum(Communicator& comm, float* data, int64_t count) override;
  void all_gather(Communicator& comm, const void* send, int64_t bytes_per_rank, void* recv) override;
};

// The cpu::Weight a CpuBackend LinearWeight holds (for tests and tools that inspect the loaded form).
const cpu::Weight& cpu_weight(const LinearWeight& w);

}  // namespace tp
