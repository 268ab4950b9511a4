// Synthetic Llama models for the shapes the real model can't give (tp 2, 4, 8; ~1B parameters for
// benchmarks): random but well-scaled weights, deterministic by seed, written as an HF safetensors directory
// (config.json, model.safetensors, tokenizer.json with a byte-level vocabulary, tokenizer_config.json).
//   linear weights ~ N(0, 0.02²) (Box–Muller over SplitMix64, identical on every platform); norms = 1.
// The tokenizer: the 256 byte-level tokens, then "<|extra_N|>" normal tokens, and "<|endoftext|>" (control,
// the last id, eos). No merges, so text encodes byte by byte.
#pragma once
#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace tp {

struct SynthSpec {
  int64_t n_layers = 4;
  int64_t hidden = 256;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 4;
  int64_t intermediate = 512;
  int64_t vocab = 512;       // >= 257 (256 bytes + eos)
  uint64_t seed = 0;
  DType dtype = DType::BF16;  // F32 or BF16
  bool tied = false;          // the lm_head is the token embedding (no lm_head.weight; tie_word_embeddings true)
};

// Validates the spec (InputError naming the field) and writes the directory `out` (created if missing).
void write_synthetic_model(const std::string& out, const SynthSpec& spec);

}  // namespace tp
