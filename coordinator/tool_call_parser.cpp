#include "coordinator/tool_call_parser.h"

#include <algorithm>
#include <optional>

namespace tp {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]", kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The end (one past) of the JSON object or array that starts at s[start] ('{' or '['), by bracket depth outside
// strings; npos when it does not close.
size_t json_end(std::string_view s, size_t start) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<json> parse_json(std::string_view s) {
  json j = json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

bool known_tool(const json& tools, const std::string& name) {
  if (!tools.is_array()) return true;
  return std::any_of(tools.begin(), tools.end(), [&](const json& t) {
    return t.is_object() && t.contains("function") && t["function"].is_object() &&
           t["function"].value("name", "") == name;
  });
}

// {"name": ..., "arguments" | "parameters": {...}} -> a call; nullopt when it is not one.
std::optional<ParsedToolCall> call_from(const json& j, const json& tools) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) {  // some models write the arguments as a JSON string
    auto parsed = parse_json(args.get<std::string>());
    if (!parsed) return std::nullopt;
    args = *parsed;
  }
  if (!args.is_object()) return std::nullopt;
  ParsedToolCall c{j["name"].get<std::string>(), args.dump()};
  if (!known_tool(tools, c.name)) return std::nullopt;
  return c;
}

ToolCallParse no_calls(std::string_view text) { return {std::string(text), {}}; }

ToolCallParse parse_hermes(std::string_view text, const json& tools) {
  const size_t first = text.find(kHermesOpen);
  if (first == std::string_view::npos) return no_calls(text);
  ToolCallParse out;
  out.content = std::string(trim(text.substr(0, first)));
  size_t pos = first;
  while (pos < text.size()) {
    pos = skip_space(text, pos);
    if (pos >= text.size()) break;
    if (text.substr(pos, kHermesOpen.size()) != kHermesOpen) return no_calls(text);  // text after a call
    const size_t body = pos + kHermesOpen.size();
    size_t close = text.find(kHermesClose, body);
    auto j = parse_json(trim(text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body)));
    if (!j) return no_calls(text);
    auto call = call_from(*j, tools);
    if (!call) return no_calls(text);
    out.calls.push_back(std::move(*call));
    pos = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
  }
  return out;
}

ToolCallParse parse_llama3(std::string_view text, const json& tools) {
  std::string_view s = trim(text);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s = trim(s.substr(kPythonTag.size()));
  if (s.empty() || s.front() != '{') return no_calls(text);
  ToolCallParse out;
  size_t pos = 0;
  while (pos < s.size()) {
    if (s[pos] != '{') return no_calls(text);
    const size_t end = json_end(s, pos);
    if (end == std::string_view::npos) return no_calls(text);
    auto j = parse_json(s.substr(pos, end - pos));
    auto call = j ? call_from(*j, tools) : std::nullopt;
    if (!call) return no_calls(text);
    out.calls.push_back(std::move(*call));
    pos = skip_space(s, end);
    if (pos < s.size() && s[pos] == ';') pos = skip_space(s, pos + 1);
  }
  return out;
}

ToolCallParse parse_mistral(std::string_view text, const json& tools) {
  const size_t first = text.find(kMistralCalls);
  if (first == std::string_view::npos) return no_calls(text);
  ToolCallParse out;
  out.content = std::string(trim(text.substr(0, first)));
  size_t pos = first;
  while (true) {
    pos = skip_space(text, pos);
    if (pos >= text.size()) break;
    if (text.substr(pos, kMistralCalls.size()) != kMistralCalls) return no_calls(text);
    pos = skip_space(text, pos + kMistralCalls.size());
    if (pos < text.size() && text[pos] == '[') {  // [{"name", "arguments"}, ...]
      const size_t end = json_end(text, pos);
      if (end == std::string_view::npos) return no_calls(text);
      auto j = parse_json(text.substr(pos, end - pos));
      if (!j || !j->is_array() || j->empty()) return no_calls(text);
      for (const json& e : *j) {
        auto call = call_from(e, tools);
        if (!call) return no_calls(text);
        out.calls.push_back(std::move(*call));
      }
      pos = end;
    } else {  // name[ARGS]{...}
      const size_t args = text.find(kMistralArgs, pos);
      if (args == std::string_view::npos) return no_calls(text);
      const std::string name(trim(text.substr(pos, args - pos)));
      const size_t obj = skip_space(text, args + kMistralArgs.size());
      if (obj >= text.size() || text[obj] != '{') return no_calls(text);
      const size_t end = json_end(text, obj);
      if (end == std::string_view::npos) return no_calls(text);
      auto a = parse_json(text.substr(obj, end - obj));
      if (!a) return no_calls(text);
      auto call = call_from(json{{"name", name}, {"arguments", *a}}, tools);
      if (!call) return no_calls(text);
      out.calls.push_back(std::move(*call));
      pos = end;
    }
  }
  return out;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::string_view tool_call_syntax_name(ToolCallSyntax s) {
  switch (s) {
    case ToolCallSyntax::Hermes: return "hermes";
    case ToolCallSyntax::Llama3Json: return "llama3_json";
    case ToolCallSyntax::Mistral: return "mistral";
  }
  return "?";
}

ToolCallSyntax detect_tool_call_syntax(std::string_view src) {
  if (src.find(kMistralCalls) != std::string_view::npos) return ToolCallSyntax::Mistral;
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolCallSyntax::Hermes;
  if (src.find("<|start_header_id|>") != std::string_view::npos &&
      (src.find(kPythonTag) != std::string_view::npos || src.find("\"parameters\"") != std::string_view::npos))
    return ToolCallSyntax::Llama3Json;
  return ToolCallSyntax::Hermes;
}

ToolCallParse parse_tool_calls(ToolCallSyntax syntax, std::string_view text, const json& tools) {
  switch (syntax) {
    case ToolCallSyntax::Hermes: return parse_hermes(text, tools);
    case ToolCallSyntax::Llama3Json: return parse_llama3(text, tools);
    case ToolCallSyntax::Mistral: return parse_mistral(text, tools);
  }
  return no_calls(text);
}

ToolCallStreamFilter::ToolCallStreamFilter(ToolCallSyntax syntax, json tools) : syntax_(syntax), tools_(std::move(tools)) {}

std::string ToolCallStreamFilter::push(std::string_view delta) {
  text_ += delta;
  if (holding_) return {};
  const std::string_view pending = std::string_view(text_).substr(sent_);
  size_t n_send = 0;
  if (syntax_ == ToolCallSyntax::Llama3Json) {
    if (sent_ > 0) {
      n_send = pending.size();  // plain text already began: it stays plain
    } else {
      const size_t i = skip_space(pending, 0);
      if (i == pending.size()) return {};  // only spaces so far: undecided
      const std::string_view rest = pending.substr(i);
      const bool tag_prefix = kPythonTag.substr(0, std::min(rest.size(), kPythonTag.size())) ==
                              rest.substr(0, std::min(rest.size(), kPythonTag.size()));
      if (rest.front() == '{' || tag_prefix) {
        if (rest.front() == '{' || rest.size() >= kPythonTag.size()) holding_ = true;
        return {};
      }
      n_send = pending.size();
    }
  } else {
    const std::string_view marker = syntax_ == ToolCallSyntax::Hermes ? kHermesOpen : kMistralCalls;
    const size_t at = pending.find(marker);
    if (at != std::string_view::npos) {
      n_send = at;
      holding_ = true;
    } else {
      n_send = pending.size() - partial_marker_suffix(pending, marker);
    }
  }
  const size_t from = sent_;
  sent_ += n_send;
  return clipped(from, sent_);
}

std::string ToolCallStreamFilter::clipped(size_t from, size_t to) const {
  from = std::max(from, primed_);  // the client has the primed text
  return from < to ? text_.substr(from, to - from) : std::string();
}

void ToolCallStreamFilter::prime(std::string_view sent) {
  push(sent);              // the state of the filter that streamed it (a call begun in it is held: parsed at the end)
  primed_ = text_.size();  // none of it is content to send again
}

ToolCallStreamFilter::End ToolCallStreamFilter::finish() {
  ToolCallParse p = parse_tool_calls(syntax_, text_, tools_);
  End e;
  if (p.calls.empty()) {
    e.content = clipped(sent_, text_.size());
  } else {
    e.calls = std::move(p.calls);
    // Content before the calls was streamed already (as it came, untrimmed); Llama3Json has none.
  }
  sent_ = text_.size();
  return e;
}

}  // namespace tp
