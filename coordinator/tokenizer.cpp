#include "coordinator/tokenizer.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "common/unicode_bytes.h"

namespace tp {
namespace {

// Token texts llama.cpp (llama_vocab::impl::load) treats as end of generation and forces to control type:
// the EOT/EOM candidates and the FIM pad / repo / sep candidates.
constexpr std::array<std::string_view, 23> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // DeepSeek
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    "<|file_sep|>",
};

// FIM prefix / suffix / middle candidates: forced to control type, not end of generation.
constexpr std::array<std::string_view, 21> kFimControlTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
    "\xe2\x96\x81<PRE>", "<|code_prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
    "\xe2\x96\x81<SUF>", "<|code_suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
    "\xe2\x96\x81<MID>", "<|code_middle|>",
};

template <size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

// A piece of the input after the special-token partition: a token, or raw text [begin, end).
struct Fragment {
  int32_t token;  // -1: raw text
  size_t begin, end;
};

// BPE working state for one word; reused per thread.
struct BpeSymbol {
  int32_t sym;         // symbol id; -1 once merged into its left neighbour
  int32_t prev, next;  // neighbours in the word, -1 at the ends
};

struct BpeBigram {
  int32_t rank;
  int32_t left, right;            // positions in the word
  int32_t left_sym, right_sym;    // symbol ids when queued, to detect stale entries
  int32_t result;
};

// Heap order: lowest rank first, then leftmost.
bool bigram_after(const BpeBigram& a, const BpeBigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

Tokenizer::Tokenizer(const TokenizerData& data) : pre_(data.pre), add_bos_(data.add_bos) {
  if (data.model != "gpt2")
    throw InputError("tokenizer model '" + data.model + "' is not supported (byte-level BPE 'gpt2' only)");
  pre_tokenizer_ = std::make_unique<PreTokenizer>(PreTokenizer::patterns_for(data.pre));
  ignore_merges_ = (data.pre == "llama3" || data.pre == "llama-v3" || data.pre == "llama-bpe");

  const size_t n = data.tokens.size();
  if (n == 0) throw InputError("tokenizer: the vocabulary is empty");
  if (n >= (size_t{1} << 30)) throw InputError("tokenizer: the vocabulary is too large");
  if (!data.token_types.empty() && data.token_types.size() != n)
    throw InputError("tokenizer: " + std::to_string(data.token_types.size()) + " token types for " +
                     std::to_string(n) + " tokens");
  auto check_id = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      throw InputError(std::string("tokenizer: ") + what + " id " + std::to_string(id) + " is out of range [0, " +
                       std::to_string(n) + ")");
    return id;
  };
  bos_id_ = check_id(data.bos_id, "bos");
  eos_id_ = check_id(data.eos_id, "eos");

  types_ = data.token_types.empty() ? std::vector<TokenType>(n, TokenType::Normal) : data.token_types;
  eog_.assign(n, false);
  symbol_of_text_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = data.tokens[i];
    symbol_of_text_.insert_or_assign(text, static_cast<int32_t>(i));  // duplicates: the last id wins
    if (contains(kEogTexts, text)) {
      eog_[i] = true;
      types_[i] = TokenType::Control;
    } else if (contains(kFimControlTexts, text)) {
      types_[i] = TokenType::Control;
    }
  }
  if (eos_id_ >= 0) eog_[eos_id_] = true;

  pieces_.resize(n);
  special_text_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = data.tokens[i];
    switch (types_[i]) {
      case TokenType::Normal: pieces_[i] = byte_level_to_bytes(text); break;
      case TokenType::Control:
      case TokenType::UserDefined:
      case TokenType::Unknown: pieces_[i] = text; break;
      default: break;  // byte / unused / undefined tokens decode to nothing in a BPE vocabulary
    }
    if (is_special_type(types_[i]) && !text.empty()) {
      special_order_.push_back(static_cast<int32_t>(i));
      special_text_[i] = text;
    }
  }
  std::stable_sort(special_order_.begin(), special_order_.end(), [&](int32_t a, int32_t b) {
    return special_text_[a].size() > special_text_[b].size();
  });

  byte_symbol_.resize(256);
  for (int b = 0; b < 256; ++b) byte_symbol_[b] = intern(std::string(byte_to_unicode(static_cast<uint8_t>(b))));

  merges_.reserve(data.merges.size() * 2);
  for (size_t r = 0; r < data.merges.size(); ++r) {
    const std::string& m = data.merges[r];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    const int32_t l = intern(left), rr = intern(right), res = intern(left + right);
    merges_.try_emplace(pair_key(l, rr), Merge{static_cast<int32_t>(r), res});  // duplicates: the first rank wins
  }
}

int32_t Tokenizer::intern(const std::string& text) {
  auto it = symbol_of_text_.find(text);
  if (it != symbol_of_text_.end()) return it->second;
  const auto id = static_cast<int32_t>(types_.size() + extra_symbols_.size());
  extra_symbols_.push_back(text);
  symbol_of_text_.emplace(text, id);
  return id;
}

int32_t Tokenizer::token_id(std::string_view token_text) const {
  auto it = symbol_of_text_.find(std::string(token_text));
  return (it == symbol_of_text_.end() || it->second >= vocab_size()) ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  if (text.empty()) return out;

  // Special-token partition: each special token, longest first, splits every raw fragment at all its
  // non-overlapping occurrences (left to right).
  std::vector<Fragment> frags{{-1, 0, text.size()}}, next;
  for (const int32_t id : special_order_) {
    if (!parse_special && types_[id] != TokenType::UserDefined) continue;
    const std::string& st = special_text_[id];
    if (text.find(st) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view window = text.substr(0, f.end);
      size_t pos = f.begin;
      for (size_t m; (m = window.find(st, pos)) != std::string_view::npos; pos = m + st.size()) {
        if (m > pos) next.push_back({-1, pos, m});
        next.push_back({id, m, m + st.size()});
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    frags.swap(next);
  }

  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      encode_text(text.substr(f.begin, f.end - f.begin), out);
    }
  }
  return out;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::string normalized, for_regex;
  thread_local std::vector<ByteRange> words;
  std::string_view bytes = text, regex_text = text;
  if (!is_valid_utf8(text)) {
    sanitize_like_llama(text, normalized, for_regex);
    bytes = normalized;
    regex_text = for_regex;
  }
  words.clear();
  pre_tokenizer_->split(regex_text, words);
  for (const ByteRange& w : words) encode_word(bytes.substr(w.begin, w.end - w.begin), out);
}

void Tokenizer::emit_symbol(int32_t sym, std::vector<int32_t>& out) const {
  if (sym < vocab_size()) {
    out.push_back(sym);
    return;
  }
  // Not a token (a malformed vocabulary): llama.cpp falls back to single-byte tokens of its text.
  const std::string& text = extra_symbols_[sym - vocab_size()];
  for (char c : text) {
    const int32_t id = token_id(std::string_view(&c, 1));
    if (id >= 0) out.push_back(id);
  }
}

void Tokenizer::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    std::string level;
    append_byte_level(level, bytes);
    const int32_t id = token_id(level);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (bytes.size() == 1) {
    emit_symbol(byte_symbol_[static_cast<uint8_t>(bytes[0])], out);
    return;
  }

  thread_local std::vector<BpeSymbol> syms;
  thread_local std::vector<BpeBigram> heap;
  syms.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(bytes.size());
  for (int32_t i = 0; i < n; ++i)
    syms.push_back({byte_symbol_[static_cast<uint8_t>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1});

  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(pair_key(syms[left].sym, syms[right].sym));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, right, syms[left].sym, syms[right].sym, it->second.result});
    std::push_heap(heap.begin(), heap.end(), bigram_after);
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), bigram_after);
    const BpeBigram b = heap.back();
    heap.pop_back();
    BpeSymbol& l = syms[b.left];
    BpeSymbol& r = syms[b.right];
    if (l.sym != b.left_sym || r.sym != b.right_sym || l.next != b.right) continue;  // stale
    l.sym = b.result;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    r.sym = -1;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) emit_symbol(syms[i].sym, out);
}

const std::string& Tokenizer::piece(int32_t id, bool special) const {
  static const std::string kEmpty;
  if (!special && types_[id] == TokenType::Control) return kEmpty;
  return pieces_[id];
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw InputError("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(vocab_size()) + ")");
  return pieces_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw InputError("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(vocab_size()) +
                       ")");
    out += piece(id, special);
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < vocab_size() && eog_[id]; }

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && types_[id] == TokenType::Control;
}

std::string IncrementalDecoder::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size())
    throw InputError("token id " + std::to_string(id) + " is out of range [0, " +
                     std::to_string(tokenizer_->vocab_size()) + ")");
  pending_ += tokenizer_->piece(id, special_);
  const size_t n_complete = utf8_complete_prefix_len(pending_);
  std::string out;
  append_utf8_replacing_invalid(out, std::string_view(pending_).substr(0, n_complete));
  pending_.erase(0, n_complete);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  append_utf8_replacing_invalid(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace tp
