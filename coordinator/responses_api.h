// OpenAI's Responses API (POST /v1/responses) over the chat machinery: the request becomes a chat completions
// request (input + instructions -> messages), runs as a chat job, and the chat response is translated back:
//   request   model, input (a string, or a list of messages {"role", "content": string | [{"type":
//             "input_text" | "output_text", "text"}]}, "type": "message" optional), instructions (a system
//             message first), max_output_tokens, temperature, top_p, stream; store / metadata / user / truncation
//             accepted and ignored. Not served (400 naming the field): previous_response_id (nothing is
//             stored), tools (use /v1/chat/completions), text.format other than text, input items of other
//             types, non-text content parts.
//   response  {"id": "resp_...", "object": "response", "created_at", "status": "completed" | "incomplete",
//             "incomplete_details", "model", "output": [{"type": "message", "id": "msg_...", "status", "role":
//             "assistant", "content": [{"type": "output_text", "text", "annotations": []}]}], "output_text",
//             "usage": {"input_tokens", "output_tokens", "total_tokens", ...}, ...}
//   stream    Server-Sent Events, each "event: <type>\ndata: {json with type and sequence_number}": response.created,
//             response.in_progress, response.output_item.added, response.content_part.added,
//             response.output_text.delta (per text delta), response.output_text.done, response.content_part.done,
//             response.output_item.done, then response.completed (or response.incomplete when max_output_tokens
//             cut it); an engine failure mid-stream is an "error" event.
// ResponsesStream is a ResponseStream that takes the chat SSE chunks the generation writes and writes these
// events instead, so the chat path runs unchanged.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/http_server.h"

namespace tp {

// The equivalent chat completions body (stream requests include_usage, for response.completed's usage).
// Throws ApiException 400 naming the field.
nlohmann::json responses_to_chat_body(const nlohmann::json& body);

// A non-streamed chat.completion body as a Response object. `instructions`: the request's (echoed), or null.
nlohmann::json chat_to_response(const nlohmann::json& chat, const std::string& response_id,
                                const nlohmann::json& instructions);

class ResponsesStream : public ResponseStream {
 public:
  ResponsesStream(ResponseStream& out, std::string response_id, std::string model, int64_t created_at,
                  nlohmann::json instructions);
  bool start(int status, const std::string& content_type) override;
  bool write(std::string_view data) override;  // one chat SSE event ("data: {...}\n\n")
  bool started() const override { return out_.started(); }
  bool peer_closed() override { return out_.peer_closed(); }

 private:
  bool event(const std::string& type, nlohmann::json body);
  nlohmann::json response(const std::string& status) const;
  nlohmann::json item(const std::string& status) const;

  ResponseStream& out_;
  const std::string id_, item_id_, model_;
  const int64_t created_at_;
  const nlohmann::json instructions_;
  int64_t seq_ = 0;
  bool item_open_ = false;
  std::string text_, finish_;
  nlohmann::json usage_ = nullptr;
};

}  // namespace tp
