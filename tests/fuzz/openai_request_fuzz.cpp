// libFuzzer target: arbitrary bytes through the OpenAI request-body parsers (coordinator/openai_request.h),
// then the parsed chat messages through every chat template style (coordinator/chat_template.h).
// Input: byte 0 chooses the parser (% 4: completions, chat completions, tokenize, detokenize); the rest is
// the HTTP body.
// Accepted outcomes: a parse, or ApiException whose to_json() body is valid JSON with status 400. A render
// may throw tp::Error (ApiException for a conversation the template rejects). Anything else aborts: another
// exception type (uncaught, so the report shows the throw site), a sanitizer report, or a parsed request
// that breaks what openai_request.h promises (sampling values that validate_sampling rejects, an empty
// prompt, n out of range, ...).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "coordinator/chat_template.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_request.h"
#include "coordinator/request.h"

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "openai_request_fuzz: %s\n", what.c_str());
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) broken(std::string("parsed request breaks the contract: ") + what);
}

// What the server sends for a rejected request must be well-formed: valid JSON, status 400, a message.
void check_error_body(const tp::ApiError& e) {
  if (e.status != 400) broken("ApiException with status " + std::to_string(e.status) + ": " + e.message);
  if (e.message.empty()) broken("ApiException without a message");
  const std::string body = tp::to_json(e);
  if (!nlohmann::json::accept(body)) broken("to_json produced invalid JSON: " + body);
}

// validate_sampling is what Engine::submit applies; a request the parser accepts must pass it.
void check_params(const tp::GenerationParams& p, const tp::ApiLimits& limits) {
  try {
    tp::validate_sampling(p.sampling);
  } catch (const tp::InputError& e) {
    broken(std::string("parsed sampling params fail validate_sampling: ") + e.what());
  }
  check(!p.max_tokens || *p.max_tokens >= 0, "max_tokens >= 0");
  check(!p.prompt_logprobs || (*p.prompt_logprobs >= 0 && *p.prompt_logprobs <= limits.max_logprobs),
        "prompt_logprobs in [0, max_logprobs]");
  for (const tp::LogitBias& b : p.logit_bias) {
    check(b.token >= 0, "logit_bias ids >= 0");
    check(!tp::check_sampling_value(tp::kLogitBiasRange, b.bias), "logit_bias values in range");
  }
  check(p.n >= 1 && p.n <= limits.max_n, "n in [1, max_n]");
  check(int32_t(p.stop.size()) <= limits.max_stop, "at most max_stop stop strings");
  for (const auto& s : p.stop) check(!s.empty(), "stop strings non-empty");
  check(!p.include_usage || p.stream, "include_usage only with stream");
  check(!p.seed || *p.seed == p.sampling.seed, "seed mirrored in sampling.seed");
}

void check_tokens(const std::vector<int32_t>& tokens) {
  for (int32_t t : tokens) check(t >= 0, "token ids >= 0");
}

// Renders with every style; only tp::Error may come out (a rejected conversation, as ApiException).
void render_all(const std::vector<tp::ChatMessage>& messages, bool add_generation_prompt) {
  static const std::vector<tp::ChatTemplate> templates = [] {
    std::vector<tp::ChatTemplate> t;
    // ChatML through resolve(), as the server does, with a SmolLM2-style default system prompt.
    t.push_back(tp::ChatTemplate::resolve(
        "chatml",
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "<|im_start|>", "<|im_end|>"));
    if (t.back().default_system().empty()) broken("resolve() found no ChatML default system prompt");
    t.emplace_back(tp::ChatStyle::Llama3, "<|begin_of_text|>", "<|eot_id|>");
    t.emplace_back(tp::ChatStyle::Llama2, "<s>", "</s>");
    t.emplace_back(tp::ChatStyle::Mistral, "<s>", "</s>");
    return t;
  }();
  for (const auto& t : templates) {
    try {
      const std::string text = t.render(messages, add_generation_prompt);
      if (text.empty() && t.style() != tp::ChatStyle::Llama2) broken("a render produced no text");
    } catch (const tp::Error&) {
    }
  }
}

void check_messages(const std::vector<tp::ChatMessage>& messages) {
  check(!messages.empty(), "messages non-empty");
  for (const auto& m : messages)
    check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
          "role is system, user, assistant or tool");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const tp::ApiLimits limits;
  try {
    switch (data[0] % 4) {
      case 0: {
        const tp::CompletionRequest r = tp::parse_completion_body(body, limits);
        check_params(r.params, limits);
        check(!r.prompts.empty() && int32_t(r.prompts.size()) <= limits.max_prompts, "1..max_prompts prompts");
        for (const tp::Prompt& pr : r.prompts) {
          check(pr.is_tokens ? !pr.tokens.empty() : !pr.text.empty(), "prompt non-empty");
          check_tokens(pr.tokens);
        }
        check(r.params.sampling.logprobs == r.logprobs.value_or(-1), "sampling.logprobs mirrors logprobs");
        break;
      }
      case 1: {
        const tp::ChatCompletionRequest r = tp::parse_chat_completion_body(body, limits);
        check_params(r.params, limits);
        check_messages(r.messages);
        check(!r.top_logprobs || r.logprobs, "top_logprobs only with logprobs");
        render_all(r.messages, r.add_generation_prompt);
        break;
      }
      case 2: {
        const tp::TokenizeRequest r = tp::parse_tokenize_body(body);
        if (r.is_chat) {
          check_messages(r.messages);
          render_all(r.messages, r.add_generation_prompt);
        }
        break;
      }
      case 3: {
        const tp::DetokenizeRequest r = tp::parse_detokenize_body(body);
        check_tokens(r.tokens);
        break;
      }
    }
  } catch (const tp::ApiException& e) {
    check_error_body(e.error);
  }
  return 0;
}
