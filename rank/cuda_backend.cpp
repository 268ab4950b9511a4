// The CUDA Backend (rank/backend.h): GPU memory, one non-blocking stream, a cuBLASLt context (kernels/cuda/
// gemm.h), and the entries of kernels/cuda (ops.h, kv_cache.h, gemm.h), adapted here to the Backend's F32
// activation convention. Compiled only when the build has CUDA and tp_kernels_cuda (rank/CMakeLists.txt);
// make_cuda_backend binds the rank to GPU local_rank % n_devices.
//
// Weights as the GPU kernels take them (uploaded per shard at load; the host copy is dropped):
//   BF16 dense         -> gemm_bf16 (cuBLASLt): x rounded to BF16 (as the CPU BF16 path), F32 accumulation.
//   Int8 per channel   -> gemv_w8a16 (symmetric, no g_idx, no activation quantization): W8A16.
//   everything else    -> refused (InputError naming the format and what to run instead). F32 weights are
//                         refused rather than silently rounded: --dtype bf16 rounds them at load, visibly.
// Embedding rows: F32 / BF16 tables are copied as stored; F16 and GGUF block rows are dequantized to F32 rows
// (exactly the values the CPU embedding produces) because the CUDA embedding reads F32 / BF16 only.
// Ops enqueue and return; copy_to_host waits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/ops.h"
#include "parallel/device_binding.h"
#include "rank/cuda_backend.h"

namespace tp {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(rc));
}

enum class GpuWeightKind : uint8_t { Bf16, Int8PerChannel };

class CudaLinearWeight final : public LinearWeight {
 public:
  CudaLinearWeight(GpuWeightKind kind, DeviceBuffer data, DeviceBuffer scales, int64_t n_out, int64_t n_in)
      : kind_(kind), data_(std::move(data)), scales_(std::move(scales)), n_out_(n_out), n_in_(n_in) {}
  int64_t n_out() const override { return n_out_; }
  int64_t n_in() const override { return n_in_; }
  int64_t n_bytes() const override { return data_.bytes() + scales_.bytes(); }
  GpuWeightKind kind() const { return kind_; }
  const void* data() const { return data_.data(); }
  const float* scales() const { return scales_.as<float>(); }

 private:
  GpuWeightKind kind_;
  DeviceBuffer data_;    // Bf16: [n_out, n_in] BF16; Int8PerChannel: [n_out, n_in] int8
  DeviceBuffer scales_;  // Int8PerChannel: [n_out] F32; empty otherwise
  int64_t n_out_, n_in_;
};

// Rows [rows.begin, rows.end) of the token table on the device, contiguous, F32 or BF16.
class CudaEmbeddingTable final : public EmbeddingTable {
 public:
  CudaEmbeddingTable(DeviceBuffer rows_data, DType type, int64_t hidden, Range rows)
      : data(std::move(rows_data)), type(type), hidden(hidden), rows(rows) {}
  int64_t n_bytes() const override { return data.bytes(); }
  DeviceBuffer data;
  DType type;  // F32 or BF16
  int64_t hidden;
  Range rows;
};

bool int8_per_channel(const PackedWeight& p) {
  return p.format == WeightFormat::Int8 && p.zeros.empty() && p.g_idx.empty() && p.n_groups() == 1 &&
         p.act == ActQuant::None && int64_t(p.scales.size()) == p.n_out && p.row_bytes() == p.n_in &&
         p.rows_layout == RowsLayout::Rows;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    blas_ = std::make_unique<cuda::Blas>(kBlasWorkspaceBytes);
    n_sms_ = cuda::multiprocessor_count();
  }
  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    drop_graphs();
    x_bf16_ = DeviceBuffer();
    y_scratch_ = DeviceBuffer();
    attn_meta_ = DeviceBuffer();
    attn_workspace_ = DeviceBuffer();
    blas_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  void activate() override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) check(cudaSetDevice(device_), "cudaSetDevice");
  }
  Stream stream() const override { return stream_; }
  bool host_memory() const override { return false; }
  int64_t device_memory_bytes() const override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return int64_t(total);
  }

  // x_bf16_ at the widest input, the split-K partials at their largest over step sizes up to the step's, and
  // the cuBLASLt workspace. (y_scratch_ only serves an output that is not 16-byte aligned, which the forward
  // never passes: its outputs are buffer starts.)
  int64_t workspace_bytes(const StepShape& s) const override {
    const int64_t attn =
        cuda::attention_workspace_peak(s.n_tokens, s.n_heads, s.n_kv_heads, s.head_dim, s.max_context, n_sms_);
    return s.n_tokens * s.max_features * 2 + attn + kBlasWorkspaceBytes;
  }

  void* allocate(int64_t bytes) override {
    if (bytes <= 0) return nullptr;
    ++allocations_;
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, size_t(bytes));
    if (rc != cudaSuccess)
      throw Error("cuda backend: cudaMalloc of " + std::to_string(bytes) + " bytes on " + name() + ": " +
                  cudaGetErrorString(rc));
    return p;
  }
  void deallocate(void* p) noexcept override {
    if (p) cudaFree(p);
  }
  void copy_to_device(void* dst, const void* host_src, int64_t bytes) override {
    if (bytes > 0)
      check(cudaMemcpyAsync(dst, host_src, size_t(bytes), cudaMemcpyHostToDevice, stream_), "copy_to_device");
  }
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    check(cudaMemcpyAsync(host_dst, src, size_t(bytes), cudaMemcpyDeviceToHost, stream_), "copy_to_host");
    synchronize();
  }
  void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
               int64_t rows) override {
    if (rows <= 0 || row_bytes <= 0) return;
    check(cudaMemcpy2DAsync(dst, size_t(dst_pitch), src, size_t(src_pitch), size_t(row_bytes), size_t(rows),
                            cudaMemcpyDeviceToDevice, stream_),
          "copy_2d");
  }
  void fill(float* x, int64_t n, float value) override { cuda::fill(x, n, value, stream_); }
  void zero(void* p, int64_t bytes) override {
    if (bytes > 0) check(cudaMemsetAsync(p, 0, size_t(bytes), stream_), "zero");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  using Backend::upload;
  std::unique_ptr<LinearWeight> upload(cpu::Weight w) override {
    const PackedWeight& p = w.packed();
    const std::string shape = "[" + std::to_string(p.n_out) + ", " + std::to_string(w.n_in()) + "]";
    if (!w.column_gather().empty())
      throw InputError("model.device cuda: weight " + shape +
                       " is act-order (g_idx); no CUDA kernel for it yet: run it on device cpu");
    if (p.format == WeightFormat::BF16) {
      if (p.n_in % 2 != 0 || p.n_out % 2 != 0)
        throw InputError("model.device cuda: BF16 weight " + shape +
                         " has an odd dimension; cuBLASLt's BF16 GEMM needs even rows and columns");
      DeviceBuffer d(this, w.n_bytes());
      copy_to_device(d.data(), w.data(), w.n_bytes());
      synchronize();  // w (the host copy) is freed on return
      return std::make_unique<CudaLinearWeight>(GpuWeightKind::Bf16, std::move(d), DeviceBuffer(), p.n_out, p.n_in);
    }
    if (int8_per_channel(p) && p.n_in % 16 == 0) {
      DeviceBuffer d(this, p.n_out * p.n_in);
      copy_to_device(d.data(), p.data.data(), p.n_out * p.n_in);
      DeviceBuffer s = Backend::upload(p.scales);
      synchronize();
      return std::make_unique<CudaLinearWeight>(GpuWeightKind::Int8PerChannel, std::move(d), std::move(s), p.n_out,
                                                p.n_in);
    }
    std::string hint;
    if (p.format == WeightFormat::F32)
      hint = "the CUDA backend runs BF16 GEMMs: load with --dtype bf16 (model.dtype: bf16)";
    else if (p.format == WeightFormat::Int8)
      hint = "the CUDA W8A16 GEMV takes symmetric per-channel int8 without activation quantization, n_in a "
             "multiple of 16";
    else
      hint = "no CUDA kernel for it yet: run it dequantized (--quantized dequantize --dtype bf16) or on device cpu";
    throw InputError("model.device cuda: weight " + shape + " in format " + std::string(weight_format_name(p.format)) +
                     ": " + hint);
  }
  std::unique_ptr<EmbeddingTable> upload_embedding(const void* table, DType type, int64_t row_stride, int64_t hidden,
                                                   Range rows) override {
    const auto* base = static_cast<const char*>(table);
    const int64_t elem = type == DType::F32 ? 4 : 2;
    if ((type == DType::F32 || type == DType::BF16) && row_stride == hidden * elem) {
      DeviceBuffer d(this, rows.size() * row_stride);
      copy_to_device(d.data(), base + rows.begin * row_stride, rows.size() * row_stride);
      synchronize();
      return std::make_unique<CudaEmbeddingTable>(std::move(d), type, hidden, rows);
    }
    // Other types: the rows as F32, by the CPU embedding (the values the CPU backend would produce), in chunks.
    DeviceBuffer d(this, rows.size() * hidden * int64_t(sizeof(float)));
    constexpr int64_t kChunk = 1024;
    std::vector<int32_t> ids;
    std::vector<float> f32;
    for (int64_t r0 = rows.begin; r0 < rows.end; r0 += kChunk) {
      const int64_t n = std::min(kChunk, rows.end - r0);
      ids.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(r0 + i);
      f32.resize(size_t(n * hidden));
      cpu::embedding(table, type, row_stride, hidden, ids.data(), n, f32.data());
      copy_to_device(d.as<float>() + (r0 - rows.begin) * hidden, f32.data(), n * hidden * int64_t(sizeof(float)));
      synchronize();  // f32 is reused by the next chunk
    }
    return std::make_unique<CudaEmbeddingTable>(std::move(d), DType::F32, hidden, rows);
  }

  void embedding(const EmbeddingTable& table, const int32_t* ids, int64_t n, bool /*zero_outside*/,
                 float* x) override {
    // The kernel zeros a row outside the shard either way; without zero_outside every id lies in it.
    const auto& t = static_cast<const CudaEmbeddingTable&>(table);
    cuda::embedding(t.data.data(), t.type, t.rows.begin, t.rows.size(), t.hidden, ids, n, x, stream_);
  }
  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    cuda::rmsnorm(x, nullptr, weight, n, dim, eps, out, DType::F32, stream_);
  }
  void add_inplace(float* x, const float* y, int64_t n) override { cuda::add_inplace(x, y, n, stream_); }
  void add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps,
                   float* out) override {
    // The kernel's residual is x: it stores y + x into x (the same sum as add_inplace's x + y), then normalizes.
    cuda::rmsnorm(y, x, weight, n, dim, eps, out, DType::F32, stream_);
  }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
            RopeStyle style) override {
    cuda::rope(x, n_tokens, n_heads, head_dim, positions, base, style, stream_);
  }
  void split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      const int32_t* positions, float base, RopeStyle style, float* q, float* k, float* v) override {
    cuda::split_qkv_rope(qkv, n_tokens, n_heads, n_kv_heads, head_dim, positions, base, style, q, k, v, stream_);
  }
  void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) override {
    cuda::silu_mul(gate_up, n, dim, out, DType::F32, stream_);
  }
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override {
    const auto& cw = static_cast<const CudaLinearWeight&>(w);
    if (m <= 0) return;
    // Decode-sized m: our GEMV reads F32 x directly (no conversion kernel) and writes y at any alignment.
    if (cw.kind() == GpuWeightKind::Bf16 && m <= cuda::kGemvBf16MaxRows && cw.n_in() % 8 == 0 && aligned16(x)) {
      cuda::gemv_bf16(x, m, static_cast<const uint16_t*>(cw.data()), cw.n_out(), cw.n_in(), y, stream_);
      return;
    }
    // cuBLASLt wants 16-byte aligned outputs: an offset y goes through a scratch.
    float* out = aligned16(y) ? y : grow_buffer<float>(*this, y_scratch_, m * cw.n_out());
    if (cw.kind() == GpuWeightKind::Bf16) {
      uint16_t* xb = grow_buffer<uint16_t>(*this, x_bf16_, m * cw.n_in());
      cuda::convert_f32_to_bf16(x, m * cw.n_in(), xb, stream_);
      cuda::gemm_bf16(*blas_, xb, static_cast<const uint16_t*>(cw.data()), m, cw.n_out(), cw.n_in(), out, DType::F32,
                      stream_);
    } else {
      cuda::gemv_w8a16(x, DType::F32, m, static_cast<const int8_t*>(cw.data()), cw.scales(), cw.n_out(), cw.n_in(),
                       out, stream_);
    }
    if (out != y) copy_2d(y, cw.n_out() * 4, out, cw.n_out() * 4, cw.n_out() * 4, m);
  }
  void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
                const KvTensorView& v_pool) override {
    cuda::write_kv(k, v, n_tokens, slots, k_pool, v_pool, stream_);
  }
  void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                       const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out) override {
    paged_attention_batch(q, {{n_tokens, start_pos, block_table}}, n_heads, k_pool, v_pool, scale, out, 0);
  }
  // Stages [token_seq n_tok | token_pos n_tok | block_tables n_seqs × max_blocks] (int32; unused table entries 0)
  // when it differs from what is staged (the layers of a step share it; a graph's replay finds it staged), and
  // sizes the split-K workspace. fixed_context > 0: max_blocks and the context of the launch shape from it.
  void prepare_attention(const std::vector<AttentionSeq>& seqs, int64_t bs, int64_t fixed_context) override {
    int64_t n_tok = 0, max_blocks = 1, max_context = 1;
    for (const AttentionSeq& s : seqs) {
      n_tok += s.n_tokens;
      max_context = std::max(max_context, s.start_pos + s.n_tokens);
      max_blocks = std::max(max_blocks, (s.start_pos + s.n_tokens + bs - 1) / bs);
    }
    if (fixed_context > 0) {
      if (fixed_context < max_context)
        throw Error("paged attention: fixed context " + std::to_string(fixed_context) + " < " + std::to_string(max_context));
      max_context = fixed_context;
      max_blocks = (fixed_context + bs - 1) / bs;
    }
    meta_host_.assign(size_t(2 * n_tok + int64_t(seqs.size()) * max_blocks), 0);
    int32_t* seq_of = meta_host_.data();
    int32_t* pos_of = seq_of + n_tok;
    int32_t* tables = pos_of + n_tok;
    int64_t t = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const AttentionSeq& s = seqs[i];
      for (int64_t j = 0; j < s.n_tokens; ++j, ++t) {
        seq_of[t] = int32_t(i);
        pos_of[t] = int32_t(s.start_pos + j);
      }
      std::copy_n(s.block_table, (s.start_pos + s.n_tokens + bs - 1) / bs, tables + int64_t(i) * max_blocks);
    }
    meta_.n_tok = n_tok;
    meta_.max_blocks = max_blocks;
    meta_.max_context = max_context;
    if (meta_host_ != meta_staged_) {
      int32_t* d = grow_buffer<int32_t>(*this, attn_meta_, int64_t(meta_host_.size()));
      copy_to_device(d, meta_host_.data(), int64_t(meta_host_.size() * sizeof(int32_t)));
      meta_staged_ = meta_host_;
    }
  }
  void paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                             const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                             int64_t fixed_context) override {
    prepare_attention(seqs, k_pool.layout.block_size, fixed_context);  // no copy when staged (as in a capture)
    const int64_t n_tok = meta_.n_tok;
    if (n_tok == 0) return;
    int32_t* d = attn_meta_.as<int32_t>();
    cuda::AttentionBatch batch;
    batch.token_seq = d;
    batch.token_pos = d + n_tok;
    batch.block_tables = d + 2 * n_tok;
    batch.max_blocks_per_seq = meta_.max_blocks;
    batch.max_context = meta_.max_context;
    batch.n_splits = cuda::attention_splits(n_tok, n_heads, k_pool.layout.n_kv_heads, meta_.max_context, n_sms_);
    const int64_t ws = cuda::attention_workspace_bytes(n_tok, n_heads, k_pool.layout.head_dim, batch.n_splits);
    void* workspace = ws > 0 ? grow_buffer<uint8_t>(*this, attn_workspace_, ws) : nullptr;
    cuda::paged_attention(q, n_tok, n_heads, batch, k_pool, v_pool, scale, out, workspace, ws, stream_);
  }

  bool supports_graphs() const override { return true; }
  int64_t allocation_epoch() const override { return allocations_; }
  void begin_capture() override {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  int64_t end_capture() override {
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(rc, "cudaGraphInstantiate");
    graphs_.push_back(exec);
    return int64_t(graphs_.size()) - 1;
  }
  void abort_capture() noexcept override {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported by the exception that ended it
  }
  void replay(int64_t graph) override {
    if (graph < 0 || graph >= int64_t(graphs_.size()) || !graphs_[size_t(graph)])
      throw Error("cuda backend: no graph " + std::to_string(graph));
    check(cudaGraphLaunch(graphs_[size_t(graph)], stream_), "cudaGraphLaunch");
  }
  void drop_graphs() override {
    for (cudaGraphExec_t g : graphs_)
      if (g) cudaGraphExecDestroy(g);
    graphs_.clear();
  }
  void all_reduce_sum(Communicator& comm, float* data, int64_t count) override {
    comm.all_reduce_sum(data, size_t(count), stream_);
  }
  void all_gather(Communicator& comm, const void* send, int64_t bytes_per_rank, void* recv) override {
    comm.all_gather(send, size_t(bytes_per_rank), recv, stream_);
  }

 private:
  static constexpr int64_t kBlasWorkspaceBytes = int64_t(32) << 20;
  int device_;
  int n_sms_ = 1;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;
  DeviceBuffer x_bf16_;         // linear: x rounded to BF16
  DeviceBuffer y_scratch_;      // linear: an aligned output
  DeviceBuffer attn_meta_;      // paged_attention_batch: the staged metadata
  DeviceBuffer attn_workspace_; // paged_attention_batch: split-K partials
  std::vector<int32_t> meta_host_, meta_staged_;
  struct {
    int64_t n_tok = 0, max_blocks = 1, max_context = 1;
  } meta_;                                // what meta_host_ holds
  int64_t allocations_ = 0;               // allocate() calls (allocation_epoch)
  std::vector<cudaGraphExec_t> graphs_;   // replay ids index it
};

std::vector<DeviceInfo> visible_devices(std::string* why_none) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    *why_none = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
    n = 0;
  }
  std::vector<DeviceInfo> list;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.ordinal = i;
    d.name = p.name;
    d.total_bytes = int64_t(p.totalGlobalMem);
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x", uint8_t(p.uuid.bytes[0]), uint8_t(p.uuid.bytes[1]),
                  uint8_t(p.uuid.bytes[2]), uint8_t(p.uuid.bytes[3]), uint8_t(p.uuid.bytes[4]), uint8_t(p.uuid.bytes[5]));
    d.uuid = uuid;
    list.push_back(d);
  }
  return list;
}

}  // namespace

bool cuda_backend_built() { return true; }

std::shared_ptr<Backend> make_cuda_backend(int local_rank, const std::string& source) {
  std::string why = "cudaGetDeviceCount found 0 devices";
  const std::vector<DeviceInfo> devices = visible_devices(&why);
  if (devices.empty())
    throw ConfigError(source, "model.device",
                      "cuda: no CUDA device is visible on this host (" + why +
                          "; check the driver and CUDA_VISIBLE_DEVICES, or use device cpu)");
  return std::make_shared<CudaBackend>(bind_device(devices, local_rank).ordinal);
}

}  // namespace tp
