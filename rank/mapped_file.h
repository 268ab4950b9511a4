// A read-only view of a whole file: POSIX mmap (RAII), or borrowed bytes already in memory (tests, fuzzers).
// The bytes stay valid while the MappedFile lives; it is movable, not copyable.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tp {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. Throws InputError "cannot open 'path': reason" when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  // Borrows [data, data + size); the caller keeps it alive for the MappedFile's lifetime.
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;  // true when data_ is our mmap
};

}  // namespace tp
