// Tool calls in a chat model's output text: which syntax a model writes (from its chat template), the parse of
// a finished text into OpenAI tool calls, and a filter for streams that holds back text once it may be a call.
// Syntaxes (what vLLM's hermes, llama3_json and mistral parsers read):
//   Hermes     Hermes / Qwen 2.5 / Qwen 3 / ChatML models: "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>"
//              one block per call; text before the first block is the message content. A last block cut off
//              at the end of generation (no </tool_call>) still counts when its JSON is complete.
//   Llama3Json Llama 3.1+: the whole output (after an optional "<|python_tag|>") is {"name": ...,
//              "parameters": {...}} ("arguments" accepted too), several separated by ";". No content.
//   Mistral    "[TOOL_CALLS]" then a JSON array [{"name": ..., "arguments": {...}}, ...] (Mistral v3 / Nemo),
//              or "[TOOL_CALLS]name[ARGS]{...}" per call (Mistral Small 3.2+ / Devstral); text before it is content.
// A call must name one of the request's tools (when tools are given) and its arguments must be a JSON object;
// otherwise the text is left as content, as if no call were made.
// Special tokens ([TOOL_CALLS], <|python_tag|>) are seen only when the detokenizer keeps them in the text.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tp {

enum class ToolCallSyntax { Hermes, Llama3Json, Mistral };

// "hermes", "llama3_json", "mistral".
std::string_view tool_call_syntax_name(ToolCallSyntax s);

// The syntax a chat template teaches its model: "[TOOL_CALLS]" -> Mistral; "<tool_call>" -> Hermes;
// Llama 3 headers with "parameters" or "<|python_tag|>" -> Llama3Json; anything else (ChatML and the rest) ->
// Hermes, the most common convention (vLLM's default for ChatML models).
ToolCallSyntax detect_tool_call_syntax(std::string_view template_source);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object (what OpenAI's function.arguments holds)
  bool operator==(const ParsedToolCall&) const = default;
};

struct ToolCallParse {
  std::string content;                  // text outside the calls (trimmed of surrounding whitespace when calls were found)
  std::vector<ParsedToolCall> calls;    // empty: no call; content is then the whole text, unchanged
};

// `tools`: the request's tools array (null: any name is accepted).
ToolCallParse parse_tool_calls(ToolCallSyntax syntax, std::string_view text, const nlohmann::ordered_json& tools);

// Streaming: text passes through until it may be a tool call (Hermes/Mistral: from the start marker, or a
// suffix that could begin one; Llama3Json: output whose first non-space character is '{' or "<|python_tag|>"),
// from then on it is held. At the end, finish() parses the whole text: the calls, and the held text to send as
// content when there were none.
class ToolCallStreamFilter {
 public:
  ToolCallStreamFilter(ToolCallSyntax syntax, nlohmann::ordered_json tools);
  // The new text; returns what may be sent now as content.
  std::string push(std::string_view delta);
  // A resumed stream (the router's tpserve_continuation): `sent` is the choice's text so far, output the client
  // already has (the router resumes after the content it forwarded). The filter takes it as the one that
  // streamed it did (a call begun in it is held; finish() parses it with what follows) but never sends any of
  // it as content. Before any push.
  void prime(std::string_view sent);
  struct End {
    std::vector<ParsedToolCall> calls;
    std::string content;  // content not sent yet (held text when no call was found; else any text before calls)
  };
  End finish();

 private:
  ToolCallSyntax syntax_;
  nlohmann::ordered_json tools_;
  std::string text_;     // everything pushed
  size_t sent_ = 0;      // bytes of text_ already returned as content
  bool holding_ = false; // a call may have started: hold everything from sent_
  size_t primed_ = 0;    // bytes of text_ from prime(): the client has them, never returned
  // text_[from, to) less what the client has from prime().
  std::string clipped(size_t from, size_t to) const;
};

}  // namespace tp
