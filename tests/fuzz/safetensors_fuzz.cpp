// libFuzzer target: arbitrary bytes through the safetensors reader.
// Any tp::Error is an accepted outcome; a crash, sanitizer report or other exception is a bug.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "rank/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tp::SafetensorsFile f("fuzz.safetensors", data, size);
    std::vector<float> row;
    for (const auto& t : f.tensors()) {
      if (t.n_bytes == 0) continue;
      if (t.raw == tp::RawType::None) {  // raw integer / FP8 tensors have no DType to decode (t.dtype unset)
        const int64_t n = std::min<int64_t>(t.n_bytes / tp::dtype_block_bytes(t.dtype), 1024);
        row.resize(size_t(n));
        tp::dequantize_row(t.dtype, t.data, row.data(), n);
      }
      volatile uint8_t last = t.data[t.n_bytes - 1];
      (void)last;
    }
  } catch (const tp::Error&) {
  }
  return 0;
}
