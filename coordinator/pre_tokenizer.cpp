#include "coordinator/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"

namespace tp {
namespace {

// llama.cpp's whitespace set (unicode_set_whitespace), as the body of a character class.
constexpr const char* kWhitespaceClass =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3Pattern =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Rewrites `\s` and `\S` to llama.cpp's whitespace set.
std::string with_llama_whitespace(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhitespaceClass) : "[" + std::string(kWhitespaceClass) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespaceClass) + "]";
      } else if (e == 'S') {
        throw InputError("pre-tokenizer pattern '" + pattern + "': \\S inside a character class is not supported");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// Per-thread match state shared by all compiled patterns (none of them has capture groups we read).
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  if (!s.data || !s.context) throw Error("pre-tokenizer: out of memory for PCRE2 match data");
  return s;
}

size_t utf8_char_len(uint8_t b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

}  // namespace

struct PreTokenizer::Compiled {
  std::string pattern;
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    auto c = std::make_unique<Compiled>();
    c->pattern = p;
    const std::string translated = with_llama_whitespace(p);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw InputError("pre-tokenizer pattern '" + p + "' does not compile at offset " + std::to_string(err_off) +
                       ": " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
    regexes_.push_back(std::move(c));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::patterns_for(const std::string& pre) {
  if (pre == "smollm") return {"\\p{N}", kGpt2Pattern};
  if (pre == "gpt2" || pre == "gpt-2") return {kGpt2Pattern};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") return {kLlama3Pattern};
  throw InputError("tokenizer pre-type '" + pre +
                   "' is not supported (supported: smollm, gpt2, gpt-2, llama3, llama-v3, llama-bpe)");
}

void PreTokenizer::split(std::string_view text, std::vector<ByteRange>& out) const {
  if (text.empty()) return;
  MatchScratch& s = scratch();
  std::vector<ByteRange> pieces{{0, text.size()}};
  std::vector<ByteRange> next;
  for (const auto& re : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const ByteRange piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
      const size_t len = piece.end - piece.begin;
      size_t gap_begin = 0;  // start of the not-yet-emitted stretch, relative to the piece
      size_t search = 0;
      while (search < len) {
        const int rc = pcre2_match(re->code, subject, len, search, PCRE2_NO_UTF_CHECK, s.data, s.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw Error("pre-tokenizer pattern '" + re->pattern + "' failed: " + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
        const size_t m_begin = ov[0], m_end = ov[1];
        if (m_end == m_begin) {  // empty match: not a word; look further on
          search = m_begin + utf8_char_len(static_cast<uint8_t>(text[piece.begin + m_begin]));
          continue;
        }
        if (m_begin > gap_begin) next.push_back({piece.begin + gap_begin, piece.begin + m_begin});
        next.push_back({piece.begin + m_begin, piece.begin + m_end});
        gap_begin = search = m_end;
      }
      if (gap_begin < len) next.push_back({piece.begin + gap_begin, piece.end});
    }
    pieces.swap(next);
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace tp
