// The OpenAI API of `tpserve router`, proxied to its replicas:
//   POST /v1/completions, /v1/chat/completions   routed by the policy (router_replicas.h) from the prompt's
//        block hashes (router_request.h), forwarded, streamed back as it arrives (SSE) or whole.
//        A replica that cannot be reached, breaks the connection, answers 503 (it is dying: a rank died) or
//        ends a stream with an error event is marked down, and the request is replayed on another replica (at
//        most router.max_replays times): a plain request transparently; a stream resumes after the tokens whose
//        text the client already has (router_stream.h) — the same request with the same seed (the router's when
//        the client gave none) and those tokens as tpserve_continuation (router_request.h), so greedy and seeded
//        sampling, penalties and logprobs included, continue as the unfailed run would; with n > 1 the
//        unfinished choices continue one after the other, choice i as an n = 1 request with seed + i, and one
//        usage chunk sums them (router_stream.h); an output constraint goes on from where the continued
//        output left its grammar. Several prompts' choices continue one by one, each as its
//        own prompt. A chat stream with tools resumes too: the replica parses calls from the continued text
//        and what follows, and the router drops the tool-call headers and argument bytes the client has, so each
//        call keeps the id the client saw (router_stream.h). A stream that cannot resume (a request that is a
//        continuation itself) ends with an error event + [DONE]. Other replica errors
//        (400, 404, 429, ...) go to the client as they are. A plain response names the replica that produced it
//        in the header X-Tpserve-Replica (its base URL).
//   GET /v1/models, POST /tokenize, /detokenize   forwarded to a replica that is up.
//   GET /health     200 {"status": "ok", "replicas_up", "replicas"} with at least one replica up, else 503.
//   GET /metrics    router counters (router_metrics.h).
//   GET /router/replicas, POST /router/replicas {"url"}, DELETE /router/replicas {"url"}: list, join, leave.
// Errors are OpenAI JSON (openai_error.h); 503 when no replica is up.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/chat_template.h"
#include "coordinator/http_server.h"
#include "coordinator/router_metrics.h"
#include "coordinator/router_replicas.h"
#include "coordinator/router_request.h"
#include "coordinator/tokenizer.h"

namespace tp {

struct RouterApiConfig {
  std::string api_key;           // empty: none
  int64_t max_context = 0;       // for tokenizing prompts as the replicas do
  int64_t block_size = 16;       // the replicas' KV block size
  bool kv_fetch = false;         // router.kv_fetch
  int64_t max_replays = 3;
  double idle_timeout_s = 600;   // longest silence from a replica that is still up
};

class RouterApi {
 public:
  // All references must outlive this object and the server's threads.
  RouterApi(RouterApiConfig cfg, RouterReplicas& replicas, RouterMetrics& metrics, const Tokenizer& tok,
            const ChatTemplate& chat)
      : cfg_(std::move(cfg)), replicas_(replicas), metrics_(metrics), tok_(tok), chat_(chat) {}
  void install(HttpServer& server);

 private:
  HttpResponse generate(const HttpRequest& req, ResponseStream& out, bool chat);
  HttpResponse plain(const HttpRequest& req, const nlohmann::json& body, const RouteInfo& info);
  HttpResponse stream(const HttpRequest& req, ResponseStream& out, const nlohmann::json& body, const RouteInfo& info);
  HttpResponse forward_any(const HttpRequest& req);  // models, tokenize, detokenize
  HttpResponse health() const;
  HttpResponse replicas(const HttpRequest& req);
  void check_auth(const HttpRequest& req) const;
  // The forwarded body's kv_transfer_params.fetch_from for this choice ("" for none).
  std::string fetch_from(const RouteChoice& c) const;
  std::string no_replica_message() const;

  const RouterApiConfig cfg_;
  RouterReplicas& replicas_;
  RouterMetrics& metrics_;
  const Tokenizer& tok_;
  const ChatTemplate& chat_;
};

}  // namespace tp
