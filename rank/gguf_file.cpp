#include "rank/gguf_file.h"

#include <cstring>
#include <limits>

#include "common/error.h"

namespace tp {
namespace {

constexpr int kMaxArrayDepth = 8;          // nested arrays deeper than this are rejected
constexpr uint64_t kMaxStringLen = 1ull << 30;
constexpr uint32_t kMaxDims = 4;

// Bounds-checked little-endian reader over [data, data + size).
class Cursor {
 public:
  Cursor(const std::string& file, const uint8_t* data, size_t size) : file_(file), data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& field) const {
    if (n > remaining())
      throw FormatError(file_, field,
                        "truncated: need " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                            ", file size " + std::to_string(size_));
  }
  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& field) {
    uint64_t n = read<uint64_t>(field + ".length");
    if (n > kMaxStringLen) throw FormatError(file_, field, "string length " + std::to_string(n) + " too large");
    need(n, field);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const std::string& file_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest number of bytes one value of type t can occupy in the file (bounds array counts).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::Uint8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::Uint16: case GgufType::Int16: return 2;
    case GgufType::Uint32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::Uint64: case GgufType::Int64: case GgufType::Float64: case GgufType::String: return 8;
    case GgufType::Array: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= 12; }

GgufValue read_value(Cursor& c, const std::string& file, GgufType type, const std::string& field, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::Uint8: v.u = c.read<uint8_t>(field); break;
    case GgufType::Int8: v.i = c.read<int8_t>(field); break;
    case GgufType::Uint16: v.u = c.read<uint16_t>(field); break;
    case GgufType::Int16: v.i = c.read<int16_t>(field); break;
    case GgufType::Uint32: v.u = c.read<uint32_t>(field); break;
    case GgufType::Int32: v.i = c.read<int32_t>(field); break;
    case GgufType::Uint64: v.u = c.read<uint64_t>(field); break;
    case GgufType::Int64: v.i = c.read<int64_t>(field); break;
    case GgufType::Float32: v.f = c.read<float>(field); break;
    case GgufType::Float64: v.f = c.read<double>(field); break;
    case GgufType::Bool: {
      uint8_t b = c.read<uint8_t>(field);
      if (b > 1) throw FormatError(file, field, "bool value " + std::to_string(b) + " is not 0 or 1");
      v.u = b;
      break;
    }
    case GgufType::String: v.s = c.read_string(field); break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth) throw FormatError(file, field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      uint32_t et = c.read<uint32_t>(field + ".type");
      if (!valid_type(et)) throw FormatError(file, field + ".type", "unknown value type " + std::to_string(et));
      v.elem_type = GgufType(et);
      uint64_t n = c.read<uint64_t>(field + ".count");
      if (n > c.remaining() / min_value_bytes(v.elem_type))
        throw FormatError(file, field + ".count",
                          "count " + std::to_string(n) + " does not fit in the " + std::to_string(c.remaining()) +
                              " bytes left in the file");
      v.arr.reserve(size_t(n));
      for (uint64_t k = 0; k < n; ++k)
        v.arr.push_back(read_value(c, file, v.elem_type, field + "[" + std::to_string(k) + "]", depth + 1));
      break;
    }
  }
  return v;
}

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::Uint8: case GgufType::Int8: case GgufType::Uint16: case GgufType::Int16:
    case GgufType::Uint32: case GgufType::Int32: case GgufType::Uint64: case GgufType::Int64: return true;
    default: return false;
  }
}
bool is_unsigned(GgufType t) {
  return t == GgufType::Uint8 || t == GgufType::Uint16 || t == GgufType::Uint32 || t == GgufType::Uint64;
}

int64_t as_int(const GgufValue& v, const std::string& file, const std::string& key) {
  if (!is_int_type(v.type)) throw FormatError(file, key, "expected an integer, found " + gguf_type_name(v.type));
  if (is_unsigned(v.type)) {
    if (v.u > uint64_t(std::numeric_limits<int64_t>::max()))
      throw FormatError(file, key, "value " + std::to_string(v.u) + " out of range");
    return int64_t(v.u);
  }
  return v.i;
}
double as_float(const GgufValue& v, const std::string& file, const std::string& key) {
  if (v.type == GgufType::Float32 || v.type == GgufType::Float64) return v.f;
  if (is_int_type(v.type)) return double(as_int(v, file, key));
  throw FormatError(file, key, "expected a float, found " + gguf_type_name(v.type));
}

}  // namespace

std::string gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::Uint8: return "uint8";
    case GgufType::Int8: return "int8";
    case GgufType::Uint16: return "uint16";
    case GgufType::Int16: return "int16";
    case GgufType::Uint32: return "uint32";
    case GgufType::Int32: return "int32";
    case GgufType::Float32: return "float32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::Uint64: return "uint64";
    case GgufType::Int64: return "int64";
    case GgufType::Float64: return "float64";
  }
  return "type " + std::to_string(uint32_t(t));
}

DType ggml_to_dtype(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::Q4_0: return DType::Q4_0;
    case GgmlType::Q4_1: return DType::Q4_1;
    case GgmlType::Q5_0: return DType::Q5_0;
    case GgmlType::Q5_1:
      return DType::Q5_1;
    case GgmlType::Q8_0: return DType::Q8_0;
    case GgmlType::Q5_K:
      return DType::Q5_K;
    case GgmlType::Q2_K: return DType::Q2_K;
    case GgmlType::Q3_K: return DType::Q3_K;
    case GgmlType::IQ4_NL: return DType::IQ4_NL;
    case GgmlType::IQ4_XS: return DType::IQ4_XS;
    case GgmlType::Q4_K: return DType::Q4_K;
    case GgmlType::Q6_K: return DType::Q6_K;
    case GgmlType::BF16: return DType::BF16;
  }
  throw Error("unknown ggml type " + std::to_string(uint32_t(t)));
}

GgmlType dtype_to_ggml(DType t) {
  switch (t) {
    case DType::F32: return GgmlType::F32;
    case DType::F16: return GgmlType::F16;
    case DType::BF16: return GgmlType::BF16;
    case DType::Q8_0: return GgmlType::Q8_0;
    case DType::Q4_0: return GgmlType::Q4_0;
    case DType::Q4_1: return GgmlType::Q4_1;
    case DType::Q5_0: return GgmlType::Q5_0;
    case DType::Q4_K: return GgmlType::Q4_K;
    case DType::Q6_K: return GgmlType::Q6_K;
    case DType::Q5_1:
      return GgmlType::Q5_1;
    case DType::Q5_K:
      return GgmlType::Q5_K;
    case DType::Q2_K: return GgmlType::Q2_K;
    case DType::Q3_K: return GgmlType::Q3_K;
    case DType::IQ4_NL: return GgmlType::IQ4_NL;
    case DType::IQ4_XS: return GgmlType::IQ4_XS;
  }
  throw Error("unknown dtype");
}

GgufValue GgufValue::make_string(std::string v) {
  GgufValue r;
  r.type = GgufType::String;
  r.s = std::move(v);
  return r;
}
GgufValue GgufValue::make_u32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::Uint32;
  r.u = v;
  return r;
}
GgufValue GgufValue::make_i32(int32_t v) {
  GgufValue r;
  r.type = GgufType::Int32;
  r.i = v;
  return r;
}
GgufValue GgufValue::make_f32(float v) {
  GgufValue r;
  r.type = GgufType::Float32;
  r.f = v;
  return r;
}
GgufValue GgufValue::make_bool(bool v) {
  GgufValue r;
  r.type = GgufType::Bool;
  r.u = v ? 1 : 0;
  return r;
}
GgufValue GgufValue::make_string_array(const std::vector<std::string>& v) {
  GgufValue r;
  r.type = GgufType::Array;
  r.elem_type = GgufType::String;
  r.arr.reserve(v.size());
  for (const auto& s : v) r.arr.push_back(make_string(s));
  return r;
}
GgufValue GgufValue::make_i32_array(const std::vector<int32_t>& v) {
  GgufValue r;
  r.type = GgufType::Array;
  r.elem_type = GgufType::Int32;
  r.arr.reserve(v.size());
  for (int32_t x : v) r.arr.push_back(make_i32(x));
  return r;
}

int64_t GgufTensorInfo::n_elems() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path), map_(path) { parse(); }

GgufFile::GgufFile(std::string name, const uint8_t* data, size_t size) : path_(std::move(name)), map_(data, size) {
  parse();
}

void GgufFile::parse() {
  const std::string& file = path_;
  const size_t size = map_.size();
  Cursor c(file, map_.data(), size);
  uint32_t magic = c.read<uint32_t>("header.magic");
  if (magic != kGgufMagic) throw FormatError(file, "header.magic", "not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("header.version");
  if (version_ != 2 && version_ != 3)
    throw FormatError(file, "header.version", "unsupported GGUF version " + std::to_string(version_) + " (need 2 or 3)");
  uint64_t n_tensors = c.read<uint64_t>("header.n_tensors");
  uint64_t n_kv = c.read<uint64_t>("header.n_kv");
  // Each kv needs >= 8 (key length) + 4 (type) + 1 bytes, each tensor info >= 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.remaining() / 13)
    throw FormatError(file, "header.n_kv", "count " + std::to_string(n_kv) + " does not fit in the file");
  if (n_tensors > c.remaining() / 32)
    throw FormatError(file, "header.n_tensors", "count " + std::to_string(n_tensors) + " does not fit in the file");

  kvs_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string field = "metadata[" + std::to_string(k) + "]";
    GgufKv kv;
    kv.key = c.read_string(field + ".key");
    uint32_t t = c.read<uint32_t>(field + " '" + kv.key + "'.type");
    if (!valid_type(t))
      throw FormatError(file, field + " '" + kv.key + "'.type", "unknown value type " + std::to_string(t));
    kv.value = read_value(c, file, GgufType(t), field + " '" + kv.key + "'.value", 0);
    if (kv_index_.count(kv.key)) throw FormatError(file, field + ".key", "duplicate key '" + kv.key + "'");
    kv_index_.emplace(kv.key, kvs_.size());
    kvs_.push_back(std::move(kv));
  }

  if (const GgufValue* a = find("general.alignment")) {
    int64_t al = as_int(*a, file, "general.alignment");
    if (al <= 0 || (al & (al - 1)) != 0 || al > (1 << 20))
      throw FormatError(file, "general.alignment", "alignment " + std::to_string(al) + " is not a power of two <= 1 MiB");
    alignment_ = uint64_t(al);
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const std::string field = "tensor_infos[" + std::to_string(k) + "]";
    GgufTensorInfo ti;
    ti.name = c.read_string(field + ".name");
    const std::string tf = field + " '" + ti.name + "'";
    uint32_t n_dims = c.read<uint32_t>(tf + ".n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      throw FormatError(file, tf + ".n_dims", "n_dims " + std::to_string(n_dims) + " not in [1, 4]");
    int64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = c.read<uint64_t>(tf + ".ne[" + std::to_string(d) + "]");
      if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elems, int64_t(ne), &n_elems))
        throw FormatError(file, tf + ".ne[" + std::to_string(d) + "]", "dimension " + std::to_string(ne) + " is zero or overflows");
      ti.ne.push_back(int64_t(ne));
    }
    uint32_t type = c.read<uint32_t>(tf + ".type");
    switch (type) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 6:
      case 7:
      case 8:
      case 10:
      case 11:
      case 12:
      case 13:
      case 14:
      case 20:
      case 23:
      case 30:
        break;
      default:
        throw FormatError(file, tf + ".type",
                          "unsupported tensor type " + std::to_string(type) +
                              " (supported: F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q2_K=10, Q3_K=11, "
                              "Q4_K=12, Q5_K=13, Q6_K=14, IQ4_NL=20, IQ4_XS=23, BF16=30)");
    }
    ti.type = GgmlType(type);
    ti.dtype = ggml_to_dtype(ti.type);
    const int64_t be = dtype_block_elems(ti.dtype);
    if (ti.ne[0] % be != 0)
      throw FormatError(file, tf + ".ne[0]",
                        "row length " + std::to_string(ti.ne[0]) + " is not a multiple of the block size " + std::to_string(be));
    if (__builtin_mul_overflow(n_elems / be, dtype_block_bytes(ti.dtype), &ti.n_bytes))
      throw FormatError(file, tf + ".ne", "tensor byte size overflows");
    ti.offset = c.read<uint64_t>(tf + ".offset");
    if (ti.offset % alignment_ != 0)
      throw FormatError(file, tf + ".offset",
                        "offset " + std::to_string(ti.offset) + " is not a multiple of the alignment " + std::to_string(alignment_));
    if (tensor_index_.count(ti.name)) throw FormatError(file, tf + ".name", "duplicate tensor name");
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size)
    throw FormatError(file, "data_offset", "data section at " + std::to_string(data_offset_) + " beyond end of file (size " +
                                               std::to_string(size) + ")");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    GgufTensorInfo& ti = tensors_[k];
    uint64_t begin = 0, end = 0;
    bool overflow = __builtin_add_overflow(data_offset_, ti.offset, &begin) ||
                    __builtin_add_overflow(begin, uint64_t(ti.n_bytes), &end);
    if (overflow || end > size)
      throw FormatError(file, "tensor_infos[" + std::to_string(k) + "] '" + ti.name + "'.offset",
                        overflow ? std::string("data range overflows")
                                 : "data range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                       ") beyond end of file (size " + std::to_string(size) + ")");
    ti.data = map_.data() + begin;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufValue& GgufFile::need(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw FormatError(path_, key, "missing key");
  return *v;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::String) throw FormatError(path_, key, "expected a string, found " + gguf_type_name(v.type));
  return v.s;
}
int64_t GgufFile::get_int(const std::string& key) const { return as_int(need(key), path_, key); }
double GgufFile::get_float(const std::string& key) const { return as_float(need(key), path_, key); }
bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::Bool) throw FormatError(path_, key, "expected a bool, found " + gguf_type_name(v.type));
  return v.u != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::Array || v.elem_type != GgufType::String)
    throw FormatError(path_, key,
                      "expected an array of strings, found " + gguf_type_name(v.type) +
                          (v.type == GgufType::Array ? " of " + gguf_type_name(v.elem_type) : ""));
  std::vector<std::string> r;
  r.reserve(v.arr.size());
  for (const auto& e : v.arr) r.push_back(e.s);
  return r;
}
std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::Array || !is_int_type(v.elem_type))
    throw FormatError(path_, key,
                      "expected an array of integers, found " + gguf_type_name(v.type) +
                          (v.type == GgufType::Array ? " of " + gguf_type_name(v.elem_type) : ""));
  std::vector<int64_t> r;
  r.reserve(v.arr.size());
  for (size_t k = 0; k < v.arr.size(); ++k) r.push_back(as_int(v.arr[k], path_, key + "[" + std::to_string(k) + "]"));
  return r;
}
std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::Array || (v.elem_type != GgufType::Float32 && v.elem_type != GgufType::Float64 && !is_int_type(v.elem_type)))
    throw FormatError(path_, key,
                      "expected an array of floats, found " + gguf_type_name(v.type) +
                          (v.type == GgufType::Array ? " of " + gguf_type_name(v.elem_type) : ""));
  std::vector<double> r;
  r.reserve(v.arr.size());
  for (size_t k = 0; k < v.arr.size(); ++k) r.push_back(as_float(v.arr[k], path_, key + "[" + std::to_string(k) + "]"));
  return r;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }
double GgufFile::get_float_or(const std::string& key, double fallback) const { return has(key) ? get_float(key) : fallback; }
bool GgufFile::get_bool_or(const std::string& key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tp
