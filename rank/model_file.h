// A model file opened for reading: GGUF (one file) or an HF directory (config.json + safetensors).
// Tensors are exposed under canonical (GGUF-style) names with row-major shapes, outermost first:
//   token_embd.weight [vocab, hidden]         output_norm.weight [hidden]     output.weight [vocab, hidden]
//   blk.{i}.attn_norm.weight [hidden]         blk.{i}.ffn_norm.weight [hidden]
//   blk.{i}.attn_q.weight [n_heads*head_dim, hidden]      blk.{i}.attn_k.weight [n_kv*head_dim, hidden]
//   blk.{i}.attn_v.weight [n_kv*head_dim, hidden]         blk.{i}.attn_output.weight [hidden, n_heads*head_dim]
//   blk.{i}.ffn_gate.weight [intermediate, hidden]        blk.{i}.ffn_up.weight [intermediate, hidden]
//   blk.{i}.ffn_down.weight [hidden, intermediate]
// Q/K keep the layout of their file; config().rope_style says which rope matches it.
// Quantized HF checkpoints (compressed-tensors) add, per linear module, the tensors of its format under the
// module's canonical name: blk.{i}.attn_q.weight_packed / .weight_scale / .weight_zero_point / .weight_g_idx /
// .weight_shape / .weight_global_scale / .input_scale ..., and blk.{i}.attn_k_scale / attn_v_scale (KV cache
// scales); quantization() describes them (rank/compressed_tensors.h).
// Data pointers point into the mmapped file and stay valid while the ModelFile lives.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/model_config.h"
#include "common/tokenizer_data.h"
#include "rank/raw_dtype.h"

namespace tp {

struct CtConfig;  // rank/ct_config.h

struct TensorView {
  std::string name;                 // canonical name
  DType dtype = DType::F32;         // meaningless when raw != None
  std::vector<int64_t> shape;       // row-major, outermost first; the innermost dim is contiguous
  const uint8_t* data = nullptr;    // into the mapping
  int64_t n_bytes = 0;
  RawType raw = RawType::None;      // integer / FP8 bytes of a quantized checkpoint (rank/raw_dtype.h)
  int64_t n_elems() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  virtual const std::string& path() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const TokenizerData& tokenizer() const = 0;
  virtual const std::vector<TensorView>& tensors() const = 0;
  // nullptr when absent.
  const TensorView* find(const std::string& name) const {
    for (const auto& t : tensors())
      if (t.name == name) return &t;
    return nullptr;
  }
  // Throws FormatError(path, name, "missing tensor") when absent, when the shape differs from `shape`, or
  // when it holds raw (integer / FP8) data rather than F32 / F16 / BF16 / GGUF blocks.
  const TensorView& require(const std::string& name, const std::vector<int64_t>& shape) const;
  // The compressed-tensors quantization of an HF checkpoint (config.json's quantization_config); nullptr for
  // an unquantized model or a GGUF file.
  virtual const CtConfig* quantization() const { return nullptr; }
};

// Opens a GGUF file or an HF directory (decided by what `path` is). Throws InputError / FormatError
// with one line naming the file and the field.
std::unique_ptr<ModelFile> open_model(const std::string& path);

}  // namespace tp
