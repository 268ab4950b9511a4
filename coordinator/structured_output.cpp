// Structured output on xgrammar (see structured_output.h).
#include "coordinator/structured_output.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <optional>

#include "common/error.h"
#include "coordinator/tokenizer.h"

namespace tp {

class CompiledConstraint {
 public:
  CompiledConstraint(xgrammar::CompiledGrammar g, int64_t n_words, std::vector<int32_t> p = {})
      : grammar(std::move(g)), n_mask_words(n_words), prefix(std::move(p)) {}
  xgrammar::CompiledGrammar grammar;
  int64_t n_mask_words;
  std::vector<int32_t> prefix;  // output a matcher has accepted before it starts (resume_constraint)
};

struct ConstraintMatcher::Impl {
  std::shared_ptr<const CompiledConstraint> grammar;
  xgrammar::GrammarMatcher matcher;
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> grammar) {
  if (!grammar) throw Error("ConstraintMatcher: no compiled grammar");
  xgrammar::GrammarMatcher m(grammar->grammar);
  for (const int32_t t : grammar->prefix)  // checked by resume_constraint
    if (!m.AcceptToken(t)) throw Error("ConstraintMatcher: the grammar's resumed prefix does not match it");
  impl_ = std::make_unique<Impl>(Impl{std::move(grammar), std::move(m)});
}

std::shared_ptr<const CompiledConstraint> resume_constraint(std::shared_ptr<const CompiledConstraint> grammar,
                                                            const std::vector<int32_t>& prefix,
                                                            const std::string& param, const std::string& what) {
  if (!grammar) throw Error("resume_constraint: no compiled grammar");
  if (prefix.empty()) return grammar;
  std::vector<int32_t> all = grammar->prefix;
  all.insert(all.end(), prefix.begin(), prefix.end());
  xgrammar::GrammarMatcher m(grammar->grammar);
  for (const int32_t t : grammar->prefix)
    if (!m.AcceptToken(t)) throw Error("resume_constraint: the grammar's resumed prefix does not match it");
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (m.IsTerminated())
      throw FieldError(param, param + " continues after the output constraint (" + what + ") is complete (at " +
                                  param + "[" + std::to_string(i) + "])");
    if (!m.AcceptToken(prefix[i]))
      throw FieldError(param + "[" + std::to_string(i) + "]",
                       param + "[" + std::to_string(i) + "] (token " + std::to_string(prefix[i]) +
                           ") is not allowed there by the output constraint (" + what + ")");
  }
  if (m.IsTerminated())
    throw FieldError(param, param + " ends the output the constraint (" + what + ") allows: nothing may follow");
  return std::make_shared<const CompiledConstraint>(grammar->grammar, grammar->n_mask_words, std::move(all));
}

ConstraintMatcher::~ConstraintMatcher() = default;

int64_t ConstraintMatcher::n_mask_words() const { return impl_->grammar->n_mask_words; }

void ConstraintMatcher::fill_next_mask(int32_t* mask) {
  int64_t shape[1] = {impl_->grammar->n_mask_words};
  DLTensor t{};
  t.data = mask;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
}

bool ConstraintMatcher::accept(int32_t token) { return impl_->matcher.AcceptToken(token); }

bool ConstraintMatcher::is_terminated() const { return impl_->matcher.IsTerminated(); }

namespace {

// A string as an EBNF literal: quoted, with backslash, quote and control characters escaped.
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string what_kind(OutputConstraint::Kind k) {
  switch (k) {
    case OutputConstraint::Kind::JsonObject: return "JSON object grammar";
    case OutputConstraint::Kind::JsonSchema: return "JSON schema";
    case OutputConstraint::Kind::Regex: return "regex";
    case OutputConstraint::Kind::Choice: return "choice list";
    case OutputConstraint::Kind::Grammar: return "grammar";
    case OutputConstraint::Kind::None: break;
  }
  return "constraint";
}

}  // namespace

struct StructuredOutputCompiler::Impl {
  Impl(xgrammar::TokenizerInfo i, int64_t words, size_t max)
      : info(std::move(i)), compiler(info, /*max_threads=*/1, /*cache_enabled=*/false), n_mask_words(words),
        max_cached(max) {}
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  int64_t n_mask_words;
  size_t max_cached;
  mutable std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const CompiledConstraint>> cache;

  xgrammar::CompiledGrammar build(const OutputConstraint& c) {
    using Kind = OutputConstraint::Kind;
    switch (c.kind) {
      case Kind::JsonObject:
        return compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt,
                                          std::nullopt, /*strict_mode=*/false);
      case Kind::JsonSchema:
        return compiler.CompileJSONSchema(c.spec, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                          /*strict_mode=*/true);
      case Kind::Regex: return compiler.CompileRegex(c.spec);
      case Kind::Choice: {
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < c.choices.size(); ++i) ebnf += (i ? " | " : "") + ebnf_literal(c.choices[i]);
        return compiler.CompileGrammar(ebnf, "root");
      }
      case Kind::Grammar:
        // GBNF/EBNF ("root ::= ...") unless it is Lark (rules "name: ...", root "start").
        if (c.spec.find("::=") == std::string::npos) return compiler.CompileLark(c.spec);
        return compiler.CompileGrammar(c.spec, "root");
      case Kind::None: break;
    }
    throw Error("StructuredOutputCompiler: no constraint to compile");
  }
};

namespace {

xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tok, int64_t vocab) {
  if (vocab < tok.vocab_size())
    throw Error("StructuredOutputCompiler: model vocab " + std::to_string(vocab) + " < tokenizer vocab " +
                std::to_string(tok.vocab_size()));
  std::vector<std::string> texts(size_t(tok.vocab_size()));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < int32_t(tok.vocab_size()); ++id) {
    texts[size_t(id)] = tok.piece(id, false);  // control tokens: empty, which xgrammar takes as special
    if (tok.is_eog(id)) stops.push_back(id);
  }
  return xgrammar::TokenizerInfo(texts, xgrammar::VocabType::RAW, int(vocab), stops);
}

}  // namespace

StructuredOutputCompiler::StructuredOutputCompiler(const Tokenizer& tok, int64_t vocab, size_t max_cached) {
  impl_ = std::make_unique<Impl>(tokenizer_info(tok, vocab), (vocab + 31) / 32, std::max<size_t>(max_cached, 1));
}

StructuredOutputCompiler::~StructuredOutputCompiler() = default;

int64_t StructuredOutputCompiler::n_mask_words() const { return impl_->n_mask_words; }

size_t StructuredOutputCompiler::n_cached() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cache.size();
}

std::shared_ptr<const CompiledConstraint> StructuredOutputCompiler::compile(const OutputConstraint& c) {
  if (!c.active()) throw Error("StructuredOutputCompiler::compile: no constraint");
  const std::string key = c.key();
  std::lock_guard<std::mutex> lock(impl_->mu);  // xgrammar's compiler is used from one thread at a time
  if (auto it = impl_->cache.find(key); it != impl_->cache.end()) return it->second;
  std::shared_ptr<const CompiledConstraint> compiled;
  try {
    compiled = std::make_shared<const CompiledConstraint>(impl_->build(c), impl_->n_mask_words);
  } catch (const std::exception& e) {
    std::string why = e.what();
    // xgrammar's checks prefix "[hh:mm:ss] /path/file.cc:line: ": keep only the message.
    if (const size_t at = why.find(".cc:"); at != std::string::npos)
      if (const size_t colon = why.find(": ", at); colon != std::string::npos) why = why.substr(colon + 2);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    constexpr size_t kMaxShown = 400;
    if (why.size() > kMaxShown) why = why.substr(0, kMaxShown) + "...";
    throw FieldError(c.param, "invalid " + what_kind(c.kind) + " in " + c.param + ": " + why);
  }
  if (impl_->cache.size() >= impl_->max_cached) impl_->cache.clear();  // a bounded cache: start over when full
  impl_->cache.emplace(key, compiled);
  return compiled;
}

}  // namespace tp
