#include "rank/gguf_model.h"

#include <limits>

#include "common/error.h"

namespace tp {
namespace {

int64_t positive(const GgufFile& f, const std::string& key, int64_t v) {
  if (v <= 0 || v > (int64_t(1) << 40)) throw FormatError(f.path(), key, "value " + std::to_string(v) + " out of range");
  return v;
}

int32_t token_id(const GgufFile& f, const std::string& key, int64_t n_tokens) {
  if (!f.has(key)) return -1;
  int64_t v = f.get_int(key);
  if (v < -1 || v >= n_tokens)
    throw FormatError(f.path(), key, "token id " + std::to_string(v) + " not in [0, " + std::to_string(n_tokens) + ")");
  return int32_t(v);
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama") throw FormatError(f.path(), "general.architecture", "unsupported architecture '" + arch + "'");
  c.architecture = arch;
  c.name = f.get_string_or("general.name", "");
  const std::string p = arch + ".";
  c.n_layers = positive(f, p + "block_count", f.get_int(p + "block_count"));
  c.hidden = positive(f, p + "embedding_length", f.get_int(p + "embedding_length"));
  c.n_heads = positive(f, p + "attention.head_count", f.get_int(p + "attention.head_count"));
  c.n_kv_heads = positive(f, p + "attention.head_count_kv", f.get_int_or(p + "attention.head_count_kv", c.n_heads));
  c.intermediate = positive(f, p + "feed_forward_length", f.get_int(p + "feed_forward_length"));
  c.max_context = positive(f, p + "context_length", f.get_int_or(p + "context_length", 2048));
  c.rms_eps = float(f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = float(f.get_float_or(p + "rope.freq_base", 10000.0));
  if (f.has(p + "attention.key_length"))
    c.head_dim = positive(f, p + "attention.key_length", f.get_int(p + "attention.key_length"));
  else if (f.has(p + "rope.dimension_count"))
    c.head_dim = positive(f, p + "rope.dimension_count", f.get_int(p + "rope.dimension_count"));
  else
    c.head_dim = positive(f, p + "embedding_length / head_count", c.hidden / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    throw FormatError(f.path(), p + "attention.head_count_kv",
                      std::to_string(c.n_kv_heads) + " does not divide head_count " + std::to_string(c.n_heads));
  if (f.has(p + "vocab_size")) {
    c.vocab = positive(f, p + "vocab_size", f.get_int(p + "vocab_size"));
  } else if (const GgufValue* t = f.find("tokenizer.ggml.tokens"); t && t->type == GgufType::Array) {
    c.vocab = positive(f, "tokenizer.ggml.tokens", int64_t(t->arr.size()));
  } else if (const GgufTensorInfo* e = f.find_tensor("token_embd.weight"); e && e->ne.size() == 2) {
    c.vocab = e->ne[1];
  } else {
    throw FormatError(f.path(), p + "vocab_size", "missing key (and no tokenizer.ggml.tokens)");
  }
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.rope_style = RopeStyle::Interleaved;
  return c;
}

TokenizerData gguf_tokenizer(const GgufFile& f) {
  TokenizerData t;
  t.model = f.get_string_or("tokenizer.ggml.model", "gpt2");
  t.pre = f.get_string_or("tokenizer.ggml.pre", "default");
  if (f.has("tokenizer.ggml.tokens")) t.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const int64_t n = int64_t(t.tokens.size());
  if (f.has("tokenizer.ggml.token_type")) {
    std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
    if (int64_t(types.size()) != n)
      throw FormatError(f.path(), "tokenizer.ggml.token_type",
                        std::to_string(types.size()) + " entries, but " + std::to_string(n) + " tokens");
    t.token_types.reserve(types.size());
    for (size_t k = 0; k < types.size(); ++k) {
      if (types[k] < 0 || types[k] > 6)
        throw FormatError(f.path(), "tokenizer.ggml.token_type[" + std::to_string(k) + "]",
                          "unknown token type " + std::to_string(types[k]));
      t.token_types.push_back(TokenType(types[k]));
    }
  } else {
    t.token_types.assign(size_t(n), TokenType::Normal);
  }
  if (f.has("tokenizer.ggml.merges")) t.merges = f.get_string_array("tokenizer.ggml.merges");
  t.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", n);
  t.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", n);
  t.unk_id = token_id(f, "tokenizer.ggml.unknown_token_id", n);
  t.pad_id = token_id(f, "tokenizer.ggml.padding_token_id", n);
  t.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
  t.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  t.chat_template = f.get_string_or("tokenizer.chat_template", "");
  return t;
}

GgufModel::GgufModel(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {
  config_ = gguf_model_config(*file_);
  tokenizer_ = gguf_tokenizer(*file_);
  views_.reserve(file_->tensor_infos().size());
  for (const auto& ti : file_->tensor_infos()) {
    TensorView v;
    v.name = ti.name;
    v.dtype = ti.dtype;
    v.shape = ti.shape();
    v.data = ti.data;
    v.n_bytes = ti.n_bytes;
    views_.push_back(std::move(v));
  }
}

}  // namespace tp
