// libFuzzer target: arbitrary bytes as a compressed-tensors quantization_config (rank/ct_config.h), then the scheme
// of a few module names under the config (its ignore list and targets, "re:" regular expressions included, run
// against them). Seeds: the quantization_config of each llm-compressor fixture (tests/peers/fixtures/
// compressed_tensors). Any tp::Error is an accepted outcome; a crash, sanitizer report or other exception is a bug.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "rank/ct_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tp::CtConfig c =
        tp::parse_ct_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    for (const char* m : {"model.layers.0.self_attn.q_proj", "model.layers.11.mlp.down_proj", "lm_head"})
      (void)tp::ct_scheme_for(c, m);
    (void)tp::ct_scheme_for(c, "model.embed_tokens", "Embedding");
  } catch (const tp::Error&) {
  }
  return 0;
}
