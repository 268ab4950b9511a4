// The CUDA Backend (rank/backend.h): GPU memory, one non-blocking stream, one cuBLASLt handle, the kernels of
// kernels/cuda (rank/cuda_backend_ops.h). Compiled only when the build has CUDA and tp_kernels_cuda
// (rank/CMakeLists.txt); make_cuda_backend binds the rank to GPU local_rank % n_devices.
// Weights: dense F32 / BF16 linear weights are copied to the device at load (the host copy is dropped);
// packed formats are refused (InputError naming the format) until kernels/cuda has their GEMMs. The
// embedding rows this rank owns are copied as stored. Ops enqueue and return; copy_to_host waits.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "parallel/device_binding.h"
#include "rank/cuda_backend.h"
#include "rank/cuda_backend_ops.h"

namespace tp {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(rc));
}

class CudaLinearWeight final : public LinearWeight {
 public:
  CudaLinearWeight(DeviceBuffer data, DType dtype, int64_t n_out, int64_t n_in)
      : data_(std::move(data)), dtype_(dtype), n_out_(n_out), n_in_(n_in) {}
  int64_t n_out() const override { return n_out_; }
  int64_t n_in() const override { return n_in_; }
  int64_t n_bytes() const override { return data_.bytes(); }
  const void* data() const { return data_.data(); }
  DType dtype() const { return dtype_; }

 private:
  DeviceBuffer data_;
  DType dtype_;
  int64_t n_out_, n_in_;
};

class CudaEmbeddingTable final : public EmbeddingTable {
 public:
  CudaEmbeddingTable(DeviceBuffer rows_data, DType type, int64_t row_stride, int64_t hidden, Range rows)
      : data(std::move(rows_data)), type(type), row_stride(row_stride), hidden(hidden), rows(rows) {}
  int64_t n_bytes() const override { return data.bytes(); }
  DeviceBuffer data;
  DType type;
  int64_t row_stride, hidden;
  Range rows;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) throw Error("cuda backend: cublasLtCreate failed");
    workspace_ = DeviceBuffer(this, kWorkspaceBytes);
  }
  ~CudaBackend() override {
    workspace_ = DeviceBuffer();
    block_tables_ = DeviceBuffer();
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  Stream stream() const override { return stream_; }
  bool host_memory() const override { return false; }
  int64_t device_memory_bytes() const override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return int64_t(total);
  }

  void* allocate(int64_t bytes) override {
    if (bytes <= 0) return nullptr;
    void* p = nullptr;
    check(cudaMalloc(&p, size_t(bytes)), "cudaMalloc");
    return p;
  }
  void deallocate(void* p) noexcept override {
    if (p) cudaFree(p);
  }
  void copy_to_device(void* dst, const void* host_src, int64_t bytes) override {
    if (bytes > 0) check(cudaMemcpyAsync(dst, host_src, size_t(bytes), cudaMemcpyHostToDevice, stream_), "copy_to_device");
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
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  using Backend::upload;
  std::unique_ptr<LinearWeight> upload(cpu::Weight w) override {
    if (!w.dense())
      throw InputError("model.device cuda: weight format " + std::to_string(int(w.format())) +
                       " has no CUDA GEMM yet; use a bf16/f32 model (or --quantized dequantize)");
    DeviceBuffer d(this, w.n_bytes());
    copy_to_device(d.data(), w.data(), w.n_bytes());
    synchronize();  // w (the host copy) is freed on return
    return std::make_unique<CudaLinearWeight>(std::move(d), w.dtype(), w.n_out(), w.n_in());
  }
  std::unique_ptr<EmbeddingTable> upload_embedding(const void* table, DType type, int64_t row_stride, int64_t hidden,
                                                   Range rows) override {
    DeviceBuffer d(this, rows.size() * row_stride);
    copy_to_device(d.data(), static_cast<const char*>(table) + rows.begin * row_stride, rows.size() * row_stride);
    synchronize();
    return std::make_unique<CudaEmbeddingTable>(std::move(d), type, row_stride, hidden, rows);
  }

  void embedding(const EmbeddingTable& table, const int32_t* ids, int64_t n, bool zero_outside, float* x) override {
    const auto& t = static_cast<const CudaEmbeddingTable&>(table);
    cuda::embedding(t.data.data(), t.type, t.row_stride, t.hidden, t.rows.begin, t.rows.end, zero_outside, ids, n, x,
                    stream_);
  }
  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    cuda::rmsnorm(x, weight, n, dim, eps, out, stream_);
  }
  void add_inplace(float* x, const float* y, int64_t n) override { cuda::add_inplace(x, y, n, stream_); }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions, float base,
            RopeStyle style) override {
    cuda::rope(x, n_tokens, n_heads, head_dim, positions, base, style, stream_);
  }
  void silu_mul(const float* gate_up, int64_t n, int64_t dim, float* out) override {
    cuda::silu_mul(gate_up, n, dim, out, stream_);
  }
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override {
    const auto& cw = static_cast<const CudaLinearWeight&>(w);
    cuda::linear(lt_, x, m, cw.data(), cw.dtype(), cw.n_out(), cw.n_in(), y, workspace_.data(), kWorkspaceBytes,
                 stream_);
  }
  void write_kv(const float* k, const float* v, int64_t n_tokens, const int64_t* slots, const KvTensorView& k_pool,
                const KvTensorView& v_pool) override {
    cuda::write_kv(k, v, n_tokens, slots, k_pool, v_pool, stream_);
  }
  void paged_attention(const float* q, int64_t n_tokens, int64_t start_pos, int64_t n_heads, const KvTensorView& k_pool,
                       const KvTensorView& v_pool, const int32_t* block_table, float scale, float* out) override {
    // The host block table to the device: a staging copy per call (the batched entry replaces this).
    const int64_t bs = k_pool.layout.block_size;
    const int64_t n_blocks = (start_pos + n_tokens + bs - 1) / bs;
    int32_t* d_table = grow_buffer<int32_t>(*this, block_tables_, n_blocks);
    copy_to_device(d_table, block_table, n_blocks * int64_t(sizeof(int32_t)));
    cuda::paged_attention(q, n_tokens, start_pos, n_heads, k_pool, v_pool, d_table, scale, out, stream_);
  }
  void all_reduce_sum(Communicator& comm, float* data, int64_t count) override {
    comm.all_reduce_sum(data, size_t(count), stream_);
  }
  void all_gather(Communicator& comm, const void* send, int64_t bytes_per_rank, void* recv) override {
    comm.all_gather(send, size_t(bytes_per_rank), recv, stream_);
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer block_tables_;
};

std::vector<DeviceInfo> visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
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
  const std::vector<DeviceInfo> devices = visible_devices();
  if (devices.empty())
    throw ConfigError(source, "model.device",
                      "cuda: no CUDA device is visible on this host (check the driver and CUDA_VISIBLE_DEVICES, or "
                      "use device cpu)");
  return std::make_shared<CudaBackend>(bind_device(devices, local_rank).ordinal);
}

}  // namespace tp
