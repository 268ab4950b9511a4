// GGUF v2/v3 reader over a read-only mapping. Parses the header, every metadata key/value (all value types,
// nested arrays included) and the tensor infos, and validates every count, length, offset and size against
// the file size before reading it: a truncated or corrupt file throws one FormatError
// "<file>: <field>: <reason>", never crashes and never allocates more than a small multiple of the file size.
// GGUF dims are innermost first (ne[0] = row length); GgufTensorInfo::shape() gives outermost first.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "rank/mapped_file.h"

namespace tp {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" as a little-endian uint32
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// GGUF metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};
std::string gguf_type_name(GgufType t);

// ggml tensor types this reader accepts (others -> FormatError naming the tensor and the number).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30
};
DType ggml_to_dtype(GgmlType t);
GgmlType dtype_to_ggml(DType t);

// One metadata value. Exactly the member that matches `type` is meaningful.
struct GgufValue {
  GgufType type = GgufType::Uint8;
  uint64_t u = 0;                  // Uint8/16/32/64, Bool (0 or 1)
  int64_t i = 0;                   // Int8/16/32/64
  double f = 0;                    // Float32/64
  std::string s;                   // String
  GgufType elem_type = GgufType::Uint8;  // Array: type of the elements
  std::vector<GgufValue> arr;      // Array

  static GgufValue make_string(std::string v);
  static GgufValue make_u32(uint32_t v);
  static GgufValue make_i32(int32_t v);
  static GgufValue make_f32(float v);
  static GgufValue make_bool(bool v);
  static GgufValue make_string_array(const std::vector<std::string>& v);
  static GgufValue make_i32_array(const std::vector<int32_t>& v);
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  DType dtype = DType::F32;
  std::vector<int64_t> ne;         // innermost first, 1..4 dims, each > 0
  uint64_t offset = 0;             // from the start of the data section
  const uint8_t* data = nullptr;   // into the mapping
  int64_t n_bytes = 0;
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }  // outermost first
  int64_t n_elems() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws InputError when it cannot be opened, FormatError when it is not valid GGUF.
  explicit GgufFile(const std::string& path);
  // Parses bytes already in memory (borrowed, must outlive this object); `name` is used in errors.
  GgufFile(std::string name, const uint8_t* data, size_t size);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  size_t file_size() const { return map_.size(); }

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters. Throw FormatError(path, key, "missing key") when absent and
  // FormatError(path, key, "expected <kind>, found <type>") on a wrong type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;     // any integer type; uint64 above INT64_MAX -> error
  double get_float(const std::string& key) const;    // float32/64 or any integer type
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // As above, but `fallback` when the key is absent (a wrong type still throws).
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent

 private:
  void parse();
  const GgufValue& need(const std::string& key) const;

  std::string path_;
  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace tp
