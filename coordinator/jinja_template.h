// A model's own chat template (Jinja source from GGUF tokenizer.chat_template or HF tokenizer_config.json
// chat_template), rendered by llama.cpp's Jinja engine (common/jinja/, built from the llama-cpp-python sdist that
// launch/setup extracts; CMake target llama_jinja) with the settings transformers' apply_chat_template uses:
// trim_blocks and lstrip_blocks on, the variables messages, tools, documents, add_generation_prompt,
// bos_token, eos_token, plus chat_template_kwargs (which may override any of them, as in transformers).
// The messages are OpenAI messages as JSON, after tool_call_arguments_as_objects() (vLLM and HF templates
// expect tool-call arguments as a mapping, not the JSON string OpenAI sends).
// The rendered text contains special tokens as text: tokenize it with parse_special = true and add_bos = false.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tp {

// What a template is rendered with. Null tools / documents are left undefined (as transformers leaves them
// None: templates test "tools is not none" / "tools is defined").
struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", "tool_calls"?, "tool_call_id"?, ...}]
  nlohmann::ordered_json tools;             // null or [{"type": "function", "function": {"name", "description", "parameters"}}]
  nlohmann::ordered_json documents;          // null or [{"title", "text"}, ...]
  nlohmann::ordered_json kwargs;             // null or an object: extra template variables (chat_template_kwargs)
  bool add_generation_prompt = true;
  std::optional<std::time_t> now;     // the time strftime_now() formats (local time); nullopt: the current time
};

class JinjaTemplate {
 public:
  // Parses the template once. Throws InputError "chat template does not parse: ..." (the engine's message,
  // with the position) when the engine rejects the source.
  JinjaTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  // The prompt text. Throws ApiException 400 (param "messages") when the template raises (raise_exception:
  // "Conversation roles must alternate ...") or fails on this input, with the engine's message.
  std::string render(const ChatRenderInput& in) const;

  const std::string& source() const { return source_; }

 private:
  struct Program;
  std::string source_, bos_, eos_;
  std::unique_ptr<Program> program_;
};

// OpenAI sends an assistant tool call's function.arguments as a JSON string; templates (as vLLM and HF
// render them) expect an object. Returns `messages` with every such string that parses as a JSON object
// replaced by the object; anything else is left as it is.
nlohmann::ordered_json tool_call_arguments_as_objects(nlohmann::ordered_json messages);

}  // namespace tp
