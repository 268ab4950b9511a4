// Structured output: parsing of response_format / guided_* / structured_outputs (coordinator/openai_request.h)
// and the xgrammar compiler + matcher over a synthetic byte vocabulary (coordinator/structured_output.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unicode_bytes.h"
#include "coordinator/openai_request.h"
#include "coordinator/structured_output.h"
#include "coordinator/tokenizer.h"

namespace tp {
namespace {

using json = nlohmann::json;
using Kind = OutputConstraint::Kind;

json chat_body(json extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

OutputConstraint chat_constraint(json extra) { return parse_chat_completion_request(chat_body(extra)).params.constraint; }

OutputConstraint completion_constraint(json extra) {
  json b = {{"prompt", "hi"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return parse_completion_request(b).params.constraint;
}

// The 400 a body gets: its param and message.
ApiError rejected(json extra) {
  try {
    parse_chat_completion_request(chat_body(extra));
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "accepted: " << extra.dump();
  return {};
}

const json kSchema = {{"type", "object"},
                      {"properties", {{"a", {{"type", "integer"}}}}},
                      {"required", json::array({"a"})}};

TEST(StructuredOutputParse, ResponseFormatTypes) {
  EXPECT_FALSE(chat_constraint({{"response_format", {{"type", "text"}}}}).active());
  const OutputConstraint o = chat_constraint({{"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(o.kind, Kind::JsonObject);
  EXPECT_EQ(o.param, "response_format");
  const OutputConstraint s = chat_constraint(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", kSchema}, {"strict", true}}}}}});
  EXPECT_EQ(s.kind, Kind::JsonSchema);
  EXPECT_EQ(json::parse(s.spec), kSchema);
  EXPECT_EQ(s.param, "response_format.json_schema.schema");
  // Completions take the same fields.
  EXPECT_EQ(completion_constraint({{"response_format", {{"type", "json_object"}}}}).kind, Kind::JsonObject);
}

TEST(StructuredOutputParse, VllmGuidedAndStructuredOutputs) {
  const OutputConstraint j = chat_constraint({{"guided_json", kSchema}});
  EXPECT_EQ(j.kind, Kind::JsonSchema);
  EXPECT_EQ(json::parse(j.spec), kSchema);
  EXPECT_EQ(chat_constraint({{"guided_json", kSchema.dump()}}).spec, j.spec);  // JSON text is accepted too
  const OutputConstraint r = completion_constraint({{"guided_regex", "[a-z]+"}});
  EXPECT_EQ(r.kind, Kind::Regex);
  EXPECT_EQ(r.spec, "[a-z]+");
  const OutputConstraint c = chat_constraint({{"guided_choice", {"yes", "no"}}});
  EXPECT_EQ(c.kind, Kind::Choice);
  EXPECT_EQ(c.choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(chat_constraint({{"guided_grammar", "root ::= \"a\""}}).kind, Kind::Grammar);
  const OutputConstraint so = chat_constraint({{"structured_outputs", {{"choice", {"x"}}}}});
  EXPECT_EQ(so.kind, Kind::Choice);
  EXPECT_EQ(so.param, "structured_outputs.choice");
  EXPECT_EQ(completion_constraint({{"structured_outputs", {{"json", kSchema}}}}).kind, Kind::JsonSchema);
  EXPECT_EQ(completion_constraint({{"structured_outputs", {{"regex", "a|b"}}}}).spec, "a|b");
  EXPECT_EQ(completion_constraint({{"structured_outputs", {{"grammar", "root ::= \"a\""}}}}).kind, Kind::Grammar);
  // Not ignored any more: none of them is listed as an unknown field.
  EXPECT_TRUE(parse_chat_completion_request(chat_body({{"guided_json", kSchema}})).params.ignored_fields.empty());
}

TEST(StructuredOutputParse, SchemaPropertiesKeepTheClientsOrder) {
  const std::string props = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})";
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",)"
                           R"("json_schema":{"name":"n","schema":)" + props + "}}}";
  const std::string spec = parse_chat_completion_body(chat).params.constraint.spec;
  EXPECT_LT(spec.find("zeta"), spec.find("alpha")) << spec;
  const std::string so = parse_completion_body(R"({"prompt":"x","structured_outputs":{"json":)" + props + "}}")
                             .params.constraint.spec;
  EXPECT_LT(so.find("zeta"), so.find("alpha")) << so;
}

TEST(StructuredOutputParse, MalformedConstraintsAre400sNamingTheField) {
  EXPECT_EQ(rejected({{"response_format", {{"type", "xml"}}}}).param, "response_format.type");
  EXPECT_EQ(rejected({{"response_format", {{"type", "json_schema"}}}}).param, "response_format.json_schema");
  EXPECT_EQ(rejected({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}}}}}}).param,
            "response_format.json_schema.name");
  EXPECT_EQ(rejected({{"response_format",
                       {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", "not a schema"}}}}}})
                .param,
            "response_format.json_schema.schema");
  const ApiError bad_text = rejected({{"guided_json", "{not json"}});
  EXPECT_EQ(bad_text.param, "guided_json");
  EXPECT_NE(bad_text.message.find("not valid JSON"), std::string::npos) << bad_text.message;
  EXPECT_EQ(rejected({{"guided_json", 3}}).param, "guided_json");
  EXPECT_EQ(rejected({{"guided_choice", json::array()}}).param, "guided_choice");
  EXPECT_EQ(rejected({{"guided_choice", {"a", ""}}}).param, "guided_choice[1]");
  EXPECT_EQ(rejected({{"guided_regex", ""}}).param, "guided_regex");
  EXPECT_EQ(rejected({{"structured_outputs", "json"}}).param, "structured_outputs");
  const ApiError two = rejected({{"guided_regex", "a"}, {"guided_choice", {"b"}}});
  EXPECT_NE(two.message.find("only one"), std::string::npos) << two.message;
  const ApiError mixed = rejected({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}});
  EXPECT_NE(mixed.message.find("response_format"), std::string::npos) << mixed.message;
}

// ---- the compiler and matcher over a byte vocabulary: ids 0..255 the bytes, 256 the end-of-text control ----

TokenizerData byte_vocab() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) d.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
  d.tokens.emplace_back("<|endoftext|>");
  d.token_types.assign(d.tokens.size(), TokenType::Normal);
  d.token_types[256] = TokenType::Control;
  d.eos_id = 256;
  return d;
}
constexpr int32_t kEos = 256;

std::vector<int32_t> allowed(ConstraintMatcher& m, int64_t vocab) {
  std::vector<int32_t> mask(size_t(m.n_mask_words()));
  m.fill_next_mask(mask.data());
  std::vector<int32_t> out;
  for (int64_t t = 0; t < vocab; ++t)
    if ((uint32_t(mask[size_t(t / 32)]) >> (t % 32)) & 1u) out.push_back(int32_t(t));
  return out;
}

// Walks the grammar taking the lowest allowed token each step (up to max_steps); returns the text before EOS.
std::string lowest_walk(ConstraintMatcher& m, int64_t vocab, int max_steps = 200) {
  std::string text;
  for (int i = 0; i < max_steps && !m.is_terminated(); ++i) {
    const std::vector<int32_t> a = allowed(m, vocab);
    if (a.empty()) {
      ADD_FAILURE() << "no token allowed after " << text;
      break;
    }
    const int32_t t = a.front() == kEos && a.size() > 1 ? a[1] : a.front();
    EXPECT_TRUE(m.accept(t));
    if (t != kEos) text += char(t);
  }
  return text;
}

TEST(StructuredOutputCompiler, ChoiceAllowsOnlyItsPrefixesThenEos) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  OutputConstraint oc;
  oc.kind = Kind::Choice;
  oc.choices = {"yes", "no"};
  oc.param = "guided_choice";
  ConstraintMatcher m(c.compile(oc));
  EXPECT_EQ(allowed(m, tok.vocab_size()), (std::vector<int32_t>{'n', 'y'}));
  EXPECT_FALSE(m.accept('x'));  // refused, state unchanged
  EXPECT_TRUE(m.accept('y'));
  EXPECT_EQ(allowed(m, tok.vocab_size()), (std::vector<int32_t>{'e'}));
  EXPECT_TRUE(m.accept('e'));
  EXPECT_TRUE(m.accept('s'));
  EXPECT_EQ(allowed(m, tok.vocab_size()), (std::vector<int32_t>{kEos}));  // complete: only end of generation
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept(kEos));
  EXPECT_TRUE(m.is_terminated());
}

// A continuation's matcher starts after the output already sent; a prefix the grammar refuses is a FieldError
// naming the first token it does not allow; one that completes the grammar (an end of generation accepted)
// leaves nothing to continue.
TEST(StructuredOutputCompiler, AResumedGrammarStartsAfterItsPrefix) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  OutputConstraint oc;
  oc.kind = Kind::Choice;
  oc.choices = {"yes", "yak", "no"};
  oc.param = "guided_choice";
  const auto g = c.compile(oc);
  const auto ye = resume_constraint(g, {'y', 'e'}, "tpserve_continuation", oc.param);
  ConstraintMatcher m(ye);
  EXPECT_EQ(allowed(m, tok.vocab_size()), (std::vector<int32_t>{'s'}));
  EXPECT_EQ(resume_constraint(g, {}, "tpserve_continuation", oc.param), g) << "nothing continued: the grammar itself";
  ConstraintMatcher y(resume_constraint(resume_constraint(g, {'y'}, "p", oc.param), {'a'}, "p", oc.param));
  EXPECT_EQ(allowed(y, tok.vocab_size()), (std::vector<int32_t>{'k'})) << "a resumed grammar resumed again";
  ConstraintMatcher whole(resume_constraint(g, {'y', 'e', 's'}, "tpserve_continuation", oc.param));
  EXPECT_EQ(allowed(whole, tok.vocab_size()), (std::vector<int32_t>{kEos}));
  ConstraintMatcher fresh(g);
  EXPECT_EQ(allowed(fresh, tok.vocab_size()), (std::vector<int32_t>{'n', 'y'})) << "the compiled grammar unchanged";
  struct Bad {
    std::vector<int32_t> prefix;
    std::string field, part;
  };
  const std::vector<Bad> bad = {
      {{'x'}, "tpserve_continuation[0]", "(token 120) is not allowed there by the output constraint (guided_choice)"},
      {{'y', 'e', 'x'}, "tpserve_continuation[2]", "not allowed"},
      {{'n', 'o', kEos}, "tpserve_continuation", "nothing may follow"},
      {{'n', 'o', kEos, 'x'}, "tpserve_continuation", "is complete (at tpserve_continuation[3])"},
  };
  for (const Bad& b : bad) {
    try {
      resume_constraint(g, b.prefix, "tpserve_continuation", oc.param);
      ADD_FAILURE() << b.field;
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field, b.field);
      EXPECT_NE(std::string(e.what()).find(b.part), std::string::npos) << e.what();
    }
  }
}

TEST(StructuredOutputCompiler, JsonSchemaWalkProducesValidOneLineJson) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  OutputConstraint oc;
  oc.kind = Kind::JsonSchema;
  oc.spec = json{{"type", "object"},
                 {"properties", {{"n", {{"type", "integer"}, {"minimum", 3}, {"maximum", 9}}},
                                 {"s", {{"type", "string"}, {"enum", {"on", "off"}}}}}},
                 {"required", {"n", "s"}}}
                .dump();
  oc.param = "guided_json";
  ConstraintMatcher m(c.compile(oc));
  const std::string text = lowest_walk(m, tok.vocab_size());
  ASSERT_TRUE(m.is_terminated()) << text;
  const json v = json::parse(text);
  EXPECT_GE(v.at("n").get<int>(), 3);
  EXPECT_LE(v.at("n").get<int>(), 9);
  EXPECT_TRUE(v.at("s") == "on" || v.at("s") == "off") << text;
  // No free whitespace: only the fixed separators ", " and ": ".
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_EQ(text.find("  "), std::string::npos) << text;
  EXPECT_EQ(text.rfind("{\"n\": ", 0), 0u) << text;
}

TEST(StructuredOutputCompiler, RegexAndJsonObjectAndGrammar) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  OutputConstraint re{Kind::Regex, "[0-9]{3}-[a-c]", {}, "guided_regex"};
  ConstraintMatcher mr(c.compile(re));
  EXPECT_EQ(lowest_walk(mr, tok.vocab_size()), "000-a");
  OutputConstraint obj{Kind::JsonObject, "", {}, "response_format"};
  ConstraintMatcher mo(c.compile(obj));
  EXPECT_EQ(allowed(mo, tok.vocab_size()), (std::vector<int32_t>{'{'}));
  OutputConstraint g{Kind::Grammar, "root ::= \"a\" [b-d]+ \"e\"", {}, "guided_grammar"};
  ConstraintMatcher mg(c.compile(g));
  for (char ch : std::string("abdce")) EXPECT_TRUE(mg.accept(ch)) << ch;
  EXPECT_TRUE(mg.accept(kEos));
  EXPECT_TRUE(mg.is_terminated());
}

TEST(StructuredOutputCompiler, CompiledGrammarsAreCachedByKey) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  OutputConstraint a{Kind::Regex, "ab+", {}, "guided_regex"};
  OutputConstraint same{Kind::Regex, "ab+", {}, "structured_outputs.regex"};  // another field, same grammar
  OutputConstraint other{Kind::Regex, "ab*", {}, "guided_regex"};
  const auto ga = c.compile(a);
  EXPECT_EQ(c.compile(same).get(), ga.get());
  EXPECT_NE(c.compile(other).get(), ga.get());
  EXPECT_EQ(c.n_cached(), 2u);
}

TEST(StructuredOutputCompiler, InvalidSchemaRegexGrammarAreFieldErrorsNamingTheProblem) {
  const Tokenizer tok(byte_vocab());
  StructuredOutputCompiler c(tok, tok.vocab_size());
  const auto expect_error = [&](OutputConstraint oc, const std::string& what) {
    try {
      c.compile(oc);
      ADD_FAILURE() << "compiled: " << oc.spec;
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field, oc.param);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({Kind::JsonSchema, R"({"type": "no-such-type"})", {}, "guided_json"}, "invalid JSON schema");
  expect_error({Kind::JsonSchema, R"({"type": "object", "required": 5})", {}, "response_format.json_schema.schema"},
               "invalid JSON schema");
  expect_error({Kind::Regex, "(ab", {}, "guided_regex"}, "invalid regex in guided_regex: Regex parsing error");
  expect_error({Kind::Grammar, "root ::= undefined_rule", {}, "guided_grammar"}, "invalid grammar");
  EXPECT_EQ(c.n_cached(), 0u);
}

TEST(StructuredOutputCompiler, PaddingIdsPastTheTokenizerAreNeverAllowed) {
  const Tokenizer tok(byte_vocab());
  const int64_t vocab = tok.vocab_size() + 40;  // model rows past the tokenizer's vocabulary
  StructuredOutputCompiler c(tok, vocab);
  EXPECT_EQ(c.n_mask_words(), (vocab + 31) / 32);
  OutputConstraint any{Kind::Regex, "[\\x00-\\x7f]*", {}, "guided_regex"};
  ConstraintMatcher m(c.compile(any));
  const std::vector<int32_t> a = allowed(m, vocab);
  ASSERT_FALSE(a.empty());
  EXPECT_LE(a.back(), kEos);
}

}  // namespace
}  // namespace tp
