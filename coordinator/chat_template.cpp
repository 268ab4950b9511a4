// Chat template detection and rendering (see chat_template.h).
#include "coordinator/chat_template.h"

#include <array>
#include <cstdint>
#include <utility>

#include "common/error.h"
#include "coordinator/openai_error.h"

namespace tp {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kUnknownTemplate =
    "chat template not recognized (known: chatml, llama3, llama2, mistral); set model.chat_template in the "
    "config";

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

bool is_python_space(uint32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return true;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A)) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Length of the well-formed UTF-8 sequence at s[i] and its code point; {1, 0xFFFFFFFF} for a bad byte.
std::pair<size_t, uint32_t> decode_at(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return {1, 0xFFFFFFFFu};
  uint32_t cp = n == 1 ? b : (b & (0x7F >> n));
  for (size_t k = 1; k < n; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return {1, 0xFFFFFFFFu};
    cp = (cp << 6) | (c & 0x3F);
  }
  return {n, cp};
}

ApiException bad_messages(std::string message) { return ApiException(bad_request(std::move(message), "messages")); }

// Decodes the escapes of a Jinja (Python-style) string literal body: \n \t \r \\ \' \".
std::string unescape_jinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      default: out += c; break;  // \\ \' \" and anything else: the character itself
    }
  }
  return out;
}

// No unescaped quote or brace: the text lies inside one string literal.
bool is_plain_literal(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '\'' || s[i] == '"' || s[i] == '{' || s[i] == '}') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    auto [n, cp] = decode_at(s, begin);
    if (!is_python_space(cp)) break;
    begin += n;
  }
  // Scan forward so multi-byte sequences are decoded from their lead byte; remember the end of the last
  // non-space character.
  size_t end = begin;
  for (size_t i = begin; i < s.size();) {
    auto [n, cp] = decode_at(s, i);
    i += n;
    if (!is_python_space(cp)) end = i;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view chat_style_name(ChatStyle s) {
  switch (s) {
    case ChatStyle::ChatML: return "chatml";
    case ChatStyle::Llama3: return "llama3";
    case ChatStyle::Llama2: return "llama2";
    case ChatStyle::Mistral: return "mistral";
  }
  return "?";
}

std::optional<ChatStyle> parse_chat_style(std::string_view name) {
  for (ChatStyle s : {ChatStyle::ChatML, ChatStyle::Llama3, ChatStyle::Llama2, ChatStyle::Mistral})
    if (chat_style_name(s) == name) return s;
  return std::nullopt;
}

std::optional<ChatStyle> detect_chat_style(std::string_view t) {
  if (contains(t, "<|im_start|>")) {
    // Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) reuse the token but are not ChatML.
    if (contains(t, "<|im_sep|>") || contains(t, "<end_of_utterance>")) return std::nullopt;
    return ChatStyle::ChatML;
  }
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) {
    // Llama 3.1+ add "Cutting Knowledge Date ... Today Date" to a system header we do not reproduce.
    if (contains(t, "Cutting Knowledge Date")) return std::nullopt;
    return ChatStyle::Llama3;
  }
  if (contains(t, "[INST]")) {
    if (contains(t, "<<SYS>>")) return ChatStyle::Llama2;
    // Mistral v3/v7 templates (tools, [SYSTEM_PROMPT], no spaces) render differently from v0.1.
    if (contains(t, "[SYSTEM_PROMPT]") || contains(t, "[AVAILABLE_TOOLS]")) return std::nullopt;
    if (contains(t, "'[INST] ' + message['content'] + ' [/INST]'")) return ChatStyle::Mistral;
  }
  return std::nullopt;
}

std::string chatml_default_system(std::string_view t) {
  constexpr std::string_view kHead = "<|im_start|>system";
  for (size_t pos = t.find(kHead); pos != std::string_view::npos; pos = t.find(kHead, pos + 1)) {
    size_t body = pos + kHead.size();
    if (t.substr(body, 1) == "\n") {
      body += 1;
    } else if (t.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    size_t end = t.find("<|im_end|>", body);
    if (end == std::string_view::npos) continue;
    std::string_view text = t.substr(body, end - body);
    // A literal only: no string concatenation or Jinja expression inside (else it is the template's
    // rendering of messages[0]).
    if (text.empty() || !is_plain_literal(text)) continue;
    return unescape_jinja(text);
  }
  return {};
}

ChatTemplate::ChatTemplate(ChatStyle style, std::string bos_token, std::string eos_token, std::string default_system)
    : style_(style), bos_(std::move(bos_token)), eos_(std::move(eos_token)), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::resolve(std::string_view configured, std::string_view model_template, std::string bos_token,
                                   std::string eos_token) {
  std::optional<ChatStyle> style;
  std::string default_system;
  if (auto named = parse_chat_style(configured)) {
    style = named;
    if (*style == ChatStyle::ChatML && detect_chat_style(model_template) == ChatStyle::ChatML)
      default_system = chatml_default_system(model_template);
    return ChatTemplate(*style, std::move(bos_token), std::move(eos_token), std::move(default_system));
  }
  std::string_view source = configured.empty() ? model_template : configured;
  if (source.empty())
    throw InputError("the model has no chat template and model.chat_template is not set (known: chatml, llama3, "
                     "llama2, mistral)");
  style = detect_chat_style(source);
  if (style == ChatStyle::ChatML) default_system = chatml_default_system(source);
  std::string parse_error;
  try {
    ChatTemplate t(style.value_or(ChatStyle::ChatML), bos_token, eos_token, default_system);
    t.jinja_ = std::make_shared<const JinjaTemplate>(std::string(source), bos_token, eos_token);
    // A template that parses but fails on a plain conversation would refuse every request: a detected family's
    // fall-back serves instead. (Without one, the template stays; its errors are per request.)
    try {
      t.render({{"user", "Hello"}}, true);
    } catch (const ApiException&) {
      if (style) return ChatTemplate(*style, std::move(bos_token), std::move(eos_token), std::move(default_system));
    }
    return t;
  } catch (const InputError& e) {
    parse_error = e.what();
  }
  if (!style) throw InputError(std::string(kUnknownTemplate) + " (" + parse_error + ")");
  return ChatTemplate(*style, std::move(bos_token), std::move(eos_token), std::move(default_system));
}

ordered_json template_messages(const std::vector<ChatMessage>& messages) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& m : messages) {
    ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    out.push_back(std::move(j));
  }
  return out;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ChatRenderInput in;
  in.messages = template_messages(messages);
  in.add_generation_prompt = add_generation_prompt;
  return render(in);
}

std::string ChatTemplate::render(const ChatRenderInput& in) const {
  if (in.messages.empty()) throw bad_messages("messages must contain at least one message");
  if (jinja_) return jinja_->render(in);
  const std::string why = " needs the model's own chat template; the built-in " + std::string(chat_style_name(style_)) +
                          " fall-back renders role and content only";
  if (!in.tools.is_null()) throw ApiException(bad_request("tools" + why, "tools", "unsupported_value"));
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < in.messages.size(); ++i) {
    const ordered_json& m = in.messages[i];
    if (m.contains("tool_calls") || m.value("role", "") == "tool")
      throw ApiException(bad_request("messages[" + std::to_string(i) + "]: tool calls and tool results" + why,
                                     "messages[" + std::to_string(i) + "]", "unsupported_value"));
    messages.push_back({m.value("role", ""), m.value("content", "")});
  }
  return render_fallback(messages, in.add_generation_prompt);
}

std::string ChatTemplate::render_fallback(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  switch (style_) {
    case ChatStyle::ChatML: return render_chatml(messages, add_generation_prompt);
    case ChatStyle::Llama3: return render_llama3(messages, add_generation_prompt);
    case ChatStyle::Llama2: return render_llama2(messages);
    case ChatStyle::Mistral: return render_mistral(messages);
  }
  return {};
}

std::string ChatTemplate::render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && messages.front().role != "system")
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out = bos_;
  for (const auto& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

namespace {
// Llama-2 and Mistral: after the optional leading system message (llama2 only), roles alternate
// user, assistant, user, ... starting with user; index i of the loop must be user exactly when i is even.
void check_alternation(const std::vector<ChatMessage>& msgs, size_t first) {
  for (size_t i = first; i < msgs.size(); ++i) {
    if ((msgs[i].role == "user") != ((i - first) % 2 == 0))
      throw bad_messages("conversation roles must alternate user/assistant/user/assistant/... (message " +
                         std::to_string(i) + " has role '" + msgs[i].role + "')");
  }
}
}  // namespace

std::string ChatTemplate::render_llama2(const std::vector<ChatMessage>& messages) const {
  size_t first = messages.front().role == "system" ? 1 : 0;
  check_alternation(messages, first);
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const auto& m = messages[i];
    std::string content = m.content;
    // The template tests `system_message != false`: an empty system string still counts.
    if (i == first && first == 1) content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + m.content;
    if (m.role == "user") {
      out += bos_ + "[INST] " + python_strip(content) + " [/INST]";
    } else if (m.role == "assistant") {
      out += " " + python_strip(content) + " " + eos_;
    }
    // Any other role at an odd position passes the template's check and renders nothing.
  }
  return out;
}

std::string ChatTemplate::render_mistral(const std::vector<ChatMessage>& messages) const {
  std::string out = bos_;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0))
      throw bad_messages("conversation roles must alternate user/assistant/user/assistant/... (message " +
                         std::to_string(i) + " has role '" + m.role + "')");
    if (m.role == "user") {
      out += "[INST] " + m.content + " [/INST]";
    } else if (m.role == "assistant") {
      out += m.content + eos_;
    } else {
      throw bad_messages("this model's chat template supports only user and assistant roles (message " +
                         std::to_string(i) + " has role '" + m.role + "')");
    }
  }
  return out;
}

}  // namespace tp
