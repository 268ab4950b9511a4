// The data a byte-level BPE tokenizer is built from, as a model file stores it (GGUF tokenizer.ggml.*
// metadata or an HF tokenizer.json + tokenizer_config.json). Plain data: loaders in rank/ fill it,
// the Tokenizer in coordinator/ consumes it, `tpserve convert` writes it back out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

// Token types as GGUF numbers them (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct TokenizerData {
  std::string model = "gpt2";            // tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported
  std::string pre = "default";           // tokenizer.ggml.pre: "smollm", "gpt2", "llama3", ...
  std::vector<std::string> tokens;       // id -> token text in GPT-2 byte-level alphabet
  std::vector<TokenType> token_types;    // id -> type; same length as tokens
  std::vector<std::string> merges;       // rank order, each "left right"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;  // -1: none
  bool add_bos = false, add_eos = false;
  std::string chat_template;             // Jinja source, may be empty
};

}  // namespace tp
