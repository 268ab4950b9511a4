// ModelFile over a GGUF "llama" file: ModelConfig from llama.* keys (rope_style Interleaved, since llama.cpp's
// converter permutes Q/K), TokenizerData from tokenizer.ggml.*, tensors under their GGUF names with
// outermost-first shapes. tied_embeddings = the file has no output.weight.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rank/gguf_file.h"
#include "rank/model_file.h"

namespace tp {

class GgufModel : public ModelFile {
 public:
  // Throws FormatError for a non-llama architecture ("unsupported architecture 'X'") or bad/missing keys.
  explicit GgufModel(std::unique_ptr<GgufFile> file);
  explicit GgufModel(const std::string& path) : GgufModel(std::make_unique<GgufFile>(path)) {}

  const std::string& path() const override { return file_->path(); }
  const ModelConfig& config() const override { return config_; }
  const TokenizerData& tokenizer() const override { return tokenizer_; }
  const std::vector<TensorView>& tensors() const override { return views_; }
  const GgufFile& gguf() const { return *file_; }

 private:
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  TokenizerData tokenizer_;
  std::vector<TensorView> views_;
};

// The parts of GgufModel, usable on any parsed GGUF.
ModelConfig gguf_model_config(const GgufFile& f);
TokenizerData gguf_tokenizer(const GgufFile& f);

}  // namespace tp
