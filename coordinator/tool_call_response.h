// Tool calls in chat responses (tools given, tool_choice auto): the model's output parsed (tool_call_parser.h)
// into OpenAI's shapes.
//   Not streamed: a choice whose text holds calls gets message.tool_calls = [{"id": "call_...", "type":
//   "function", "function": {"name", "arguments": JSON text}}], message.content = the text before the calls
//   (null when none), and finish_reason "tool_calls" (when it was "stop").
//   Streamed (as OpenAI streams them): content deltas pass until a call may have begun (then held); when the
//   choice ends, per call one chunk {"delta": {"tool_calls": [{"index": k, "id", "type": "function",
//   "function": {"name", "arguments": ""}}]}} then chunks of argument fragments {"tool_calls": [{"index": k,
//   "function": {"arguments": "..."}}]}, then the finish chunk with finish_reason "tool_calls". Held text that
//   turned out to be no call is sent as content before the finish chunk.
//   A resumed stream (tpserve_continuation) primes its choice with the continued text (prime): its calls are
//   parsed from the whole text, and what the client has is not sent again. The router drops from the
//   continuation the tool-call headers and argument bytes its client already has (router_stream.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/choice_stream.h"
#include "coordinator/openai_response.h"
#include "coordinator/tool_call_parser.h"

namespace tp {

using ToolCallIdFn = std::function<std::string()>;  // a fresh call id ("call_" + random)

// The OpenAI tool_calls array of parsed calls (non-streamed shape).
nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, const ToolCallIdFn& new_id);

// Rewrites the chat choices of a non-streamed response body (final_response) in place.
void apply_tool_calls(nlohmann::json& body, ToolCallSyntax syntax, const nlohmann::ordered_json& tools,
                      const ToolCallIdFn& new_id);

// Argument text cut into fragments of about `max_bytes`, never inside a UTF-8 sequence.
std::vector<std::string> argument_fragments(const std::string& arguments, size_t max_bytes = 16);

class ToolCallStreams {
 public:
  ToolCallStreams(ToolCallSyntax syntax, const nlohmann::ordered_json& tools, size_t n_choices, ToolCallIdFn new_id);
  // Sends choice `index`'s delta through its filter (in place of sse.delta); false once the client is gone.
  bool delta(SseWriter& sse, int32_t index, const ChoiceDelta& d);
  // A resumed stream: choice `index`'s text already with the client as content (ToolCallStreamFilter::prime).
  void prime(int32_t index, std::string_view sent) { filters_.at(size_t(index)).prime(sent); }

 private:
  std::vector<ToolCallStreamFilter> filters_;  // [choice]
  ToolCallIdFn new_id_;
};

}  // namespace tp
