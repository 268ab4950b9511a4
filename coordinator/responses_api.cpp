#include "coordinator/responses_api.h"

#include <random>

#include "coordinator/openai_error.h"
#include "coordinator/openai_response.h"

namespace tp {

using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiException(bad_request(message, param, code));
}

const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

json message_from_item(const json& item, const std::string& at) {
  if (!item.is_object()) fail(at, at + " must be an object", "invalid_type");
  if (const json* type = member(item, "type"); type && *type != "message")
    fail(at + ".type", at + ".type " + type->dump() + " is not supported (only messages)", "unsupported_value");
  const json* role = member(item, "role");
  if (!role || !role->is_string()) fail(at + ".role", at + ".role is required", "missing_required_parameter");
  const json* content = member(item, "content");
  if (!content) fail(at + ".content", at + ".content is required", "missing_required_parameter");
  json msg = {{"role", *role}};
  if (content->is_string()) {
    msg["content"] = *content;
  } else if (content->is_array()) {
    json parts = json::array();
    for (size_t i = 0; i < content->size(); ++i) {
      const json& part = (*content)[i];
      const std::string pp = at + ".content[" + std::to_string(i) + "]";
      const json* type = part.is_object() ? member(part, "type") : nullptr;
      if (!type || (*type != "input_text" && *type != "output_text" && *type != "text"))
        fail(pp + ".type", "only input_text / output_text content parts are supported", "unsupported_value");
      const json* text = member(part, "text");
      if (!text || !text->is_string()) fail(pp + ".text", pp + ".text is required", "missing_required_parameter");
      parts.push_back({{"type", "text"}, {"text", *text}});
    }
    msg["content"] = std::move(parts);
  } else {
    fail(at + ".content", at + ".content must be a string or an array of content parts", "invalid_type");
  }
  return msg;
}

json usage_from_chat(const json& u) {
  if (!u.is_object()) return nullptr;
  return {{"input_tokens", u.value("prompt_tokens", 0)},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", u.value("completion_tokens", 0)},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.value("total_tokens", 0)}};
}

json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

// The Response object's common fields.
json response_shell(const std::string& id, int64_t created_at, const std::string& model, const std::string& status,
                    const json& instructions) {
  return {{"id", id},
          {"object", "response"},
          {"created_at", created_at},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
          {"instructions", instructions},
          {"model", model},
          {"output", json::array()},
          {"parallel_tool_calls", false},
          {"tool_choice", "none"},
          {"tools", json::array()},
          {"usage", nullptr}};
}

}  // namespace

json responses_to_chat_body(const json& body) {
  if (!body.is_object()) fail("", "request body must be a JSON object", "invalid_type");
  for (const char* k : {"previous_response_id", "conversation"})
    if (member(body, k)) fail(k, std::string(k) + " is not supported (responses are not stored)", "unsupported_value");
  if (const json* t = member(body, "tools"); t && !(t->is_array() && t->empty()))
    fail("tools", "tools are not supported on /v1/responses; use /v1/chat/completions", "unsupported_value");
  if (const json* text = member(body, "text")) {
    const json* format = text->is_object() ? member(*text, "format") : nullptr;
    if (format && !(format->is_object() && format->value("type", "") == "text"))
      fail("text.format", "text.format other than {\"type\": \"text\"} is not supported", "unsupported_value");
  }
  json messages = json::array();
  if (const json* ins = member(body, "instructions")) {
    if (!ins->is_string()) fail("instructions", "instructions must be a string", "invalid_type");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  const json* input = member(body, "input");
  if (!input) fail("input", "input is required", "missing_required_parameter");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    if (input->empty()) fail("input", "input must not be empty");
    for (size_t i = 0; i < input->size(); ++i) messages.push_back(message_from_item((*input)[i], "input[" + std::to_string(i) + "]"));
  } else {
    fail("input", "input must be a string or an array of messages", "invalid_type");
  }
  json chat = {{"messages", std::move(messages)}};
  for (const char* k : {"model", "temperature", "top_p", "stream", "user"})
    if (const json* v = member(body, k)) chat[k] = *v;
  if (const json* v = member(body, "max_output_tokens")) chat["max_tokens"] = *v;
  if (chat.value("stream", false) == true) chat["stream_options"] = {{"include_usage", true}};
  return chat;
}

json chat_to_response(const json& chat, const std::string& response_id, const json& instructions) {
  const json& choice = chat.at("choices").at(0);
  const std::string finish = choice.value("finish_reason", "stop");
  const std::string text = choice["message"]["content"].is_string() ? choice["message"]["content"].get<std::string>() : "";
  json r = response_shell(response_id, chat.value("created", int64_t(0)), chat.value("model", ""),
                          finish == "length" ? "incomplete" : "completed", instructions);
  r["output"].push_back({{"type", "message"},
                         {"id", "msg_" + random_hex(24)},
                         {"status", finish == "length" ? "incomplete" : "completed"},
                         {"role", "assistant"},
                         {"content", json::array({output_text_part(text)})}});
  r["output_text"] = text;
  r["usage"] = usage_from_chat(chat.value("usage", json(nullptr)));
  return r;
}

ResponsesStream::ResponsesStream(ResponseStream& out, std::string response_id, std::string model, int64_t created_at,
                                 json instructions)
    : out_(out), id_(std::move(response_id)), item_id_("msg_" + random_hex(24)), model_(std::move(model)),
      created_at_(created_at), instructions_(std::move(instructions)) {}

json ResponsesStream::response(const std::string& status) const {
  json r = response_shell(id_, created_at_, model_, status, instructions_);
  if (status != "in_progress") {
    r["output"].push_back(item(status));
    r["output_text"] = text_;
  }
  r["usage"] = usage_;
  return r;
}

json ResponsesStream::item(const std::string& status) const {
  json content = status == "in_progress" ? json::array() : json::array({output_text_part(text_)});
  return {{"type", "message"}, {"id", item_id_}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

bool ResponsesStream::event(const std::string& type, json body) {
  body["type"] = type;
  body["sequence_number"] = seq_++;
  const std::string data = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return out_.write("event: " + type + "\n" + sse_event(data));
}

bool ResponsesStream::start(int status, const std::string& content_type) {
  if (!out_.start(status, content_type)) return false;
  return event("response.created", {{"response", response("in_progress")}}) &&
         event("response.in_progress", {{"response", response("in_progress")}});
}

bool ResponsesStream::write(std::string_view data) {
  constexpr std::string_view kPrefix = "data: ";
  if (data.substr(0, kPrefix.size()) != kPrefix) return out_.write(data);
  std::string_view payload = data.substr(kPrefix.size());
  while (!payload.empty() && (payload.back() == '\n' || payload.back() == '\r')) payload.remove_suffix(1);
  if (payload == "[DONE]") {
    const std::string status = finish_ == "length" ? "incomplete" : "completed";
    return event("response." + status, {{"response", response(status)}});
  }
  const json chunk = json::parse(payload, nullptr, false);
  if (chunk.is_discarded()) return out_.write(data);
  if (chunk.contains("error")) {  // the generation failed mid-stream
    const json& e = chunk["error"];
    return event("error", {{"code", e.value("code", json(nullptr))}, {"message", e.value("message", "")}, {"param", nullptr}});
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = usage_from_chat(chunk["usage"]);
  if (!chunk.contains("choices") || chunk["choices"].empty()) return true;
  const json& choice = chunk["choices"][0];
  const json delta = choice.value("delta", json::object());
  if (!item_open_) {
    item_open_ = true;
    if (!event("response.output_item.added", {{"output_index", 0}, {"item", item("in_progress")}}) ||
        !event("response.content_part.added",
               {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", output_text_part("")}}))
      return false;
  }
  if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
    const std::string piece = delta["content"].get<std::string>();
    text_ += piece;
    if (!event("response.output_text.delta", {{"item_id", item_id_},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"delta", piece},
                                              {"logprobs", json::array()}}))
      return false;
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    finish_ = choice["finish_reason"].get<std::string>();
    const std::string status = finish_ == "length" ? "incomplete" : "completed";
    return event("response.output_text.done", {{"item_id", item_id_},
                                               {"output_index", 0},
                                               {"content_index", 0},
                                               {"text", text_},
                                               {"logprobs", json::array()}}) &&
           event("response.content_part.done",
                 {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", output_text_part(text_)}}) &&
           event("response.output_item.done", {{"output_index", 0}, {"item", item(status)}});
  }
  return true;
}

}  // namespace tp
