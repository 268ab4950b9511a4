// What a request constrains its output to (structured output), as parsed from the OpenAI body: response_format
// {type: json_object | json_schema}, vLLM's guided_json / guided_regex / guided_choice / guided_grammar and
// structured_outputs {json, regex, choice, grammar}. A plain value: coordinator/structured_output.h compiles
// it against the tokenizer's vocabulary into a grammar the engine applies as a token bitmask at sampling.
#pragma once
#include <string>
#include <vector>

namespace tp {

struct OutputConstraint {
  enum class Kind { None, JsonObject, JsonSchema, Regex, Choice, Grammar };
  Kind kind = Kind::None;
  std::string spec;                  // JsonSchema: the schema as compact JSON; Regex: the pattern; Grammar: EBNF
                                     // (GBNF, root rule "root") or Lark (root rule "start")
  std::vector<std::string> choices;  // Choice: the output is exactly one of them (non-empty list)
  std::string param;                 // the request field it came from, for 400s ("response_format.json_schema")

  bool active() const { return kind != Kind::None; }
  // The compiled-grammar cache key: kind and content, not the param.
  std::string key() const {
    std::string k = std::to_string(int(kind)) + '\n' + spec;
    for (const std::string& c : choices) k += '\n' + std::to_string(c.size()) + ':' + c;
    return k;
  }
  bool operator==(const OutputConstraint&) const = default;
};

}  // namespace tp
