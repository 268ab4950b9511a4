// Chat templates: detection and rendering against the real Jinja templates.
//
// How the expected strings were obtained: the Jinja sources below (SmolLM2's read from
// models/SmolLM2-135M-Instruct.Q4_1.gguf, key tokenizer.chat_template, with the `gguf` Python package; the
// others copied from the models' HF tokenizer_config.json) were rendered with jinja2 3.x in an
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) — HF transformers' settings — with
// raise_exception defined, for the message lists below and add_generation_prompt true/false. The outputs
// are pasted here verbatim (JSON-escaped).
#include "coordinator/chat_template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "coordinator/openai_error.h"

namespace tp {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim (real newlines inside the string literals).
const std::string kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>'"
    " + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\n' }}{% endif %}";
// meta-llama/Meta-Llama-3-8B-Instruct.
const std::string kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
// meta-llama/Llama-2-7b-chat-hf.
const std::string kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
// mistralai/Mistral-7B-Instruct-v0.1.
const std::string kMistral =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";

const std::vector<ChatMessage> kUserOnly = {{"user", "Hello"}};
const std::vector<ChatMessage> kSysUser = {{"system", "You are terse."}, {"user", "What is 2+2?"}};
const std::vector<ChatMessage> kMulti = {
    {"system", "  Be nice.\n"}, {"user", " Hi there \n"}, {"assistant", "Hello! "}, {"user", "héllo 😀\nnext"}};
const std::vector<ChatMessage> kNoSysMulti = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};

ChatTemplate make(const std::string& src, const char* bos, const char* eos) {
  return ChatTemplate::resolve("", src, bos, eos);
}

TEST(ChatTemplate, DetectsStyles) {
  EXPECT_EQ(detect_chat_style(kSmolLM2), ChatStyle::ChatML);
  EXPECT_EQ(detect_chat_style(kLlama3), ChatStyle::Llama3);
  EXPECT_EQ(detect_chat_style(kLlama2), ChatStyle::Llama2);
  EXPECT_EQ(detect_chat_style(kMistral), ChatStyle::Mistral);
  EXPECT_EQ(detect_chat_style("{{ messages }}"), std::nullopt);
  EXPECT_EQ(detect_chat_style("<|start_header_id|><|end_header_id|> Cutting Knowledge Date"), std::nullopt);
  EXPECT_EQ(detect_chat_style("[INST] [SYSTEM_PROMPT]"), std::nullopt);
}

TEST(ChatTemplate, SmolLM2DefaultSystemPromptFromTemplate) {
  EXPECT_EQ(chatml_default_system(kSmolLM2), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  // The same template with escaped newlines (as written in tokenizer_config.json source) gives the same.
  EXPECT_EQ(chatml_default_system("{{ '<|im_start|>system\\nBe \\'brief\\'.<|im_end|>\\n' }}"), "Be 'brief'.");
  // Plain ChatML: no literal system text.
  EXPECT_EQ(chatml_default_system("{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                                  "'<|im_end|>' + '\\n'}}"),
            "");
}

TEST(ChatTemplate, SmolLM2MatchesJinja) {
  auto t = make(kSmolLM2, "<|im_start|>", "<|im_end|>");
  EXPECT_EQ(t.style(), ChatStyle::ChatML);
  EXPECT_EQ(t.render(kUserOnly, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(kUserOnly, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n");
  EXPECT_EQ(t.render(kSysUser, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.render(kMulti, true),
            "<|im_start|>system\n  Be nice.\n<|im_end|>\n<|im_start|>user\n Hi there \n<|im_end|>\n"
            "<|im_start|>assistant\nHello! <|im_end|>\n<|im_start|>user\nhéllo 😀\nnext<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.render(kNoSysMulti, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n");
}

TEST(ChatTemplate, Llama3MatchesJinja) {
  auto t = make(kLlama3, "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(t.render(kUserOnly, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.render(kUserOnly, false), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
  EXPECT_EQ(t.render(kMulti, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe nice.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhéllo 😀\nnext<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2MatchesJinja) {
  auto t = make(kLlama2, "<s>", "</s>");
  EXPECT_EQ(t.render(kUserOnly, true), "<s>[INST] Hello [/INST]");
  EXPECT_EQ(t.render(kSysUser, false), "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nWhat is 2+2? [/INST]");
  EXPECT_EQ(t.render(kMulti, true),
            "<s>[INST] <<SYS>>\n  Be nice.\n\n<</SYS>>\n\n Hi there [/INST] Hello! </s><s>[INST] héllo 😀\nnext "
            "[/INST]");
  EXPECT_EQ(t.render(kNoSysMulti, true), "<s>[INST] a [/INST] b </s><s>[INST] c [/INST]");
}

TEST(ChatTemplate, MistralMatchesJinja) {
  auto t = make(kMistral, "<s>", "</s>");
  EXPECT_EQ(t.render(kUserOnly, true), "<s>[INST] Hello [/INST]");
  EXPECT_EQ(t.render(kNoSysMulti, true), "<s>[INST] a [/INST]b</s>[INST] c [/INST]");
}

// Where the real template raises an exception, render throws a 400 on "messages".
TEST(ChatTemplate, RejectsWhatTheTemplateRejects) {
  auto expect_400 = [](const ChatTemplate& t, const std::vector<ChatMessage>& m) {
    try {
      t.render(m, true);
      ADD_FAILURE() << "no error";
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error.status, 400);
      EXPECT_EQ(e.error.param, "messages");
    }
  };
  auto mistral = make(kMistral, "<s>", "</s>");
  expect_400(mistral, kSysUser);  // jinja: "Conversation roles must alternate ..."
  expect_400(mistral, kMulti);
  auto llama2 = make(kLlama2, "<s>", "</s>");
  expect_400(llama2, {{"assistant", "x"}});
  expect_400(llama2, {{"user", "x"}, {"user", "y"}});
  expect_400(make(kSmolLM2, "", ""), {});
}

TEST(ChatTemplate, ResolveByNameAndErrors) {
  // A configured name wins over the model's template; chatml keeps the model's default system prompt.
  auto t = ChatTemplate::resolve("llama3", kSmolLM2, "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(t.style(), ChatStyle::Llama3);
  auto c = ChatTemplate::resolve("chatml", kSmolLM2, "", "");
  EXPECT_EQ(c.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  auto plain = ChatTemplate::resolve("chatml", "", "", "");
  EXPECT_EQ(plain.render(kUserOnly, true), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  // Configured Jinja source is detected like a model template.
  EXPECT_EQ(ChatTemplate::resolve(kLlama2, kSmolLM2, "<s>", "</s>").style(), ChatStyle::Llama2);
  // Any template the Jinja engine parses is rendered by it (no family needed); the hand-written styles are
  // fall-backs only.
  const auto any = ChatTemplate::resolve("", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}", "", "");
  ASSERT_NE(any.jinja(), nullptr);
  EXPECT_EQ(any.render(kSysUser, true), "[system]You are terse.[user]What is 2+2?");
  EXPECT_EQ(ChatTemplate::resolve("chatml", kSmolLM2, "", "").jinja(), nullptr);
  // Neither parsed by the engine nor a known family: a start-up error naming both.
  try {
    ChatTemplate::resolve("", "{% for m in messages %}", "", "");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("chat template not recognized (known: chatml, llama3, llama2, mistral); set "
                         "model.chat_template in the config (chat template does not parse: ", 0),
              0u)
        << what;
  }
  EXPECT_THROW(ChatTemplate::resolve("", "", "", ""), InputError);
  EXPECT_EQ(parse_chat_style("llama2"), ChatStyle::Llama2);
  EXPECT_EQ(parse_chat_style("jinja"), std::nullopt);
}

TEST(ChatTemplate, PythonStrip) {
  EXPECT_EQ(python_strip(" \t\n a b \r\n"), "a b");
  EXPECT_EQ(python_strip("\xC2\xA0x\xE3\x80\x80"), "x");  // U+00A0, U+3000 are Python whitespace
  EXPECT_EQ(python_strip("é"), "é");
  EXPECT_EQ(python_strip("   "), "");
}

// The template stored in the real model file is the one the expected strings were rendered from.
TEST(ChatTemplate, TemplateInModelFileIsTheTestedOne) {
  const char* root = std::getenv("TPSERVE_SOURCE_DIR");
  std::ifstream f(std::string(root ? root : TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                  std::ios::binary);
  if (!f) GTEST_SKIP() << "model file not present";
  // GGUF stores strings raw; the template appears verbatim in the header (which is < 4 MiB here).
  std::string head(4 << 20, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  EXPECT_NE(head.find(kSmolLM2), std::string::npos);
}

}  // namespace
TEST(ChatTemplate, FallbackRefusesToolsAndToolMessages) {
  const ChatTemplate t(ChatStyle::ChatML, "", "");
  ChatRenderInput in;
  in.messages = template_messages(kUserOnly);
  EXPECT_EQ(t.render(in), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  in.tools = nlohmann::ordered_json::array();
  try {
    t.render(in);
    ADD_FAILURE() << "rendered tools";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.param, "tools");
  }
  in.tools = nullptr;
  in.messages.push_back({{"role", "tool"}, {"content", "18 C"}, {"tool_call_id", "call_1"}});
  try {
    t.render(in);
    ADD_FAILURE() << "rendered a tool message";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.param, "messages[1]");
  }
}

TEST(ChatTemplate, TemplateMessagesCarryToolFields) {
  ChatMessage call{"assistant", ""};
  call.tool_calls = nlohmann::ordered_json::parse(R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}])");
  ChatMessage result{"tool", "42"};
  result.tool_call_id = "c1";
  result.name = "f";
  const auto j = template_messages({call, result});
  EXPECT_EQ(j.dump(), R"([{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"42","tool_call_id":"c1","name":"f"}])");
}

TEST(ChatTemplate, TemplateFailingOnAPlainConversationFallsBackToItsFamily) {
  // Parses, is detected as chatml, but raises on every conversation: the fall-back serves.
  const std::string src = std::string(kSmolLM2) + "{{ raise_exception('broken') }}";
  const auto t = ChatTemplate::resolve("", src, "", "");
  EXPECT_EQ(t.jinja(), nullptr);
  EXPECT_EQ(t.style(), ChatStyle::ChatML);
  // Not detected as any family: the template stays (its errors are per request).
  const auto u = ChatTemplate::resolve("", "{{ raise_exception('broken') }}", "", "");
  ASSERT_NE(u.jinja(), nullptr);
  EXPECT_THROW(u.render(kUserOnly, true), ApiException);
}

}  // namespace tp
