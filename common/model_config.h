// The shape of a Llama-architecture model, read from a GGUF header or an HF config.json.
#pragma once
#include <cstdint>
#include <string>

namespace tp {

// How Q and K are laid out within a head, which decides the rope that matches them.
//   Interleaved: GGUF "llama" files (llama.cpp permuted Q/K): rotate adjacent pairs (2i, 2i+1).
//   Neox:        HF safetensors: rotate halves (i, i + head_dim/2).
enum class RopeStyle : uint8_t { Interleaved, Neox };

struct ModelConfig {
  std::string architecture = "llama";
  std::string name;              // general.name or the directory name
  int64_t n_layers = 0;
  int64_t hidden = 0;            // embedding length
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;          // hidden / n_heads unless the file says otherwise
  int64_t intermediate = 0;      // feed-forward length
  int64_t vocab = 0;
  int64_t max_context = 0;       // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tied_embeddings = false;  // lm_head == token embedding (no output.weight)
  RopeStyle rope_style = RopeStyle::Neox;
};

}  // namespace tp
