// Writes a GGUF v3 file: metadata in insertion order, tensor infos, then each tensor's bytes at an offset
// aligned to general.alignment (32 unless set). Tensor bytes are produced one tensor at a time by a callback,
// so a large model is never held in memory at once.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rank/gguf_file.h"

namespace tp {

class GgufWriter {
 public:
  // Fills exactly n_bytes at dst with the tensor's data.
  using Fill = std::function<void(uint8_t* dst)>;

  // Adds or replaces a key (a replaced key keeps its position).
  void set(const std::string& key, GgufValue value);
  // `ne` innermost first, as GGUF stores it.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill);
  // Writes the file; throws InputError when it cannot be written.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    int64_t n_bytes;
    Fill fill;
  };
  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace tp
