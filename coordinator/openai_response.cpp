#include "coordinator/openai_response.h"

namespace tp {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

json usage_json(int64_t n_prompt, int64_t n_completion) {
  return {{"prompt_tokens", n_prompt}, {"completion_tokens", n_completion}, {"total_tokens", n_prompt + n_completion}};
}

bool SseWriter::start() { return out_.start(200, "text/event-stream"); }

bool SseWriter::chunk(json choice, const json& top_extra) {
  json body = {{"id", h_.id},
               {"object", h_.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", h_.created},
               {"model", h_.model},
               {"choices", json::array({std::move(choice)})}};
  if (!top_extra.is_null()) body.update(top_extra);
  return out_.write(sse_event(dump(body)));
}

bool SseWriter::role(int32_t index) {
  return chunk({{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                {"finish_reason", nullptr}});
}

bool SseWriter::delta(int32_t index, const ChoiceDelta& d) {
  if (!d.empty() || (h_.token_ids && !d.token_ids.empty())) {
    json choice = {{"index", index}, {"logprobs", d.logprobs}, {"finish_reason", nullptr}};
    if (h_.token_ids) choice["token_ids"] = d.token_ids;
    json top = nullptr;
    if (h_.chat) {
      choice["delta"] = d.text.empty() ? json::object() : json{{"content", d.text}};
      if (!d.prompt_logprobs.is_null()) top = {{"prompt_logprobs", d.prompt_logprobs}};
    } else {
      choice["text"] = d.text;
      if (!d.prompt_logprobs.is_null()) choice["prompt_logprobs"] = d.prompt_logprobs;
    }
    if (!chunk(std::move(choice), top)) return false;
  }
  if (d.finish.empty() || d.finish == "error") return true;
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", d.finish}};
  if (h_.chat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  return chunk(std::move(choice));
}

bool SseWriter::usage(int64_t n_prompt, int64_t n_completion) {
  return out_.write(sse_event(dump({{"id", h_.id},
                                    {"object", h_.chat ? "chat.completion.chunk" : "text_completion"},
                                    {"created", h_.created},
                                    {"model", h_.model},
                                    {"choices", json::array()},
                                    {"usage", usage_json(n_prompt, n_completion)}})));
}

bool SseWriter::error(const ApiError& e) { return out_.write(sse_event(to_json(e))); }

bool SseWriter::done() { return out_.write(sse_event("[DONE]")); }

json final_response(const ResponseHeader& h, const std::vector<std::unique_ptr<ChoiceStream>>& choices,
                    int64_t n_prompt_tokens) {
  json out_choices = json::array();
  int64_t n_generated = 0;
  json chat_prompt_logprobs = nullptr;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceStream& c = *choices[i];
    n_generated += c.n_generated();
    json choice = {{"index", int64_t(i)}, {"logprobs", c.logprobs()}, {"finish_reason", c.finish_reason()}};
    if (h.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text()}};
      if (chat_prompt_logprobs.is_null()) chat_prompt_logprobs = c.prompt_logprobs();
    } else {
      choice["text"] = c.text();
      if (!c.prompt_logprobs().is_null()) choice["prompt_logprobs"] = c.prompt_logprobs();
    }
    out_choices.push_back(std::move(choice));
  }
  json body = {{"id", h.id},
               {"object", h.chat ? "chat.completion" : "text_completion"},
               {"created", h.created},
               {"model", h.model},
               {"choices", std::move(out_choices)},
               {"usage", usage_json(n_prompt_tokens, n_generated)}};
  if (!chat_prompt_logprobs.is_null()) body["prompt_logprobs"] = chat_prompt_logprobs;
  return body;
}

}  // namespace tp
