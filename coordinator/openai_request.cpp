// OpenAI request parsing and validation (see openai_request.h).
#include "coordinator/openai_request.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace tp {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(std::string param, std::string message, std::string code = "invalid_value") {
  throw ApiException(bad_request(std::move(message), std::move(param), std::move(code)));
}

// A JSON value as the client wrote it, shortened for messages. Arrays and objects are summarized, not dumped
// (dump recurses once per nesting level).
std::string show(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxShown = 80;
  if (s.size() > kMaxShown) s = s.substr(0, kMaxShown) + "...";
  return s;
}

[[noreturn]] void fail_type(const std::string& param, const char* expected, const json& v) {
  fail(param, param + " must be " + expected + ", got " + std::string(v.type_name()) + " " + show(v), "invalid_type");
}

// The member `key`, or nullptr when absent or null (OpenAI treats null as "not given").
const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const json& obj, const char* key) {
  const json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail_type(key, "a number", *v);
  return v->get<double>();
}

int64_t as_int(const json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(param, param + " is out of range, got " + show(v));
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 16.0 is accepted as 16, 16.5 is not
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  fail_type(param, "an integer", v);
}

std::optional<int64_t> get_int(const json& obj, const char* key) {
  const json* v = member(obj, key);
  if (!v) return std::nullopt;
  return as_int(*v, key);
}

std::optional<bool> get_bool(const json& obj, const char* key, const std::string& param) {
  const json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail_type(param, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* key, const std::string& param) {
  const json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail_type(param, "a string", *v);
  return v->get<std::string>();
}

// v as the float it is stored as, in the range common/sampling_params.h states.
float in_range(const SamplingRange& r, double v) {
  if (auto bad = check_sampling_value(r, v)) fail(bad->field, bad->message);
  return float(v);
}

int64_t int_in_range(const char* key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    fail(key, std::string(key) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                  std::to_string(v));
  return v;
}

void require_object(const json& body) {
  if (!body.is_object()) fail("", "request body must be a JSON object, got " + std::string(body.type_name()));
}

void collect_unknown(const json& body, std::initializer_list<std::initializer_list<const char*>> known_sets,
                     std::vector<std::string>& out) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool known = false;
    for (auto set : known_sets)
      known = known || std::any_of(set.begin(), set.end(), [&](const char* k) { return it.key() == k; });
    if (!known) out.push_back(it.key());
  }
}

constexpr std::initializer_list<const char*> kCommonKeys = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "ignore_eos",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "n", "stream", "stream_options", "user",
    "logprobs", "logit_bias", "prompt_logprobs", "response_format", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs", "guided_decoding_backend", "guided_whitespace_pattern",
    "return_token_ids", "resumed_output_tokens", "tpserve_continuation", "kv_transfer_params"};

// A JSON schema given as an object, or as JSON text holding one (vLLM accepts both for guided_json).
std::string schema_text(const json& v, const std::string& param) {
  json schema = v;
  if (v.is_string()) {
    try {
      schema = json::parse(v.get<std::string>());
    } catch (const json::exception& e) {
      fail(param, param + " is not valid JSON: " + e.what());
    }
  }
  if (!schema.is_object()) fail_type(param, "a JSON schema object", schema);
  return v.is_string() ? v.get<std::string>() : schema.dump();  // JSON text as written: its key order kept
}

std::string non_empty_string(const json& v, const std::string& param) {
  if (!v.is_string()) fail_type(param, "a string", v);
  if (v.get<std::string>().empty()) fail(param, param + " must not be empty");
  return v.get<std::string>();
}

std::vector<std::string> choice_list(const json& v, const std::string& param) {
  if (!v.is_array()) fail_type(param, "an array of strings", v);
  if (v.empty()) fail(param, param + " must hold at least one choice");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(non_empty_string(v[i], param + "[" + std::to_string(i) + "]"));
  return out;
}

OutputConstraint response_format(const json& rf) {
  using Kind = OutputConstraint::Kind;
  OutputConstraint c;
  if (!rf.is_object()) fail_type("response_format", "an object", rf);
  auto type = get_string(rf, "type", "response_format.type");
  if (!type) fail("response_format.type", "response_format.type is required", "missing_required_parameter");
  if (*type == "text") return c;
  if (*type == "json_object") {
    c.kind = Kind::JsonObject;
    c.param = "response_format";
    return c;
  }
  if (*type != "json_schema")
    fail("response_format.type",
         "response_format.type must be one of text, json_object, json_schema, got " + show(rf["type"]),
         "unsupported_value");
  const json* js = member(rf, "json_schema");
  if (!js) fail("response_format.json_schema", "response_format.json_schema is required with type json_schema",
                "missing_required_parameter");
  if (!js->is_object()) fail_type("response_format.json_schema", "an object", *js);
  auto name = get_string(*js, "name", "response_format.json_schema.name");
  if (!name) fail("response_format.json_schema.name", "response_format.json_schema.name is required",
                  "missing_required_parameter");
  get_bool(*js, "strict", "response_format.json_schema.strict");  // type-checked; the schema is always enforced
  c.param = "response_format.json_schema.schema";
  if (const json* schema = member(*js, "schema")) {
    c.kind = Kind::JsonSchema;
    c.spec = schema_text(*schema, c.param);
  } else {
    c.kind = Kind::JsonObject;  // OpenAI's schema is optional: then any JSON object
  }
  return c;
}

// One of json / regex / choice / grammar from `obj`, keys named `prefix + key` ("guided_json",
// "structured_outputs.json"); `where` names the set for the "more than one" message.
OutputConstraint guided(const json& obj, const std::string& prefix, const std::string& where) {
  using Kind = OutputConstraint::Kind;
  OutputConstraint c;
  int n = 0;
  for (const char* key : {"json", "regex", "choice", "grammar"}) {
    const std::string name = prefix + key;
    // guided_* keys sit in the body as they are named; structured_outputs' keys are the bare names.
    const bool dotted = !prefix.empty() && prefix.back() == '.';
    const json* v = member(obj, dotted ? key : name.c_str());
    if (!v) continue;
    if (++n > 1) fail(name, "only one of " + where + " may be given");
    c.param = name;
    const std::string k = key;
    if (k == "json") {
      c.kind = Kind::JsonSchema;
      c.spec = schema_text(*v, name);
    } else if (k == "regex") {
      c.kind = Kind::Regex;
      c.spec = non_empty_string(*v, name);
    } else if (k == "choice") {
      c.kind = Kind::Choice;
      c.choices = choice_list(*v, name);
    } else {
      c.kind = Kind::Grammar;
      c.spec = non_empty_string(*v, name);
    }
  }
  return c;
}

OutputConstraint parse_constraint(const json& body) {
  OutputConstraint c;
  const auto take = [&c](OutputConstraint next, const std::string& param) {
    if (!next.active()) return;
    if (c.active())
      fail(param, "only one structured output constraint may be given, got " + c.param + " and " + next.param);
    c = std::move(next);
  };
  if (const json* rf = member(body, "response_format")) take(response_format(*rf), "response_format");
  take(guided(body, "guided_", "guided_json, guided_regex, guided_choice, guided_grammar"), "guided_");
  if (const json* so = member(body, "structured_outputs")) {
    if (!so->is_object()) fail_type("structured_outputs", "an object", *so);
    take(guided(*so, "structured_outputs.", "structured_outputs.json, .regex, .choice, .grammar"),
         "structured_outputs");
  }
  return c;
}

std::vector<int32_t> token_array(const json& arr, const std::string& param) {
  std::vector<int32_t> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string p = param + "[" + std::to_string(i) + "]";
    int64_t id = as_int(arr[i], p);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      fail(p, "token ids must be >= 0 and fit in int32, got " + std::to_string(id) + " at " + p);
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

GenerationParams parse_common(const json& body, const ApiLimits& limits) {
  GenerationParams p;
  if (auto m = get_string(body, "model", "model")) p.model = *m;
  if (auto v = get_int(body, "max_tokens")) {
    if (*v < 0) fail("max_tokens", "max_tokens must be at least 0, got " + std::to_string(*v));
    p.max_tokens = *v;
  }
  if (auto v = get_number(body, "temperature")) p.sampling.temperature = in_range(kTemperatureRange, *v);
  if (auto v = get_number(body, "top_p")) p.sampling.top_p = in_range(kTopPRange, *v);
  if (auto v = get_int(body, "top_k")) {
    if (*v < -1) fail("top_k", "top_k must be -1 (off), 0 (off) or a positive integer, got " + std::to_string(*v));
    p.sampling.top_k = int32_t(std::min<int64_t>(std::max<int64_t>(*v, 0), std::numeric_limits<int32_t>::max()));
  }
  if (auto v = get_number(body, "min_p")) p.sampling.min_p = in_range(kMinPRange, *v);
  if (auto v = get_int(body, "seed")) {
    p.seed = static_cast<uint64_t>(*v);  // negative seeds are valid integers: reinterpret the bits
    p.sampling.seed = *p.seed;
  }
  if (const json* s = member(body, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (std::ssize(*s) > limits.max_stop)
        fail("stop", "stop may contain at most " + std::to_string(limits.max_stop) + " sequences, got " +
                         std::to_string(s->size()));
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string()) fail_type("stop[" + std::to_string(i) + "]", "a string", (*s)[i]);
        p.stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      fail_type("stop", "a string or an array of strings", *s);
    }
    for (const auto& str : p.stop)
      if (str.empty()) fail("stop", "stop sequences must not be empty strings");
  }
  if (auto v = get_bool(body, "ignore_eos", "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_bool(body, "return_token_ids", "return_token_ids")) p.return_token_ids = *v;
  if (auto v = get_int(body, "resumed_output_tokens")) {
    if (*v < 0) fail("resumed_output_tokens", "resumed_output_tokens must be at least 0, got " + std::to_string(*v));
    p.resumed_output_tokens = *v;
  }
  if (const json* c = member(body, "tpserve_continuation")) {
    if (!c->is_array()) fail_type("tpserve_continuation", "an array of token ids", *c);
    p.continuation = token_array(*c, "tpserve_continuation");
    if (p.resumed_output_tokens > 0)
      fail("tpserve_continuation", "tpserve_continuation cannot be combined with resumed_output_tokens");
  }
  if (auto v = get_number(body, "presence_penalty")) p.sampling.presence_penalty = in_range(kPresencePenaltyRange, *v);
  if (auto v = get_number(body, "frequency_penalty")) p.sampling.frequency_penalty = in_range(kFrequencyPenaltyRange, *v);
  if (auto v = get_number(body, "repetition_penalty"))
    p.sampling.repetition_penalty = in_range(kRepetitionPenaltyRange, *v);
  if (auto v = get_int(body, "n")) p.n = int32_t(int_in_range("n", *v, 1, limits.max_n));
  if (auto v = get_bool(body, "stream", "stream")) p.stream = *v;
  if (const json* so = member(body, "stream_options")) {
    if (!so->is_object()) fail_type("stream_options", "an object", *so);
    if (!p.stream) fail("stream_options", "stream_options can only be set when stream is true");
    if (auto v = get_bool(*so, "include_usage", "stream_options.include_usage")) p.include_usage = *v;
  }
  if (auto u = member(body, "user"); u && !u->is_string()) fail_type("user", "a string", *u);
  if (const json* lb = member(body, "logit_bias")) {
    if (!lb->is_object()) fail_type("logit_bias", "an object mapping token ids to biases", *lb);
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string at = "logit_bias[\"" + it.key().substr(0, 32) + "\"]";
      int64_t id = -1;
      const std::string& key = it.key();
      if (!key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
        id = std::stoll(key);
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        fail("logit_bias", "logit_bias keys must be token ids (non-negative integers as strings), got " + show(json(key)));
      if (!it->is_number()) fail_type(at, "a number", *it);
      const float bias = in_range(kLogitBiasRange, it->get<double>());
      p.logit_bias.push_back({int32_t(id), bias});
    }
  }
  if (auto v = get_int(body, "prompt_logprobs"))
    p.prompt_logprobs = int32_t(int_in_range("prompt_logprobs", *v, 0, limits.max_logprobs));
  p.constraint = parse_constraint(body);
  return p;
}

ChatMessage parse_message(const json& m, size_t index) {
  std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) fail_type(at, "an object", m);
  ChatMessage msg;
  const json* role = member(m, "role");
  if (!role) fail(at + ".role", at + ".role is required", "missing_required_parameter");
  if (!role->is_string()) fail_type(at + ".role", "a string", *role);
  msg.role = role->get<std::string>();
  if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system role
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
    fail(at + ".role", at + ".role must be one of system, user, assistant, tool, got " + show(*role), "unsupported_value");
  parse_message_tool_fields(m, at, msg);
  const json* content = member(m, "content");
  if (!content) {
    if (msg.role == "assistant") return msg;  // OpenAI allows a null assistant content
    fail(at + ".content", at + ".content is required", "missing_required_parameter");
  }
  if (content->is_string()) {
    msg.content = content->get<std::string>();
  } else if (content->is_array()) {
    // Text parts joined with "\n", as vLLM does for string-content templates.
    for (size_t i = 0; i < content->size(); ++i) {
      const json& part = (*content)[i];
      std::string pp = at + ".content[" + std::to_string(i) + "]";
      if (!part.is_object()) fail_type(pp, "an object", part);
      auto type = get_string(part, "type", pp + ".type");
      if (!type) fail(pp + ".type", pp + ".type is required", "missing_required_parameter");
      if (*type != "text")
        fail(pp + ".type", "only text content parts are supported, got type " + show(part["type"]), "unsupported_value");
      auto text = get_string(part, "text", pp + ".text");
      if (!text) fail(pp + ".text", pp + ".text is required", "missing_required_parameter");
      if (i > 0) msg.content += '\n';
      msg.content += *text;
    }
  } else {
    fail_type(at + ".content", "a string or an array of content parts", *content);
  }
  return msg;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* ms = member(body, "messages");
  if (!ms) fail("messages", "messages is required", "missing_required_parameter");
  if (!ms->is_array()) fail_type("messages", "an array", *ms);
  if (ms->empty()) fail("messages", "messages must contain at least one message");
  std::vector<ChatMessage> out;
  out.reserve(ms->size());
  for (size_t i = 0; i < ms->size(); ++i) out.push_back(parse_message((*ms)[i], i));
  return out;
}

Prompt one_prompt(const json& v, const std::string& param) {
  Prompt p;
  if (v.is_string()) {
    p.text = v.get<std::string>();
    if (p.text.empty()) fail(param, param + " must not be empty");
    return p;
  }
  if (v.is_array()) {
    if (v.empty()) fail(param, param + " must not be empty");
    p.is_tokens = true;
    p.tokens = token_array(v, param);
    return p;
  }
  fail_type(param, "a string or an array of token ids", v);
}

std::vector<Prompt> parse_prompts(const json& body, const ApiLimits& limits) {
  const json* pr = member(body, "prompt");
  if (!pr) fail("prompt", "prompt is required", "missing_required_parameter");
  if (!pr->is_array() || pr->empty() || !((*pr)[0].is_string() || (*pr)[0].is_array()))
    return {one_prompt(*pr, "prompt")};  // "text", [ids...] (or [] / a wrong type: refused there)
  // A batch: every element a string, or every element an array of token ids.
  if (std::ssize(*pr) > limits.max_prompts)
    fail("prompt", "a batch may hold at most " + std::to_string(limits.max_prompts) + " prompts, got " +
                       std::to_string(pr->size()));
  const bool strings = (*pr)[0].is_string();
  std::vector<Prompt> out;
  for (size_t i = 0; i < pr->size(); ++i) {
    const std::string at = "prompt[" + std::to_string(i) + "]";
    if ((*pr)[i].is_string() != strings || !((*pr)[i].is_string() || (*pr)[i].is_array()))
      fail_type(at, strings ? "a string (the batch is of strings)" : "an array of token ids (the batch is of token arrays)",
                (*pr)[i]);
    out.push_back(one_prompt((*pr)[i], at));
  }
  return out;
}

}  // namespace

json parse_json_body(std::string_view body) {
  json j;
  // Nesting past kMaxJsonDepth is refused while parsing: no request needs it, and deep values cost recursion.
  const auto depth_limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth)
      fail("", "invalid JSON body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", "invalid_json");
    return true;
  };
  try {
    j = json::parse(body, depth_limit);
  } catch (const json::parse_error& e) {
    fail("", "invalid JSON body at byte " + std::to_string(e.byte) + ": " + e.what(), "invalid_json");
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number that overflows a double
    fail("", std::string("invalid JSON body: ") + e.what(), "invalid_json");
  }
  require_object(j);
  return j;
}

CompletionRequest parse_completion_request(const json& body, const ApiLimits& limits) {
  require_object(body);
  CompletionRequest r;
  r.params = parse_common(body, limits);
  r.prompts = parse_prompts(body, limits);
  if (auto v = get_int(body, "logprobs"))
    r.logprobs = int32_t(int_in_range("logprobs", *v, 0, limits.max_logprobs));
  if (auto v = get_bool(body, "echo", "echo")) r.echo = *v;
  if (r.logprobs) r.params.sampling.logprobs = *r.logprobs;
  if (auto s = get_string(body, "suffix", "suffix"); s && !s->empty())
    fail("suffix", "suffix is not supported", "unsupported_value");
  if (auto b = get_int(body, "best_of"); b && *b != r.params.n)
    fail("best_of", "best_of is not supported (it must equal n when given), got " + std::to_string(*b),
         "unsupported_value");
  collect_unknown(body, {kCommonKeys, {"prompt", "echo", "suffix", "best_of"}}, r.params.ignored_fields);
  return r;
}

ChatCompletionRequest parse_chat_completion_request(const json& body, const ApiLimits& limits) {
  require_object(body);
  ChatCompletionRequest r;
  r.params = parse_common(body, limits);
  if (auto v = get_int(body, "max_completion_tokens")) {
    if (*v < 0) fail("max_completion_tokens", "max_completion_tokens must be at least 0, got " + std::to_string(*v));
    r.params.max_tokens = *v;  // takes precedence over the deprecated max_tokens
  }
  r.messages = parse_messages(body);
  if (auto v = get_bool(body, "logprobs", "logprobs")) r.logprobs = *v;
  if (auto v = get_int(body, "top_logprobs")) {
    r.top_logprobs = int32_t(int_in_range("top_logprobs", *v, 0, limits.max_logprobs));
    if (!r.logprobs) fail("top_logprobs", "top_logprobs requires logprobs to be true");
  }
  if (r.logprobs) r.params.sampling.logprobs = r.top_logprobs.value_or(0);
  if (auto v = get_bool(body, "add_generation_prompt", "add_generation_prompt")) r.add_generation_prompt = *v;
  r.tools = parse_chat_tools(nlohmann::ordered_json::parse(body.dump()));
  collect_unknown(body,
                  {kCommonKeys,
                   {"messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt", "tools", "tool_choice",
                    "parallel_tool_calls", "response_format", "documents", "chat_template_kwargs"}},
                  r.params.ignored_fields);
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  require_object(body);
  TokenizeRequest r;
  if (auto m = get_string(body, "model", "model")) r.model = *m;
  bool has_prompt = member(body, "prompt") != nullptr, has_messages = member(body, "messages") != nullptr;
  if (has_prompt == has_messages) fail("prompt", "exactly one of prompt or messages is required", "missing_required_parameter");
  if (has_prompt) {
    r.prompt = *get_string(body, "prompt", "prompt");
  } else {
    r.is_chat = true;
    r.messages = parse_messages(body);
    r.add_special_tokens = false;
    if (auto v = get_bool(body, "add_generation_prompt", "add_generation_prompt")) r.add_generation_prompt = *v;
  }
  if (auto v = get_bool(body, "add_special_tokens", "add_special_tokens")) r.add_special_tokens = *v;
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  require_object(body);
  DetokenizeRequest r;
  if (auto m = get_string(body, "model", "model")) r.model = *m;
  const json* t = member(body, "tokens");
  if (!t) fail("tokens", "tokens is required", "missing_required_parameter");
  if (!t->is_array()) fail_type("tokens", "an array of token ids", *t);
  r.tokens = token_array(*t, "tokens");
  return r;
}

namespace {

// A JSON schema's properties are generated in the order the client wrote them, but `json` keeps object keys
// sorted: re-read the schema from the raw body with key order kept (the body already parsed, so it is valid).
void keep_schema_order(std::string_view body, OutputConstraint& c) {
  if (c.kind != OutputConstraint::Kind::JsonSchema) return;
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(body, nullptr, false);
  const nlohmann::ordered_json* at = &doc;
  std::string_view path = c.param;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!at->is_object() || !at->contains(key)) return;
    at = &(*at)[key];
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  if (at->is_object()) c.spec = at->dump();  // (JSON text was kept as written already)
}

}  // namespace

CompletionRequest parse_completion_body(std::string_view body, const ApiLimits& limits) {
  CompletionRequest r = parse_completion_request(parse_json_body(body), limits);
  keep_schema_order(body, r.params.constraint);
  return r;
}
ChatCompletionRequest parse_chat_completion_body(std::string_view body, const ApiLimits& limits) {
  ChatCompletionRequest r = parse_chat_completion_request(parse_json_body(body), limits);
  r.tools = parse_chat_tools(nlohmann::ordered_json::parse(body));  // again, keeping the client's key order
  keep_schema_order(body, r.params.constraint);
  return r;
}
TokenizeRequest parse_tokenize_body(std::string_view body) { return parse_tokenize_request(parse_json_body(body)); }
DetokenizeRequest parse_detokenize_body(std::string_view body) {
  return parse_detokenize_request(parse_json_body(body));
}

}  // namespace tp
