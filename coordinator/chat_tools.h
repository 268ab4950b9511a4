// The request side of tool calling and template inputs on /v1/chat/completions (and /v1/responses):
//   tools                 [{"type": "function", "function": {"name", "description"?, "parameters"?}}] (1..128)
//   tool_choice           "auto" (default with tools) | "none" (default without) | "required" |
//                         {"type": "function", "function": {"name"}} (a tool of the list)
//   parallel_tool_calls   bool (accepted; parsing returns every call the model wrote)
//   documents             vLLM's: an array of objects handed to the template as `documents`
//   chat_template_kwargs  vLLM's: an object of extra template variables (e.g. {"enable_thinking": false})
// and the tool fields of messages: an assistant's "tool_calls" ([{"id", "type": "function", "function":
// {"name", "arguments": JSON text}}]), a "tool" message's "tool_call_id" and "name".
// Every failure throws ApiException 400 naming the field ("tools[1].function.name", "tool_choice").
// tool_choice "required" or a named function must constrain generation to the call's JSON schema
// (forced_tool_call_schema): apply_forced_tool_call() hands it to the structured-output machinery.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/chat_template.h"

namespace tp {

struct GenerationParams;  // openai_request.h

enum class ToolChoiceMode { Auto, None, Required, Named };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::None;
  std::string name;  // Named: the function
};

struct ChatTools {
  nlohmann::ordered_json tools;                 // null, or the validated array (keys in the client's order)
  ToolChoice choice;                            // Auto when tools are given and tool_choice is not
  bool parallel_tool_calls = true;
  nlohmann::ordered_json documents;             // null or an array of objects
  nlohmann::ordered_json chat_template_kwargs;  // null or an object
  // Whether the model's output is parsed for calls: tools given and tool_choice auto.
  bool parse_calls() const { return !tools.is_null() && choice.mode == ToolChoiceMode::Auto; }
};

ChatTools parse_chat_tools(const nlohmann::ordered_json& body);

// The tool fields of message `m` (at = "messages[i]") into `msg`: tool_calls (assistant only; arguments that
// parse as a JSON object become that object, as templates expect), tool_call_id and name (strings).
void parse_message_tool_fields(const nlohmann::json& m, const std::string& at, ChatMessage& msg);

// JSON schema of one call of the forced function(s): {"type": "object", "properties": {"name": {"const" |
// "enum"}, "arguments": <the function's parameters schema>}, "required": ["name", "arguments"]}; for
// "required" with several tools, "anyOf" over the tools. Null when nothing is forced.
nlohmann::ordered_json forced_tool_call_schema(const ChatTools& t);

// tool_choice required / named: constrains `params` to forced_tool_call_schema() (structured output,
// coordinator/output_constraint.h, param "tool_choice") and returns true; the output is then one JSON call that
// the Llama 3 JSON parser (tool_call_parser.h) turns into tool_calls. Another constraint on the same request
// (response_format, guided_*) is a 400 on tool_choice. Returns false and does nothing for auto / none.
bool apply_forced_tool_call(const ChatTools& t, GenerationParams& params);

}  // namespace tp
