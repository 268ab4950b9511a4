// libFuzzer target: arbitrary bytes through the GGUF reader and the llama ModelFile on top of it; each tensor's
// first row decoded, and requantized into its held type when no kernel keeps its own (rank/gguf_requantize.h).
// Any tp::Error is an accepted outcome; a crash, sanitizer report or other exception is a bug.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.h"
#include "rank/gguf_file.h"
#include "rank/gguf_model.h"
#include "rank/gguf_requantize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = std::make_unique<tp::GgufFile>("fuzz.gguf", data, size);
    std::vector<float> row;
    std::vector<uint8_t> held;
    for (const auto& t : f->tensor_infos()) {
      // Touch the first row (up to 1024 elements) and the last byte of every tensor.
      const int64_t be = tp::dtype_block_elems(t.dtype);
      const int64_t n = std::min<int64_t>(t.ne[0], 1024) / be * be;
      row.resize(size_t(n));
      tp::dequantize_row(t.dtype, t.data, row.data(), n);
      // The types held in another (common/packed_weight.h gguf_held_dtype; that file is not in this target's library).
      if (t.dtype == tp::DType::IQ4_XS) {
        held.resize(size_t(n / 32 * 18));  // the held row: IQ4_NL's 18 bytes a 32
        tp::requantize_gguf_row(t.dtype, t.data, held.data(), n);
      }
      volatile uint8_t last = t.data[t.n_bytes - 1];
      (void)last;
    }
    tp::GgufModel m(std::move(f));
    volatile size_t n_tokens = m.tokenizer().tokens.size();
    (void)n_tokens;
  } catch (const tp::Error&) {
  }
  return 0;
}
