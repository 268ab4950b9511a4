// ModelFile over a Hugging Face model directory:
//   config.json                       -> ModelConfig (LlamaForCausalLM only; rope_style Neox)
//   model.safetensors, or model.safetensors.index.json + its shards -> tensors, renamed to canonical names
//   quantization_config in config.json -> quantization() (compressed-tensors; rank/ct_config.h)
//   tokenizer.json (+ tokenizer_config.json, chat_template.jinja)   -> TokenizerData (optional: without it the
//                                     directory opens for its shape and weights, and tokenizer() throws)
// Also the writers `tpserve convert` uses to produce such a directory; the reader reads back exactly
// what they write.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rank/model_file.h"
#include "rank/safetensors_file.h"

namespace tp {

class HfDir : public ModelFile {
 public:
  // Throws InputError (unreadable file) / FormatError (bad JSON, unsupported architecture, bad tensors).
  explicit HfDir(const std::string& dir);

  const std::string& path() const override { return path_; }
  const ModelConfig& config() const override { return config_; }
  // Throws InputError naming the directory and the missing tokenizer.json when it has none.
  const TokenizerData& tokenizer() const override;
  const std::vector<TensorView>& tensors() const override { return views_; }
  // config.json's quantization_config (compressed-tensors), parsed and checked at open; nullptr when none.
  const CtConfig* quantization() const override { return quant_.get(); }

 private:
  std::string path_;
  ModelConfig config_;
  TokenizerData tokenizer_;
  bool has_tokenizer_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<TensorView> views_;
  std::shared_ptr<const CtConfig> quant_;
};

// HF tensor name -> canonical name ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight");
// names it does not know come back unchanged.
std::string hf_to_canonical_name(const std::string& hf_name);
// The inverse; unknown names come back unchanged.
std::string canonical_to_hf_name(const std::string& name);

// Parsers, exposed for tests. `dir` is the model directory. read_hf_tokenizer gives an empty TokenizerData
// when the directory has no tokenizer.json.
ModelConfig read_hf_config(const std::string& dir);
TokenizerData read_hf_tokenizer(const std::string& dir);

// Writers. torch_dtype: "float32" or "bfloat16". Throw InputError when a file cannot be written and
// FormatError when the tokenizer cannot be expressed (duplicate token texts).
void write_hf_config(const std::string& dir, const ModelConfig& config, const TokenizerData& tok,
                     const std::string& torch_dtype);
void write_hf_tokenizer(const std::string& dir, const TokenizerData& tok);

}  // namespace tp
