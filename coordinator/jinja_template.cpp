#include "coordinator/jinja_template.h"

#include <exception>
#include <stdexcept>

#include "common/error.h"
#include "coordinator/openai_error.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "json.h"

namespace tp {

using json = nlohmann::ordered_json;

struct JinjaTemplate::Program {
  jinja::program prog;
};

JinjaTemplate::JinjaTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)),
      program_(std::make_unique<Program>()) {
  try {
    jinja::lexer lexer;
    program_->prog = jinja::parse_from_tokens(lexer.tokenize(source_));
  } catch (const std::exception& e) {
    throw InputError(std::string("chat template does not parse: ") + e.what());
  }
}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const ChatRenderInput& in) const {
  json vars = {{"messages", in.messages},
               {"bos_token", bos_},
               {"eos_token", eos_},
               {"add_generation_prompt", in.add_generation_prompt}};
  if (!in.tools.is_null()) vars["tools"] = in.tools;
  if (!in.documents.is_null()) vars["documents"] = in.documents;
  if (in.kwargs.is_object())
    for (const auto& [k, v] : in.kwargs.items()) vars[k] = v;
  try {
    jinja::context ctx(source_);
    if (in.now) ctx.current_time = *in.now;
    // The engine takes its own JSON type; the text form is the bridge (object key order is kept).
    jinja::global_from_json(ctx, common_json::parse(vars.dump()), /*mark_input=*/false);
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(program_->prog);
    return jinja::runtime::gather_string_parts(results)->as_string().str();
  } catch (const std::exception& e) {
    throw ApiException(bad_request(std::string("the chat template failed on these messages: ") + e.what(), "messages"));
  }
}

json tool_call_arguments_as_objects(json messages) {
  if (!messages.is_array()) return messages;
  for (json& m : messages) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (json& tc : m["tool_calls"]) {
      if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object()) continue;
      json& f = tc["function"];
      if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
      json parsed = json::parse(f["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) f["arguments"] = std::move(parsed);
    }
  }
  return messages;
}

}  // namespace tp
