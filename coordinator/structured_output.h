// Structured output on xgrammar (third_party/xgrammar, built by launch/setup from the PyPI sdist 0.2.8):
// StructuredOutputCompiler turns an OutputConstraint into a grammar compiled against the tokenizer's
// vocabulary (once per distinct constraint: compiled grammars are cached by OutputConstraint::key()), and a
// ConstraintMatcher per sequence tracks the tokens it accepted and fills the next token bitmask.
//
// Bitmask layout (xgrammar's): [n_mask_words()] int32 words, token t allowed iff bit t % 32 of word t / 32 is
// set; n_mask_words() = ceil(vocab / 32) for the model vocab given to the compiler. Ids past the tokenizer's
// vocabulary (padding rows of the model's logits) are never allowed; the end-of-generation tokens are allowed
// only where the grammar is complete, so "finish with EOS when the grammar is complete" is the mask's doing.
//
// JSON is generated without free whitespace: one line, the separators fixed to ", " and ": " (a small model
// allowed any whitespace may emit it until max_tokens). json_object = any JSON object; json_schema uses xgrammar's strict mode (no properties or
// items beyond the schema's), so every output validates against the schema given.
//
// Thread safety: compile() is safe from any thread (the HTTP threads); a matcher belongs to one sequence on
// the engine thread.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/output_constraint.h"

namespace tp {

class Tokenizer;

// A grammar compiled for one vocabulary; immutable, shared by every sequence constrained by it.
class CompiledConstraint;

class ConstraintMatcher {
 public:
  // Starts where the grammar starts, or after its resumed prefix (resume_constraint).
  explicit ConstraintMatcher(std::shared_ptr<const CompiledConstraint> grammar);
  ~ConstraintMatcher();
  ConstraintMatcher(const ConstraintMatcher&) = delete;
  ConstraintMatcher& operator=(const ConstraintMatcher&) = delete;

  int64_t n_mask_words() const;
  // Writes the allowed next tokens into mask [n_mask_words()]. Precondition: !is_terminated().
  void fill_next_mask(int32_t* mask);
  // Advances by one sampled token; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // An end-of-generation token was accepted where the grammar is complete: nothing more may follow.
  bool is_terminated() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `grammar` resumed after `prefix`, output already generated and sent (a stream's continuation,
// generation_job.h): every matcher made from the result has accepted `prefix` first. Throws FieldError(param)
// naming the first token of `prefix` the grammar does not allow (`what` names the constraint, e.g.
// "response_format.json_schema"), or when the grammar is complete after it (nothing may follow).
std::shared_ptr<const CompiledConstraint> resume_constraint(std::shared_ptr<const CompiledConstraint> grammar,
                                                            const std::vector<int32_t>& prefix,
                                                            const std::string& param, const std::string& what);

class StructuredOutputCompiler {
 public:
  // vocab: rows of the model's logits (>= tok.vocab_size()). Token texts come from tok (control tokens are
  // special: never allowed, except the end-of-generation ones where the grammar is complete).
  StructuredOutputCompiler(const Tokenizer& tok, int64_t vocab, size_t max_cached = 128);
  ~StructuredOutputCompiler();

  // The compiled grammar of `c` (c.active()), from the cache when the same key was compiled before. Throws
  // FieldError naming c.param and what is wrong ("invalid JSON schema: ...", "invalid regex: ...").
  std::shared_ptr<const CompiledConstraint> compile(const OutputConstraint& c);

  int64_t n_mask_words() const;
  size_t n_cached() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tp
