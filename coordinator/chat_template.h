// Chat templates: turn an OpenAI message list into the prompt text a chat model was trained on.
// Models ship a Jinja template (GGUF tokenizer.chat_template, HF tokenizer_config.json chat_template); that
// template, rendered by llama.cpp's Jinja engine (jinja_template.h), is what we use whenever there is one that
// parses — with tools, documents and chat_template_kwargs. The hand-written families below are fall-backs
// only: used when the config names a style, or when there is no template (or the engine rejects it) and the
// style is detected. They render the well-known families in C++, byte-for-byte as the real template renders
// under HF transformers' Jinja settings, messages with role and content only (no tools, tool calls or tool
// results):
//   chatml   "<|im_start|>role\ncontent<|im_end|>\n" per message; generation prompt
//            "<|im_start|>assistant\n". A default system prompt written literally in the template (SmolLM2:
//            "You are a helpful AI assistant named SmolLM, trained by Hugging Face") is inserted when the
//            first message is not a system message.
//   llama3   Meta-Llama-3-Instruct: bos + "<|start_header_id|>role<|end_header_id|>\n\n" + trim(content)
//            + "<|eot_id|>"; generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
//            (Llama 3.1+ templates, with their dated system header, are not recognized automatically.)
//   llama2   Llama-2-chat: an optional leading system message folded into the first user turn as
//            "<<SYS>>\n...\n<</SYS>>\n\n"; each user turn bos + "[INST] " + strip(content) + " [/INST]",
//            each assistant turn " " + strip(content) + " " + eos. Roles must alternate user/assistant.
//   mistral  Mistral-7B-Instruct v0.1/v0.2: bos once, "[INST] content [/INST]", assistant content + eos;
//            only user/assistant roles, alternating.
// The rendered text contains special tokens as text (bos, "<|im_start|>", ...): tokenize it with
// parse_special = true and add_bos = false, exactly as HF / vLLM do for chat prompts.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/jinja_template.h"

namespace tp {

enum class ChatStyle { ChatML, Llama3, Llama2, Mistral };

// "chatml", "llama3", "llama2", "mistral".
std::string_view chat_style_name(ChatStyle s);
// The inverse of chat_style_name; nullopt for anything else.
std::optional<ChatStyle> parse_chat_style(std::string_view name);

// One chat turn after request parsing: content is plain text (text parts already joined).
struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool" (chatml and llama3 pass other roles through)
  std::string content;
  // Assistant tool calls, as the template sees them: [{"id", "type": "function", "function": {"name",
  // "arguments": {...}}}] (arguments as an object when the client's JSON string parses as one); null: none.
  nlohmann::ordered_json tool_calls = nullptr;
  std::string tool_call_id = {};  // role "tool": the call this message answers (may be empty)
  std::string name = {};          // the optional "name" of the message (a tool message: the function's name)
  bool operator==(const ChatMessage&) const = default;
};

// The messages as a template's `messages` variable: {"role", "content"} plus "tool_calls", "tool_call_id" and
// "name" when set.
nlohmann::ordered_json template_messages(const std::vector<ChatMessage>& messages);

// The style a Jinja template source belongs to; nullopt when it is none we render exactly.
std::optional<ChatStyle> detect_chat_style(std::string_view jinja_source);

// ChatML templates only: the default system prompt written literally in the template (Jinja string
// escapes decoded), empty when there is none.
std::string chatml_default_system(std::string_view jinja_source);

class ChatTemplate {
 public:
  // bos_token / eos_token: the text of the model's BOS / EOS tokens (as the template's bos_token and
  // eos_token variables). default_system: chatml only (see above).
  ChatTemplate(ChatStyle style, std::string bos_token, std::string eos_token, std::string default_system = {});

  // Start-up resolution. `configured` is the config's model.chat_template: empty -> use `model_template`;
  // a style name ("chatml", "llama3", "llama2", "mistral") -> that fall-back style (a chatml default system
  // prompt still comes from `model_template` when that is chatml too); anything else -> Jinja source.
  // Jinja source is rendered by the Jinja engine when it parses (and, when its family is detected too, renders a
  // one-message conversation); else its detected family's fall-back renders.
  // Throws InputError "chat template not recognized (known: chatml, llama3, llama2, mistral); set
  // model.chat_template in the config" (plus the engine's parse error) when nothing applies.
  static ChatTemplate resolve(std::string_view configured, std::string_view model_template, std::string bos_token,
                              std::string eos_token);

  // The prompt text. Throws ApiException (400, param "messages") for an empty list or a conversation the
  // real template rejects (llama2/mistral role order, mistral non-user/assistant roles).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // The full form: tools, documents, chat_template_kwargs. A fall-back style throws ApiException 400 (param
  // "tools" or "messages") when asked to render tools, tool calls or tool results, which it cannot.
  std::string render(const ChatRenderInput& in) const;

  // The Jinja template in use; nullptr when a fall-back style renders.
  const JinjaTemplate* jinja() const { return jinja_.get(); }
  // The style: the fall-back in use, or (Jinja) the detected family, ChatML when none is detected.
  ChatStyle style() const { return style_; }
  const std::string& default_system() const { return default_system_; }

 private:
  std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string render_llama2(const std::vector<ChatMessage>& messages) const;
  std::string render_mistral(const std::vector<ChatMessage>& messages) const;

  std::string render_fallback(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  ChatStyle style_;
  std::shared_ptr<const JinjaTemplate> jinja_;  // shared: ChatTemplate stays copyable
  std::string bos_, eos_;
  std::string default_system_;
};

// Python's str.strip() (what Jinja's trim filter and .strip() do): removes leading and trailing Unicode
// whitespace from UTF-8 text.
std::string python_strip(std::string_view s);

}  // namespace tp
