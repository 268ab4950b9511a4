// The OpenAI-compatible endpoints on an HttpServer, in front of one Engine:
//   POST /v1/completions, POST /v1/chat/completions (streaming as SSE or not), POST /v1/responses (over the
//   chat path, responses_api.h), GET /v1/models,
//   POST /tokenize, POST /detokenize, GET /tokenizer_info (vLLM's, what lm-eval probes), GET /version,
//   GET /health, GET /metrics (Prometheus text).
// A generation request, one job per step:
//   parse (openai_request.h) -> check the model -> a GenerationJob (generation_job.h: token prompts checked
//   against the vocabulary and the context) -> one RequestHandle per prompt (request_handle.h: submitted to
//   the Engine, aborted if the handler leaves early) -> each output routed to its ChoiceStream
//   (choice_stream.h: detokenize, stop strings, logprobs) -> SSE chunks (SseWriter) or the final JSON
//   (openai_response.h).
// A client that goes away (a reset, a failed or timed-out write; a half-close after sending is not one) gets its
// engine requests aborted — by the RequestHandles as the handler returns — so their blocks are freed.
// KV transfer between replicas (kv_api.cpp): POST /v1/kv/export, POST /v1/kv/release (holder), and
// "kv_transfer_params": {"fetch_from": URL} on completions / chat (receiver).
// Errors are OpenAI JSON: 400 bad body / context overflow (FieldError and ApiException, mapped by type), 401
// bad API key (/v1/* only, as vLLM), 404 unknown model, 429 queue full, 503 engine failure (a rank died or stopped
// answering: the engine failed its requests, or the server failed them itself with fail_all; streams end with
// the error event and [DONE]).
// Batched prompts: prompt j's choice i has index j * n + i. Prompt logprobs (echo + logprobs, vLLM's
// prompt_logprobs) are computed in the prefill; such prompts are recomputed, not served from the prefix cache.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "coordinator/chat_template.h"
#include "coordinator/engine.h"
#include "coordinator/http_server.h"
#include "coordinator/kv_fetch_client.h"
#include "coordinator/generation_job.h"
#include "coordinator/metrics.h"
#include "coordinator/request_handle.h"
#include "coordinator/structured_output.h"
#include "coordinator/tokenizer.h"

namespace tp {

struct ApiConfig {
  std::string model_name;   // the served name; requests naming another model get 404
  std::string api_key;      // empty: no authentication
  int64_t max_context = 0;  // prompt + max_tokens limit (the engine's)
  // GET /health: "" while every rank is up, else why not (then 503 {"status": "unhealthy", "reason"}).
  // Empty function: always healthy.
  std::function<std::string()> health;
  std::string chat_template;  // the model's own (Jinja) template text, for /tokenizer_info; may be empty
  // KV blocks between replicas (kv_api.cpp). Holder: the UCX worker address of each TP rank, in rank order
  // (empty: POST /v1/kv/export answers 503); how long an export pins its blocks at most. Receiver: the client that
  // asks the holder named by a request's kv_transfer_params.fetch_from (null: such requests recompute, counted).
  std::vector<std::string> kv_addresses;
  int64_t kv_pin_ms = 30000;
  KvFetchClient* kv_fetch = nullptr;
};

class ApiHandlers {
 public:
  // All references must outlive this object and the server's threads.
  ApiHandlers(ApiConfig cfg, Engine& engine, const Tokenizer& tok, const ChatTemplate& chat, ServerMetrics& metrics);

  // Registers every route on `server` (before server.start()).
  void install(HttpServer& server);
  // Aborts every engine request an HTTP handler is waiting on (shutdown past its deadline).
  void abort_all();
  // Ends every in-flight request now with `error`, without the engine (InFlightRequests::fail_all): for a
  // server whose engine thread is stuck because a rank died or stopped answering. Any thread.
  void fail_all(const std::string& error);
  int64_t n_in_flight() const;

 private:
  HttpResponse completions(const HttpRequest& req, ResponseStream& out);
  HttpResponse chat_completions(const HttpRequest& req, ResponseStream& out);
  HttpResponse responses(const HttpRequest& req, ResponseStream& out);  // responses_api.h
  HttpResponse models(const HttpRequest& req);
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse tokenizer_info(const HttpRequest& req);
  HttpResponse metrics(const HttpRequest& req);
  // kv_api.cpp: POST /v1/kv/export {"prompt_token_ids": [...]} -> the pinned leading blocks and the ranks'
  // UCX addresses (kv_fetch_client.h); POST /v1/kv/release {"pin_id"}.
  HttpResponse kv_export(const HttpRequest& req);
  HttpResponse kv_release(const HttpRequest& req);
  // kv_api.cpp: with "kv_transfer_params": {"fetch_from": URL} in the body, asks that holder about each prompt of
  // the job (job.kv_imports). FieldError 400 for a malformed field.
  void attach_kv_imports(const std::string& body, GenerationJob& job);
  void check_auth(const HttpRequest& req) const;
  void check_model(const std::string& model) const;
  // Runs a job: submits its prompts, routes the outputs to its choices, streams or returns the response.
  HttpResponse generate(const GenerationJob& job, ResponseStream& out);
  // Compiles the job's output constraint, if any, into job.grammar (FieldError 400 when invalid). The compiler
  // (the vocabulary's token texts) is built on first use.
  void compile_constraint(GenerationJob& job);

  const ApiConfig cfg_;
  Engine& engine_;
  const Tokenizer& tok_;
  const ChatTemplate& chat_;
  ServerMetrics& metrics_;
  const int64_t created_;  // unix seconds at start-up (/v1/models)
  InFlightRequests in_flight_;
  std::once_flag grammar_compiler_once_;
  std::unique_ptr<StructuredOutputCompiler> grammar_compiler_;
};

// The served model name when the config gives none: the model path's file name without ".gguf" and without a
// trailing quantization tag (".Q4_1", ".BF16", ".F32", ...): "SmolLM2-135M-Instruct.Q4_1.gguf" ->
// "SmolLM2-135M-Instruct"; a directory gives its own name.
std::string served_model_name(const std::string& configured_name, const std::string& model_path);

}  // namespace tp
