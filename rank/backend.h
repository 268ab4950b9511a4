// The seam between the model forward (rank/llama_model.h, rank/parallel_layers.h) and the hardware it runs on
// (DESIGN §3 "Backend / ops"): memory, weights as the backend holds them, and the ops of the Llama forward.
// The forward is written once against this interface; CpuBackend (rank/cpu_backend.h) calls kernels/cpu, the
// CUDA backend (rank/cuda_backend.h, built only with CUDA) calls kernels/cuda on one stream.
//
// Memory: pointers the ops take are this backend's memory ("device memory": host memory on CPU, GPU memory
// on CUDA) unless a comment says host. Activations are F32, row-major. Ops are ordered on stream(); on CPU
// they are complete when they return, on CUDA only after synchronize() (or a copy_to_host, which waits).
// Errors: a failing op throws tp::Error naming the op; bad arguments throw InputError.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/kv_dtype.h"
#include "common/model_config.h"
#include "kernels/cpu/linear.h"
#include "parallel/communicator.h"
#include "parallel/tp_layout.h"

namespace tp {

class Backend;

// A block of the backend's memory, RAII (freed by the backend that allocated it). Movable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, int64_t bytes);  // uninitialized
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  int64_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// A linear weight W [n_out, n_in] in the form the backend runs it (CPU: the cpu::Weight as loaded; CUDA: its
// bytes in GPU memory).
class LinearWeight {
 public:
  virtual ~LinearWeight() = default;
  virtual int64_t n_out() const = 0;
  virtual int64_t n_in() const = 0;
  virtual int64_t n_bytes() const = 0;  // bytes this rank holds for it
};

// The rows [rows.begin, rows.end) of a token table [vocab, hidden] in the file's type (F32/F16/BF16/Q8_0/
// Q4_0/Q4_1), as the backend reads them (CPU: through the file mapping; CUDA: a copy of those rows).
class EmbeddingTable {
 public:
  virtual ~EmbeddingTable() = default;
  virtual int64_t n_bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // "cpu", or "cuda:<device ordinal>".
  virtual std::string name() const = 0;
  // What collectives are enqueued on (nullptr on CPU; the cudaStream_t on CUDA).
  virtual Stream stream() const = 0;
  // True when the backend's memory is host memory (results need no copy back).
  virtual bool host_memory() const = 0;
  // Total bytes of the device's memory (cache.gpu_memory_utilization's base); 0 on CPU.
  virtual int64_t device_memory_bytes() const { return 0; }
  // The shape of the largest step, for workspace_bytes.
  struct StepShape {
    int64_t n_tokens = 0;      // tokens of the step
    int64_t max_features = 0;  // the widest linear input or output (hidden, intermediate, QKV, vocab shard)
    int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // this rank's attention heads
    int64_t max_context = 0;   // the longest context a sequence may reach
  };
  // Scratch the backend's ops may hold for such a step beyond the forward's own buffers (GPU: BF16 copies of GEMM
  // inputs, an aligned GEMM output, split-K attention partials, the cuBLASLt workspace); 0 on CPU.
  virtual int64_t workspace_bytes(const StepShape& /*step*/) const { return 0; }

  // Makes the calling thread use this backend's device (CUDA's current device is per thread: the engine thread
  // of rank 0 is not the thread that made the backend). Called at the start of every forward; no-op on CPU.
  virtual void activate() {}

  // ---- memory (bytes >= 0; allocate(0) may return nullptr)
  virtual void* allocate(int64_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  virtual void copy_to_device(void* dst, const void* host_src, int64_t bytes) = 0;
  // Waits for the ops before it, then copies.
  virtual void copy_to_host(void* host_dst, const void* src, int64_t bytes) = 0;
  // dst[r * dst_pitch, + row_bytes) = src[r * src_pitch, + row_bytes) for r in [0, rows); device to device.
  virtual void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
                       int64_t rows) = 0;
  // x[n] = value
  virtual void fill(float* x, int64_t n, float value) = 0;
  // p[0, bytes) = 0
  virtual void zero(void* p, int64_t bytes) = 0;
  // Returns when every op enqueued so far has finished.
  virtual void synchronize() = 0;

  // ---- weights
  virtual std::unique_ptr<LinearWeight> upload(cpu::Weight w) = 0;
  // table: host (the mapping, kept alive by the caller for the backend's lifetime), row_stride bytes apart.
  virtual std::unique_ptr<EmbeddingTable> upload_embedding(const void* table, DType type, int64_t row_stride,
                                                           int64_t hidden, Range rows) = 0;
  // A host vector in this backend's memory.
  DeviceBuffer upload(const std::vector<float>& host);

  // ---- ops of the forward
  // x[n, hidden] = rows ids[n] of the table as F32; with zero_outside, a token outside the table's rows gets
  // a zero row (a vocab-parallel shard; the all-reduce fills it in), else every id must lie in its rows.
  virtual void embedding(const EmbeddingTable& table, const int32_t* ids, int64_t n, bool zero_outside, float* x) = 0;
  // out[n, dim] = x / sqrt(mean(x²) + eps) * weight[dim]. out may alias x.
  virtual void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) = 0;
  // x[n] += y[n]
  virtual void add_inplace(float* x, const float* y, int64_t n) = 0;
  // The residual add fused with the norm after it (vLLM's fused_add_rms_norm): x[n, dim] += y[n, dim], then
  // out[n, dim] = rmsnorm(x) as rmsnorm() writes it. out may alias y. Default: add_inplace, then rmsnorm; the CUDA
  // backend runs one kernel with the same sums in the same order (the bits of its add_inplace then rmsnorm).
  virtual void add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps,
                           float* out);
  // In place on x[n_tokens, n_heads, head_dim] at positions[n_tokens] (kernels/cpu/ops.h).
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                    float base, RopeStyle style) = 0;
  // The fused QKV projection's output split with rope on q and k: qkv [n_tokens, n_heads + 2 n_kv_heads, head_dim]
  // (rows [q heads | k heads | v heads]) -> q [n_tokens, n_heads, head_dim], k and v [n_tokens, n_kv_heads,
  // head_dim], q and k rotated as rope() rotates them. Default: three copy_2d, then rope on q and on k (the CUDA
  // backend runs one kernel).
  virtual void split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
                              int64_t head_dim, const int32_t* positions, float base, RopeStyle style, float* q,
                              float* k, float* v);
  // out[n, dim] = silu(gate) * up; gate_up [n, 2 dim].
  virtual void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) = 0;
  // y[m, n_out] = x[m, n_in] · Wᵀ.
  virtual void linear(const LinearWeight& w, const float* x, int64_t m, float* y) = 0;
  // k, v [n_tokens, n_kv_heads, head_dim] into one layer's pools at slots[n_tokens] (kernels/cpu/kv_write.h).
  virtual void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots,
                        const KvTensorView& k_pool, const KvTensorView& v_pool) = 0;
  // One sequence's causal attention over the paged pool (kernels/cpu/paged_attention.h); block_table: host,
  // [ceil((start_pos + n_tokens) / block_size)] block ids.
  virtual void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads,
                               const KvTensorView& k_pool, const KvTensorView& v_pool, const int32_t* block_table,
                               float scale, float* out) = 0;
  // Attention for every sequence of a step: q [Σ n_tokens, n_heads, head_dim] (the sequences' tokens in order)
  // into out (same shape), each sequence over its own block table (host). The base class calls paged_attention
  // per sequence; a GPU backend stages the step's metadata once (the layers of a step share it) and runs one
  // kernel a layer.
  struct AttentionSeq {
    int64_t n_tokens = 0;
    int64_t start_pos = 0;
    const int32_t* block_table = nullptr;  // host, [ceil((start_pos + n_tokens) / block_size)]
  };
  // fixed_context > 0 (decode graphs): the launch shape is that of a context of fixed_context tokens (>= every
  // position + 1), the same for every step of a graph's replays.
  virtual void paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                                     const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                                     int64_t fixed_context = 0);
  // The host part of paged_attention_batch for these sequences (a GPU stages their metadata), enqueued now:
  // before a capture and before each replay, where the ops themselves cannot copy from the host.
  virtual void prepare_attention(const std::vector<AttentionSeq>& /*seqs*/, int64_t /*block_size*/,
                                 int64_t /*fixed_context*/) {}

  // ---- graphs (CUDA graphs of the decode forward; LlamaModel decides when). Default: not supported.
  virtual bool supports_graphs() const { return false; }
  // Counts allocate() calls: a graph holds the addresses it was captured with.
  virtual int64_t allocation_epoch() const { return 0; }
  // Between begin_capture and end_capture the ops on stream() are recorded, not run (no copy from or to the
  // host, no synchronize, no allocation in between); end_capture returns the graph's id, replay runs it on
  // stream() (ordered with the ops around it). abort_capture ends a failed capture. Throw Error when unsupported.
  virtual void begin_capture();
  virtual int64_t end_capture();
  virtual void abort_capture() noexcept {}
  virtual void replay(int64_t graph);
  virtual void drop_graphs() {}
  // Collectives of the TP group on this backend's memory, enqueued on stream().
  virtual void all_reduce_sum(Communicator& comm, float* data, int64_t count) = 0;
  virtual void all_gather(Communicator& comm, const void* send, int64_t bytes_per_rank, void* recv) = 0;
};

// buf as [n] T, reallocated on `backend` when smaller (contents not kept).
template <class T>
T* grow_buffer(Backend& backend, DeviceBuffer& buf, int64_t n) {
  if (buf.bytes() < n * int64_t(sizeof(T))) buf = DeviceBuffer(&backend, n * int64_t(sizeof(T)));
  return buf.as<T>();
}

// The process's CPU backend (stateless; kernels/cpu's thread count applies).
Backend& cpu_backend();

// The backend `device` names ("cpu" or "cuda", model.device / --device) for a rank whose node-local index is
// local_rank. "cuda" in a build without CUDA, or on a host with no GPU, throws ConfigError naming
// model.device (and `source`, the config it came from). The CPU one is cpu_backend() (not owned).
std::shared_ptr<Backend> make_backend(const std::string& device, int local_rank = 0,
                                      const std::string& source = "<defaults>");

}  // namespace tp
