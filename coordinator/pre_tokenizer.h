// Pre-tokenization for byte-level BPE: splits text into words that BPE then encodes one at a time, the
// way llama.cpp's unicode_regex_split does. A pre-tokenizer is a sequence of regexes; each is applied to
// every piece the previous one produced, and the unmatched stretches between matches are pieces too.
//
// Patterns use PCRE2 syntax (UTF + UCP), except that `\s` / `\S` mean llama.cpp's whitespace set
// (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000) rather than PCRE2's (which also has U+180E). Patterns are JIT-compiled once; split() is
// const and thread-safe (match data is per thread).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

// A word of the input: byte range [begin, end).
struct ByteRange {
  size_t begin = 0, end = 0;
};

class PreTokenizer {
 public:
  // Throws InputError when a pattern does not compile.
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // The regex sequence llama.cpp uses for tokenizer.ggml.pre `pre`. Throws InputError when unsupported.
  static std::vector<std::string> patterns_for(const std::string& pre);

  // Appends the words of `text` (valid UTF-8) to `out`, in order; together they cover `text`.
  void split(std::string_view text, std::vector<ByteRange>& out) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace tp
