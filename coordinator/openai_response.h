// OpenAI response bodies of a generation: the streamed chunks (SseWriter, Server-Sent Events) and the final
// JSON of a non-streamed response. Shapes, as OpenAI and vLLM send them:
//   chunk  {"id", "object": "text_completion" | "chat.completion.chunk", "created", "model",
//           "choices": [{"index", "text" | "delta": {"role"?, "content"?}, "logprobs", "finish_reason"}]}
//   final  {"id", "object": "text_completion" | "chat.completion", "created", "model",
//           "choices": [{"index", "text" | "message": {"role", "content"}, "logprobs", "finish_reason"}],
//           "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
// vLLM's prompt_logprobs ride on the completions choice, and at the top level for chat.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/choice_stream.h"
#include "coordinator/http_server.h"
#include "coordinator/openai_error.h"

namespace tp {

struct ResponseHeader {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  bool chat = false;
  bool token_ids = false;  // return_token_ids: each choice chunk carries "token_ids" (ChoiceDelta::token_ids)
};

nlohmann::json usage_json(int64_t n_prompt, int64_t n_completion);

// Writes a generation as SSE chunks. Every method returns false once the client is gone.
class SseWriter {
 public:
  SseWriter(ResponseStream& out, ResponseHeader h) : out_(out), h_(std::move(h)) {}
  bool start();                                  // status 200, text/event-stream
  bool role(int32_t index);                      // chat: the first chunk of a choice, {"role": "assistant"}
  // The delta's text/logprobs as one chunk (none when empty), then, when it ended the choice with a reason
  // other than "error", a chunk with finish_reason.
  bool delta(int32_t index, const ChoiceDelta& d);
  bool usage(int64_t n_prompt, int64_t n_completion);  // stream_options.include_usage: choices []
  bool error(const ApiError& e);                 // an error event (the generation failed mid-stream)
  bool done();                                   // data: [DONE]
  // One chunk with this choice object as it is (tool-call deltas, tool_call_response.h).
  bool choice(nlohmann::json choice) { return chunk(std::move(choice)); }

 private:
  bool chunk(nlohmann::json choice, const nlohmann::json& top_extra = nullptr);

  ResponseStream& out_;
  const ResponseHeader h_;
};

// The body of a non-streamed response.
nlohmann::json final_response(const ResponseHeader& h, const std::vector<std::unique_ptr<ChoiceStream>>& choices,
                              int64_t n_prompt_tokens);

}  // namespace tp
