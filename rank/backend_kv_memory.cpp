#include "rank/backend_kv_memory.h"

#include <utility>

namespace tp {
namespace {

class BackendKvMemory final : public KvMemory {
 public:
  explicit BackendKvMemory(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {}
  void* allocate_zeroed(int64_t bytes) override {
    void* p = backend_->allocate(bytes);
    if (p) {
      backend_->zero(p, bytes);
      backend_->synchronize();
    }
    return p;
  }
  void deallocate(void* p) noexcept override { backend_->deallocate(p); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) backend_->copy_2d(dst, bytes, src, bytes, bytes, 1);
  }
  bool host() const override { return backend_->host_memory(); }

 private:
  std::shared_ptr<Backend> backend_;
};

}  // namespace

std::shared_ptr<KvMemory> backend_kv_memory(std::shared_ptr<Backend> backend) {
  return std::make_shared<BackendKvMemory>(std::move(backend));
}

std::shared_ptr<KvMemory> kv_memory_for(Backend& backend) {
  if (backend.host_memory()) return nullptr;
  return backend_kv_memory(std::shared_ptr<Backend>(&backend, [](Backend*) {}));
}

}  // namespace tp
