// The OpenAI-compatible endpoints on an HttpServer, in front of one Engine:
//   POST /v1/completions, POST /v1/chat/completions (streaming as SSE or not), GET /v1/models,
//   POST /tokenize, POST /detokenize (vLLM's), GET /health, GET /metrics (Prometheus text).
// A generation request: parse (openai_request.h) -> check the model name -> prompt token ids (chat: the
// template, then encode with parse_special and no bos) -> Engine::submit with a callback into a per-request
// OutputQueue -> the connection's thread detokenizes incrementally, applies stop strings (StopMatcher; the
// stop string is not emitted, the engine request is aborted) and writes the response or SSE chunks.
// A client that disconnects (seen within ~50 ms) gets its engine request aborted, so its blocks are freed.
// Errors are OpenAI JSON: 400 bad body / context overflow, 401 bad API key (/v1/* only, as vLLM), 404 unknown
// model, 429 queue full, 500 engine failure. n choices: one engine request, deliveries routed by choice index
// (each choice has its own decoder, stop matcher and finish_reason; a stop string aborts only its choice).
// Logprobs in OpenAI's shapes: chat {"content": [{token, logprob, bytes, top_logprobs}]}, completions
// {tokens, token_logprobs, top_logprobs (dicts), text_offset}; -inf is reported as -9999.0 (as vLLM).
// Not supported (400): echo with logprobs (prompt logprobs), logit_bias.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "coordinator/chat_template.h"
#include "coordinator/engine.h"
#include "coordinator/http_server.h"
#include "coordinator/metrics.h"
#include "coordinator/tokenizer.h"

namespace tp {

struct ApiConfig {
  std::string model_name;   // the served name; requests naming another model get 404
  std::string api_key;      // empty: no authentication
  int64_t max_context = 0;  // prompt + max_tokens limit (the engine's)
  // GET /health: "" while every rank is up, else why not (then 503 {"status": "unhealthy", "reason"}).
  // Empty function: always healthy.
  std::function<std::string()> health;
};

class ApiHandlers {
 public:
  // All references must outlive this object and the server's threads.
  ApiHandlers(ApiConfig cfg, Engine& engine, const Tokenizer& tok, const ChatTemplate& chat, ServerMetrics& metrics);

  // Registers every route on `server` (before server.start()).
  void install(HttpServer& server);
  // Aborts every engine request an HTTP handler is waiting on (shutdown past its deadline).
  void abort_all();
  int64_t n_in_flight() const;

 private:
  struct Generation;
  struct ChoiceState;
  HttpResponse completions(const HttpRequest& req, ResponseStream& out);
  HttpResponse chat_completions(const HttpRequest& req, ResponseStream& out);
  HttpResponse models(const HttpRequest& req);
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse metrics(const HttpRequest& req);
  void check_auth(const HttpRequest& req) const;
  void check_model(const std::string& model) const;
  HttpResponse generate(Generation& g, ResponseStream& out);

  const ApiConfig cfg_;
  Engine& engine_;
  const Tokenizer& tok_;
  const ChatTemplate& chat_;
  ServerMetrics& metrics_;
  const int64_t created_;  // unix seconds at start-up (/v1/models)
  mutable std::mutex mu_;
  std::set<int64_t> in_flight_;
};

// The served model name when the config gives none: the model path's file name without ".gguf" and without a
// trailing quantization tag (".Q4_1", ".BF16", ".F32", ...): "SmolLM2-135M-Instruct.Q4_1.gguf" ->
// "SmolLM2-135M-Instruct"; a directory gives its own name.
std::string served_model_name(const std::string& configured_name, const std::string& model_path);

}  // namespace tp
