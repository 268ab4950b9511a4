#include "coordinator/chat_tools.h"

#include <set>

#include "coordinator/jinja_template.h"
#include "coordinator/openai_request.h"
#include "coordinator/openai_error.h"

namespace tp {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxTools = 128;

template <class J>
[[noreturn]] void fail(const std::string& param, const std::string& message, const J& /*v*/ = {},
                       const std::string& code = "invalid_value") {
  throw ApiException(bad_request(message, param, code));
}

template <class J>
[[noreturn]] void fail_type(const std::string& param, const char* expected, const J& v) {
  throw ApiException(bad_request(param + " must be " + expected + ", got " + std::string(v.type_name()), param,
                                 "invalid_type"));
}

template <class J>
const J* member(const J& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string function_name(const ojson& tool) { return tool["function"]["name"].get<std::string>(); }

ojson validate_tools(const ojson& t) {
  if (!t.is_array()) fail_type("tools", "an array", t);
  if (t.size() > kMaxTools) fail<ojson>("tools", "at most " + std::to_string(kMaxTools) + " tools are supported");
  std::set<std::string> names;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const ojson& tool = t[i];
    if (!tool.is_object()) fail_type(at, "an object", tool);
    const ojson* type = member(tool, "type");
    if (type && (!type->is_string() || type->get<std::string>() != "function"))
      fail<ojson>(at + ".type", at + ".type must be \"function\"", {}, "unsupported_value");
    const ojson* f = member(tool, "function");
    if (!f) fail<ojson>(at + ".function", at + ".function is required", {}, "missing_required_parameter");
    if (!f->is_object()) fail_type(at + ".function", "an object", *f);
    const ojson* name = member(*f, "name");
    if (!name) fail<ojson>(at + ".function.name", at + ".function.name is required", {}, "missing_required_parameter");
    if (!name->is_string() || name->get<std::string>().empty())
      fail<ojson>(at + ".function.name", at + ".function.name must be a non-empty string");
    if (!names.insert(name->get<std::string>()).second)
      fail<ojson>(at + ".function.name", "tool names must be unique; " + name->get<std::string>() + " repeats");
    if (const ojson* p = member(*f, "parameters"); p && !p->is_object())
      fail_type(at + ".function.parameters", "an object (a JSON schema)", *p);
  }
  return t;
}

ToolChoice parse_tool_choice(const ojson* v, const ojson& tools) {
  ToolChoice c;
  c.mode = tools.is_null() ? ToolChoiceMode::None : ToolChoiceMode::Auto;
  if (!v) return c;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "none") c.mode = ToolChoiceMode::None;
    else if (s == "auto") c.mode = ToolChoiceMode::Auto;
    else if (s == "required") c.mode = ToolChoiceMode::Required;
    else fail<ojson>("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a function, got \"" + s + "\"");
  } else if (v->is_object()) {
    const ojson* f = member(*v, "function");
    const ojson* name = f && f->is_object() ? member(*f, "name") : nullptr;
    if (!name || !name->is_string())
      fail<ojson>("tool_choice.function.name", "tool_choice.function.name is required", {}, "missing_required_parameter");
    c.mode = ToolChoiceMode::Named;
    c.name = name->get<std::string>();
  } else {
    fail_type("tool_choice", "a string or an object", *v);
  }
  if ((c.mode == ToolChoiceMode::Auto || c.mode == ToolChoiceMode::Required || c.mode == ToolChoiceMode::Named) &&
      tools.is_null())
    fail<ojson>("tool_choice", "tool_choice " + (c.mode == ToolChoiceMode::Named ? "naming a function" : v->dump()) +
                                   " requires tools");
  if (c.mode == ToolChoiceMode::Named) {
    bool found = false;
    for (const ojson& t : tools) found = found || function_name(t) == c.name;
    if (!found) fail<ojson>("tool_choice.function.name", "tool_choice names " + c.name + ", which is not in tools");
  }
  return c;
}

}  // namespace

ChatTools parse_chat_tools(const ojson& body) {
  ChatTools t;
  if (const ojson* tools = member(body, "tools"); tools && !(tools->is_array() && tools->empty()))
    t.tools = validate_tools(*tools);
  t.choice = parse_tool_choice(member(body, "tool_choice"), t.tools);
  if (const ojson* p = member(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) fail_type("parallel_tool_calls", "a boolean", *p);
    t.parallel_tool_calls = p->get<bool>();
  }
  if (const ojson* d = member(body, "documents")) {
    if (!d->is_array()) fail_type("documents", "an array of objects", *d);
    for (size_t i = 0; i < d->size(); ++i)
      if (!(*d)[i].is_object()) fail_type("documents[" + std::to_string(i) + "]", "an object", (*d)[i]);
    t.documents = *d;
  }
  if (const ojson* k = member(body, "chat_template_kwargs")) {
    if (!k->is_object()) fail_type("chat_template_kwargs", "an object", *k);
    t.chat_template_kwargs = *k;
  }
  return t;
}

void parse_message_tool_fields(const json& m, const std::string& at, ChatMessage& msg) {
  if (const json* tc = member(m, "tool_calls"); tc && !(tc->is_array() && tc->empty())) {
    if (msg.role != "assistant")
      fail<json>(at + ".tool_calls", at + ".tool_calls is only allowed on assistant messages", {}, "unsupported_value");
    if (!tc->is_array()) fail_type(at + ".tool_calls", "an array", *tc);
    ojson calls = ojson::array();
    for (size_t i = 0; i < tc->size(); ++i) {
      const std::string ap = at + ".tool_calls[" + std::to_string(i) + "]";
      const json& c = (*tc)[i];
      if (!c.is_object()) fail_type(ap, "an object", c);
      const json* f = member(c, "function");
      if (!f || !f->is_object()) fail<json>(ap + ".function", ap + ".function is required", {}, "missing_required_parameter");
      const json* name = member(*f, "name");
      if (!name || !name->is_string())
        fail<json>(ap + ".function.name", ap + ".function.name is required", {}, "missing_required_parameter");
      const json* args = member(*f, "arguments");
      if (args && !args->is_string() && !args->is_object())
        fail_type(ap + ".function.arguments", "a JSON string (or an object)", *args);
      ojson call = ojson::object();
      if (const json* id = member(c, "id")) {
        if (!id->is_string()) fail_type(ap + ".id", "a string", *id);
        call["id"] = id->get<std::string>();
      }
      call["type"] = "function";
      ojson fn = {{"name", name->get<std::string>()}};
      if (!args) fn["arguments"] = ojson::object();
      else if (args->is_string()) fn["arguments"] = args->get<std::string>();
      else fn["arguments"] = ojson::parse(args->dump());
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    msg.tool_calls = tool_call_arguments_as_objects(ojson::array({{{"tool_calls", calls}}}))[0]["tool_calls"];
  }
  if (const json* id = member(m, "tool_call_id")) {
    if (!id->is_string()) fail_type(at + ".tool_call_id", "a string", *id);
    msg.tool_call_id = id->get<std::string>();
  }
  if (const json* name = member(m, "name")) {
    if (!name->is_string()) fail_type(at + ".name", "a string", *name);
    msg.name = name->get<std::string>();
  }
}

ojson forced_tool_call_schema(const ChatTools& t) {
  if (t.tools.is_null() || (t.choice.mode != ToolChoiceMode::Required && t.choice.mode != ToolChoiceMode::Named))
    return nullptr;
  const auto one = [](const ojson& tool) {
    const ojson& f = tool["function"];
    ojson params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"]
                                                                            : ojson{{"type", "object"}};
    return ojson{{"type", "object"},
                 {"properties", {{"name", {{"const", f["name"]}}}, {"arguments", params}}},
                 {"required", {"name", "arguments"}}};
  };
  ojson any = ojson::array();
  for (const ojson& tool : t.tools)
    if (t.choice.mode == ToolChoiceMode::Required || function_name(tool) == t.choice.name) any.push_back(one(tool));
  return any.size() == 1 ? any[0] : ojson{{"anyOf", any}};
}

bool apply_forced_tool_call(const ChatTools& t, GenerationParams& params) {
  const ojson schema = forced_tool_call_schema(t);
  if (schema.is_null()) return false;
  if (params.constraint.active())
    throw ApiException(bad_request("tool_choice " + std::string(t.choice.mode == ToolChoiceMode::Required
                                                                    ? "required"
                                                                    : "naming a function") +
                                       " constrains the output to the call's JSON; it cannot be combined with " +
                                       params.constraint.param,
                                   "tool_choice", "unsupported_value"));
  params.constraint.kind = OutputConstraint::Kind::JsonSchema;
  params.constraint.spec = schema.dump();
  params.constraint.choices.clear();
  params.constraint.param = "tool_choice";
  return true;
}

}  // namespace tp
