// safetensors reader over a read-only mapping: 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}}), then the data.
// Accepted dtypes: F32, F16, BF16 (`dtype`), and the raw types of quantized checkpoints I8, U8, I16, I32, I64,
// F8_E4M3, F8_E5M2 (`raw`, rank/raw_dtype.h); others -> FormatError. Every offset and size is checked against
// the file.
// Also: the sharded index (model.safetensors.index.json, weight_map: tensor name -> shard file) and a writer.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "rank/mapped_file.h"
#include "rank/raw_dtype.h"

namespace tp {

inline constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;  // 100 MiB, as the reference implementation

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;        // meaningless when raw != None
  std::vector<int64_t> shape;      // outermost first; [] is a scalar
  const uint8_t* data = nullptr;   // into the mapping
  int64_t n_bytes = 0;
  RawType raw = RawType::None;     // an integer / FP8 tensor (quantized checkpoints)
};

class SafetensorsFile {
 public:
  // Maps and parses `path`. InputError when it cannot be opened, FormatError when it is not valid.
  explicit SafetensorsFile(const std::string& path);
  // Parses borrowed bytes (must outlive this object); `name` is used in errors.
  SafetensorsFile(std::string name, const uint8_t* data, size_t size);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data-offset order
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse();
  std::string path_;
  MappedFile map_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Reads model.safetensors.index.json: weight_map tensor name -> shard file name (a plain file name in the
// same directory; paths with '/' are rejected). Throws InputError / FormatError.
std::map<std::string, std::string> read_safetensors_index(const std::string& path);

// One tensor to write; `fill` writes exactly n_bytes = n_elems * element size at dst.
struct SafetensorsOut {
  std::string name;
  DType dtype = DType::F32;        // F32, F16 or BF16
  std::vector<int64_t> shape;
  std::function<void(uint8_t* dst)> fill;
  RawType raw = RawType::None;     // when set: the tensor's type instead of `dtype`
};
// Writes a safetensors file (tensors in the given order, 8-byte aligned header). Throws InputError.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tp
