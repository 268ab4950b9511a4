#include "rank/backend.h"

#include <utility>

#include "common/error.h"
#include "rank/cuda_backend.h"

namespace tp {

DeviceBuffer::DeviceBuffer(Backend* owner, int64_t bytes)
    : owner_(owner), data_(owner->allocate(bytes)), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (owner_ && data_) owner_->deallocate(data_);
  data_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer Backend::upload(const std::vector<float>& host) {
  const int64_t bytes = int64_t(host.size() * sizeof(float));
  DeviceBuffer b(this, bytes);
  copy_to_device(b.data(), host.data(), bytes);
  return b;
}

void Backend::paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                                    const KvTensorView& k_pool, const KvTensorView& v_pool, float scale, float* out,
                                    int64_t /*fixed_context*/) {
  const int64_t row = n_heads * k_pool.layout.head_dim;
  int64_t t0 = 0;
  for (const AttentionSeq& s : seqs) {
    paged_attention(q + t0 * row, s.n_tokens, s.start_pos, n_heads, k_pool, v_pool, s.block_table, scale,
                    out + t0 * row);
    t0 += s.n_tokens;
  }
}

void Backend::add_rmsnorm(float* x, const float* y, const float* weight, int64_t n, int64_t dim, float eps,
                          float* out) {
  add_inplace(x, y, n * dim);
  rmsnorm(x, weight, n, dim, eps, out);
}

void Backend::split_qkv_rope(const float* qkv, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, const int32_t* positions, float base, RopeStyle style, float* q,
                             float* k, float* v) {
  constexpr int64_t kF = sizeof(float);
  const int64_t row = (n_heads + 2 * n_kv_heads) * head_dim, q_w = n_heads * head_dim, kv_w = n_kv_heads * head_dim;
  copy_2d(q, q_w * kF, qkv, row * kF, q_w * kF, n_tokens);
  copy_2d(k, kv_w * kF, qkv + q_w, row * kF, kv_w * kF, n_tokens);
  copy_2d(v, kv_w * kF, qkv + q_w + kv_w, row * kF, kv_w * kF, n_tokens);
  rope(q, n_tokens, n_heads, head_dim, positions, base, style);
  rope(k, n_tokens, n_kv_heads, head_dim, positions, base, style);
}

void Backend::begin_capture() { throw Error("backend " + name() + " cannot capture graphs"); }
int64_t Backend::end_capture() { throw Error("backend " + name() + " cannot capture graphs"); }
void Backend::replay(int64_t /*graph*/) { throw Error("backend " + name() + " cannot replay graphs"); }

std::shared_ptr<Backend> make_backend(const std::string& device, int local_rank, const std::string& source) {
  if (device == "cpu") return std::shared_ptr<Backend>(&cpu_backend(), [](Backend*) {});
  if (device == "cuda") return make_cuda_backend(local_rank, source);
  throw ConfigError(source, "model.device", "'" + device + "' is not one of: cpu, cuda");
}

}  // namespace tp
