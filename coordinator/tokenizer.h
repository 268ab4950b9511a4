// Byte-level BPE tokenizer (GPT-2 style, tokenizer.ggml.model = "gpt2") that produces the same token ids
// as llama.cpp (llama-vocab.cpp, LLAMA_VOCAB_TYPE_BPE) for the supported pre-tokenizer types
// (smollm, gpt2, llama3; see PreTokenizer::patterns_for).
//
// encode: special-token partition (llama.cpp's tokenizer_st_partition) → per text fragment: UTF-8 decoded
// leniently like llama.cpp (ill-formed bytes become U+FFFD) → pre-tokenizer regexes → byte-level alphabet
// → BPE merges by rank (lowest rank first, leftmost on ties).
// Ill-formed UTF-8 input is decoded leniently like llama.cpp (each bad byte becomes U+FFFD; code points above
// U+10FFFF, on which llama.cpp throws, also become U+FFFD). Bytes whose byte-level character is not in
// the vocabulary are dropped, as llama.cpp does (SmolLM2 lacks 0x04 0x06 0x13 0x14 0x16 0x1D 0xC0 0xC1
// 0xF1 0xF2 0xF5..0xFF).
// decode: concatenation of token pieces; for "smollm" (clean_spaces = false) this equals llama.cpp's
// detokenize (for gpt2/llama3 llama.cpp would also apply clean_up_tokenization_spaces; we do not).
// decode(encode(s)) == s for every valid UTF-8 `s` the vocabulary can represent (add_bos = false).
//
// Special tokens: control and unknown tokens (and text-detected ones such as "<|im_end|>", forced to
// control as llama.cpp does) are matched in text only with parse_special; user-defined tokens are matched
// always (llama.cpp does so too). Longer token texts take precedence.
//
// A Tokenizer is immutable after construction; all const methods are thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/tokenizer_data.h"
#include "coordinator/pre_tokenizer.h"

namespace tp {

class Tokenizer {
 public:
  // Throws InputError when the model or pre-tokenizer type is unsupported or the data is inconsistent.
  explicit Tokenizer(const TokenizerData& data);

  // add_bos: prepend bos when the vocabulary asks for it (TokenizerData::add_bos), like llama.cpp's
  // add_special. parse_special: match control tokens written in `text` (e.g. "<|im_start|>").
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Concatenated pieces. special: control tokens decode to their text (else to nothing). Throws
  // InputError for an id outside [0, vocab_size). The result may hold ill-formed UTF-8 when `ids` split a
  // character; use IncrementalDecoder for streaming.
  std::string decode(const std::vector<int32_t>& ids, bool special = true) const;

  // The bytes token `id` stands for (control tokens: their text). Throws InputError when out of range.
  std::string token_to_piece(int32_t id) const;
  // The bytes of `id`, empty for control tokens when !special. Precondition: 0 <= id < vocab_size().
  const std::string& piece(int32_t id, bool special) const;

  // Token id of an exact token text, -1 when absent.
  int32_t token_id(std::string_view token_text) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // End of generation: eos, plus the tokens llama.cpp detects by text ("<|im_end|>", "<|endoftext|>",
  // "<|eot_id|>", ..., and the FIM pad/repo/sep tokens).
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(types_.size()); }
  bool add_bos() const { return add_bos_; }
  const std::string& pre() const { return pre_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged text
  };

  int32_t intern(const std::string& text);  // symbol id of `text`, adding a non-token symbol when needed
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  void emit_symbol(int32_t sym, std::vector<int32_t>& out) const;

  std::string pre_;
  bool ignore_merges_ = false;
  bool add_bos_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1;
  std::vector<TokenType> types_;              // id -> type (after llama.cpp's by-text overrides)
  std::vector<std::string> pieces_;           // id -> decoded bytes with special = true
  std::vector<bool> eog_;                     // id -> end of generation
  std::vector<int32_t> special_order_;        // control / user-defined / unknown ids, longest text first
  std::vector<std::string> special_text_;     // id -> raw text, only for ids in special_order_
  std::unordered_map<std::string, int32_t> symbol_of_text_;  // token texts (ids) + merge-only symbols
  std::vector<std::string> extra_symbols_;    // symbol id vocab_size()+k -> byte-level text (not a token)
  std::vector<int32_t> byte_symbol_;          // byte -> symbol id of its byte-level character
  std::unordered_map<uint64_t, Merge> merges_;  // (left symbol << 32 | right symbol) -> merge
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
};

// Streams text as token ids arrive: returns only complete UTF-8 characters and holds back a trailing
// partial multi-byte sequence until the token that completes it. Output is always valid UTF-8
// (ill-formed bytes become U+FFFD). Not thread-safe; one per sequence.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool special = true)
      : tokenizer_(&tokenizer), special_(special) {}

  // Text made complete by token `id` (possibly empty). Throws InputError for an out-of-range id.
  std::string push(int32_t id);
  // Whatever is held back, partial sequences as U+FFFD; the decoder is empty afterwards.
  std::string flush();
  // Bytes held back.
  size_t n_pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool special_;
  std::string pending_;
};

}  // namespace tp
