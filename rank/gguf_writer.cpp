#include "rank/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.h"

namespace tp {
namespace {

class Out {
 public:
  explicit Out(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
  }
  ~Out() {
    if (f_) std::fclose(f_);
  }
  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) throw InputError("cannot write '" + path_ + "': " + std::strerror(errno));
    pos_ += n;
  }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t align) {
    static const uint8_t zeros[4096] = {};
    while (pos_ % align) bytes(zeros, size_t(std::min<uint64_t>(align - pos_ % align, sizeof zeros)));
  }
  uint64_t pos() const { return pos_; }
  void close() {
    if (std::fclose(f_) != 0) {
      f_ = nullptr;
      throw InputError("cannot write '" + path_ + "': " + std::strerror(errno));
    }
    f_ = nullptr;
  }

 private:
  std::string path_;
  FILE* f_;
  uint64_t pos_ = 0;
};

void write_value(Out& o, const GgufValue& v) {
  switch (v.type) {
    case GgufType::Uint8: o.pod<uint8_t>(uint8_t(v.u)); break;
    case GgufType::Int8: o.pod<int8_t>(int8_t(v.i)); break;
    case GgufType::Uint16: o.pod<uint16_t>(uint16_t(v.u)); break;
    case GgufType::Int16: o.pod<int16_t>(int16_t(v.i)); break;
    case GgufType::Uint32: o.pod<uint32_t>(uint32_t(v.u)); break;
    case GgufType::Int32: o.pod<int32_t>(int32_t(v.i)); break;
    case GgufType::Uint64: o.pod<uint64_t>(v.u); break;
    case GgufType::Int64: o.pod<int64_t>(v.i); break;
    case GgufType::Float32: o.pod<float>(float(v.f)); break;
    case GgufType::Float64: o.pod<double>(v.f); break;
    case GgufType::Bool: o.pod<uint8_t>(v.u ? 1 : 0); break;
    case GgufType::String: o.str(v.s); break;
    case GgufType::Array:
      o.pod<uint32_t>(uint32_t(v.elem_type));
      o.pod<uint64_t>(v.arr.size());
      for (const auto& e : v.arr) write_value(o, e);
      break;
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kvs_)
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  kvs_.push_back({key, std::move(value)});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill) {
  DType dt = ggml_to_dtype(type);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  tensors_.push_back({name, type, std::move(ne), n / dtype_block_elems(dt) * dtype_block_bytes(dt), std::move(fill)});
}

void GgufWriter::write(const std::string& path) const {
  uint64_t align = kGgufDefaultAlignment;
  for (const auto& kv : kvs_)
    if (kv.key == "general.alignment") align = kv.value.type == GgufType::Uint32 || kv.value.type == GgufType::Uint64 ? kv.value.u : uint64_t(kv.value.i);
  Out o(path);
  o.pod<uint32_t>(kGgufMagic);
  o.pod<uint32_t>(3);
  o.pod<uint64_t>(tensors_.size());
  o.pod<uint64_t>(kvs_.size());
  for (const auto& kv : kvs_) {
    o.str(kv.key);
    o.pod<uint32_t>(uint32_t(kv.value.type));
    write_value(o, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.str(t.name);
    o.pod<uint32_t>(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) o.pod<uint64_t>(uint64_t(d));
    o.pod<uint32_t>(uint32_t(t.type));
    o.pod<uint64_t>(offset);
    offset += (uint64_t(t.n_bytes) + align - 1) / align * align;
  }
  o.pad_to(align);
  std::vector<uint8_t> buf;
  for (const auto& t : tensors_) {
    buf.assign(size_t(t.n_bytes), 0);
    t.fill(buf.data());
    o.bytes(buf.data(), buf.size());
    o.pad_to(align);
  }
  o.close();
}

}  // namespace tp
