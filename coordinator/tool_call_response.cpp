#include "coordinator/tool_call_response.h"

namespace tp {

using json = nlohmann::json;

json tool_calls_json(const std::vector<ParsedToolCall>& calls, const ToolCallIdFn& new_id) {
  json out = json::array();
  for (const ParsedToolCall& c : calls)
    out.push_back({{"id", new_id()}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

void apply_tool_calls(json& body, ToolCallSyntax syntax, const nlohmann::ordered_json& tools, const ToolCallIdFn& new_id) {
  if (!body.contains("choices")) return;
  for (json& choice : body["choices"]) {
    if (!choice.contains("message") || !choice["message"]["content"].is_string()) continue;
    const ToolCallParse p = parse_tool_calls(syntax, choice["message"]["content"].get<std::string>(), tools);
    if (p.calls.empty()) continue;
    choice["message"]["content"] = p.content.empty() ? json(nullptr) : json(p.content);
    choice["message"]["tool_calls"] = tool_calls_json(p.calls, new_id);
    if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
  }
}

std::vector<std::string> argument_fragments(const std::string& arguments, size_t max_bytes) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < arguments.size()) {
    size_t end = std::min(arguments.size(), i + max_bytes);
    while (end < arguments.size() && (static_cast<unsigned char>(arguments[end]) & 0xC0) == 0x80) ++end;
    out.push_back(arguments.substr(i, end - i));
    i = end;
  }
  return out;
}

ToolCallStreams::ToolCallStreams(ToolCallSyntax syntax, const nlohmann::ordered_json& tools, size_t n_choices,
                                 ToolCallIdFn new_id)
    : filters_(n_choices, ToolCallStreamFilter(syntax, tools)), new_id_(std::move(new_id)) {}

bool ToolCallStreams::delta(SseWriter& sse, int32_t index, const ChoiceDelta& d) {
  ToolCallStreamFilter& f = filters_.at(size_t(index));
  ChoiceDelta m = d;
  m.text = f.push(d.text);
  const bool ends = !d.finish.empty() && d.finish != "error";
  if (!ends) return sse.delta(index, m);
  ToolCallStreamFilter::End end = f.finish();
  m.text += end.content;
  m.finish.clear();
  if (!sse.delta(index, m)) return false;
  const auto chunk = [&](json tool_call) {
    return sse.choice({{"index", index},
                       {"delta", {{"tool_calls", json::array({std::move(tool_call)})}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}});
  };
  for (size_t k = 0; k < end.calls.size(); ++k) {
    const ParsedToolCall& c = end.calls[k];
    if (!chunk({{"index", k}, {"id", new_id_()}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", ""}}}}))
      return false;
    for (const std::string& frag : argument_fragments(c.arguments))
      if (!chunk({{"index", k}, {"function", {{"arguments", frag}}}})) return false;
  }
  ChoiceDelta fin;
  fin.finish = !end.calls.empty() && d.finish == "stop" ? "tool_calls" : d.finish;
  return sse.delta(index, fin);
}

}  // namespace tp
