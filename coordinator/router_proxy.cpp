#include "coordinator/router_proxy.h"

#include <set>
#include <utility>
#include <vector>

#include "coordinator/http_client.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_request.h"
#include "coordinator/router_stream.h"

namespace tp {

using json = nlohmann::json;

namespace {

std::vector<std::pair<std::string, std::string>> pass_headers(const HttpRequest& req) {
  std::vector<std::pair<std::string, std::string>> h;
  if (std::string a = req.header("authorization"); !a.empty()) h.emplace_back("Authorization", a);
  return h;
}

HttpClientRequest client_request(std::string method, std::string target, std::string body,
                                 std::vector<std::pair<std::string, std::string>> headers) {
  HttpClientRequest q;
  q.method = std::move(method);
  q.target = std::move(target);
  q.body = std::move(body);
  q.headers = std::move(headers);
  return q;
}

// Releases a replica's load when the attempt ends, however it ends.
struct Attempt {
  RouterReplicas& replicas;
  int64_t ticket;
  ~Attempt() { replicas.release(ticket); }
};

}  // namespace

void RouterApi::check_auth(const HttpRequest& req) const {
  if (cfg_.api_key.empty()) return;
  if (req.header("authorization") != "Bearer " + cfg_.api_key) throw ApiException(unauthorized());
}

std::string RouterApi::no_replica_message() const {
  return "no replica is up (0 of " + std::to_string(replicas_.n_joined()) + ")";
}

std::string RouterApi::fetch_from(const RouteChoice& c) const {
  if (!cfg_.kv_fetch || c.holder < 0 || c.holder == c.replica || c.holder_overlap <= c.overlap_blocks) return "";
  return c.holder_url;
}

void RouterApi::install(HttpServer& server) {
  server.route("POST", "/v1/completions",
               [this](const HttpRequest& r, ResponseStream& out) { return generate(r, out, false); });
  server.route("POST", "/v1/chat/completions",
               [this](const HttpRequest& r, ResponseStream& out) { return generate(r, out, true); });
  for (const char* p : {"/v1/models"})
    server.route("GET", p, [this](const HttpRequest& r, ResponseStream&) { return forward_any(r); });
  for (const char* p : {"/tokenize", "/detokenize"})
    server.route("POST", p, [this](const HttpRequest& r, ResponseStream&) { return forward_any(r); });
  server.route("GET", "/health", [this](const HttpRequest&, ResponseStream&) { return health(); });
  server.route("GET", "/metrics", [this](const HttpRequest&, ResponseStream&) {
    return HttpResponse(200, "text/plain; version=0.0.4", metrics_.text(replicas_.snapshot()));
  });
  for (const char* m : {"GET", "POST", "DELETE"})
    server.route(m, "/router/replicas", [this](const HttpRequest& r, ResponseStream&) { return replicas(r); });
  server.add_access_hook([this](const AccessRecord& r) {
    if (r.path == "/v1/completions" || r.path == "/v1/chat/completions") metrics_.request_done(r.status);
  });
}

HttpResponse RouterApi::health() const {
  const int up = replicas_.n_up(), n = replicas_.n_joined();
  const json j = {{"status", up > 0 ? "ok" : "unhealthy"}, {"replicas_up", up}, {"replicas", n}};
  return HttpResponse(up > 0 ? 200 : 503, "application/json", j.dump());
}

HttpResponse RouterApi::replicas(const HttpRequest& req) {
  if (req.method == "GET") {
    json list = json::array();
    for (const ReplicaView& r : replicas_.snapshot())
      list.push_back({{"url", r.url}, {"joined", r.joined}, {"up", r.up}, {"down_reason", r.down_reason},
                      {"generation", r.generation}, {"in_flight", r.in_flight}, {"routed", r.n_routed},
                      {"prefix_blocks", r.n_blocks}, {"kv_usage", r.kv_usage}, {"kv_events", r.events_endpoint}});
    return HttpResponse(200, "application/json", json{{"replicas", list}}.dump());
  }
  check_auth(req);
  const json body = parse_json_body(req.body);
  const auto it = body.find("url");
  if (it == body.end() || !it->is_string())
    throw ApiException(bad_request("url must be a string \"http://host:port\"", "url", "missing_required_parameter"));
  const std::string url = it->get<std::string>();
  try {
    parse_base_url(url);
  } catch (const InputError& e) {
    throw ApiException(bad_request(e.what(), "url"));
  }
  if (req.method == "POST") {
    const int id = replicas_.join(url);
    return HttpResponse(200, "application/json", json{{"url", url}, {"id", id}, {"joined", true}}.dump());
  }
  if (!replicas_.leave(url)) throw ApiException(not_found("no replica '" + url + "' is joined", "url"));
  return HttpResponse(200, "application/json", json{{"url", url}, {"joined", false}}.dump());
}

HttpResponse RouterApi::forward_any(const HttpRequest& req) {
  if (req.path.rfind("/v1/", 0) == 0) check_auth(req);
  std::set<int> exclude;
  for (int attempt = 0; attempt <= cfg_.max_replays; ++attempt) {
    const RouteChoice c = replicas_.choose({}, 0, 0, exclude);
    if (c.replica < 0) break;
    Attempt a{replicas_, c.ticket};
    try {
      const auto [host, port] = parse_base_url(c.url);
      HttpClientRequest q = client_request(req.method, req.target, req.body, pass_headers(req));
      q.idle_timeout_s = 30;
      const HttpClientResponse r = http_call(host, port, q);
      return HttpResponse(r.status, r.content_type, r.body);
    } catch (const HttpClientError& e) {
      replicas_.mark_down(c.replica, e.what());
      exclude.insert(c.replica);
    }
  }
  throw ApiException(service_unavailable(no_replica_message()));
}

HttpResponse RouterApi::generate(const HttpRequest& req, ResponseStream& out, bool chat) {
  check_auth(req);
  const json body = parse_json_body(req.body);
  const RouteInfo info = route_info(body, chat, tok_, chat_, cfg_.max_context, cfg_.block_size);
  return info.stream ? stream(req, out, body, info) : plain(req, body, info);
}

HttpResponse RouterApi::plain(const HttpRequest& req, const json& body, const RouteInfo& info) {
  std::set<int> exclude;
  std::string last_error;
  for (int attempt = 0; attempt <= cfg_.max_replays; ++attempt) {
    const RouteChoice c = replicas_.choose(info.chain, int64_t(info.prompt.size()), info.load_tokens, exclude);
    if (c.replica < 0) break;
    Attempt a{replicas_, c.ticket};
    const std::string fetch = fetch_from(c);
    metrics_.routed(c.replica, c.n_prompt_blocks, c.overlap_blocks, !fetch.empty());
    if (attempt > 0) metrics_.replayed(false);
    try {
      const auto [host, port] = parse_base_url(c.url);
      HttpClientRequest q = client_request("POST", req.target, forward_body(body, info, fetch), pass_headers(req));
      q.idle_timeout_s = cfg_.idle_timeout_s;
      const int id = c.replica;
      q.keep_waiting = [this, id] {
        for (const ReplicaView& r : replicas_.snapshot())
          if (r.id == id) return r.up;
        return false;
      };
      const HttpClientResponse r = http_call(host, port, q);
      if (r.status == 503) {  // the replica is failing (a rank died or stopped): move the request
        last_error = c.url + " answered 503: " + r.body.substr(0, 300);
        replicas_.mark_down(c.replica, last_error);
        exclude.insert(c.replica);
        continue;
      }
      HttpResponse resp(r.status, r.content_type, r.body, {{"X-Tpserve-Replica", c.url}});
      resp.log.n_prompt_tokens = int64_t(info.prompt.size());
      return resp;
    } catch (const HttpClientError& e) {
      last_error = e.what();
      replicas_.mark_down(c.replica, last_error);
      exclude.insert(c.replica);
    }
  }
  metrics_.replay_failed();
  throw ApiException(service_unavailable(last_error.empty() ? no_replica_message()
                                                            : no_replica_message() + "; last failure: " + last_error));
}

HttpResponse RouterApi::stream(const HttpRequest& req, ResponseStream& out, const json& body, const RouteInfo& info) {
  int64_t n_prompt_tokens = 0;
  for (const int64_t n : info.prompt_sizes) n_prompt_tokens += n;
  StreamTracker tracker(info.chat, info.client_wants_token_ids, info.n_choices * info.n_prompts, info.echo_bytes,
                        info.echo_logprobs, info.include_usage, n_prompt_tokens, info.prompt_logprobs);
  if (info.n_prompts > 1) tracker.set_prompts(info.n_choices, info.prompt_echo_bytes, info.prompt_echo_logprobs);
  std::set<int> exclude;
  std::string last_error;
  bool started = false, client_gone = false, resuming = false, moved = false;
  HttpResponse log_only;
  log_only.log.n_prompt_tokens = int64_t(info.prompt.size());
  // Each failure counts an attempt; after one, the unfinished choices continue one at a time (n = 1 requests).
  for (int attempt = 0; attempt <= cfg_.max_replays;) {
    const RouteChoice c = replicas_.choose(info.chain, int64_t(info.prompt.size()), info.load_tokens, exclude);
    if (c.replica < 0) break;
    Attempt a{replicas_, c.ticket};
    const std::string fetch = resuming ? "" : fetch_from(c);
    metrics_.routed(c.replica, c.n_prompt_blocks, c.overlap_blocks, !fetch.empty());
    if (moved) metrics_.replayed(true);
    moved = false;
    const int32_t choice = resuming ? tracker.next_choice() : -1;
    if (resuming) tracker.continue_choice(choice);
    SseSplitter splitter;
    const int64_t outputs_before = tracker.n_output_chunks();
    bool failed = false;
    HttpClientResponse head;
    std::string error_body;
    try {
      const auto [host, port] = parse_base_url(c.url);
      HttpClientRequest q = client_request(
          "POST", req.target,
          resuming ? replay_body(body, info, choice, tracker.resume_tokens(choice), tracker.replay_from_start(choice))
                   : forward_body(body, info, fetch),
          pass_headers(req));
      q.idle_timeout_s = cfg_.idle_timeout_s;
      const int id = c.replica;
      q.keep_waiting = [this, id, &out, &client_gone] {
        if (out.peer_closed()) return !(client_gone = true);
        for (const ReplicaView& r : replicas_.snapshot())
          if (r.id == id) return r.up;
        return false;
      };
      head = http_call(host, port, q, [&](const HttpClientResponse& h, std::string_view piece) {
        if (h.status != 200) {
          error_body.append(piece);
          return true;
        }
        if (!started) {
          started = true;
          if (!out.start(200, "text/event-stream")) return !(client_gone = true);
        }
        for (const std::string& data : splitter.feed(piece)) {
          const StreamEvent ev = tracker.on_event(data);
          if (tracker.n_output_chunks() > outputs_before) replicas_.prefilled(c.ticket);  // its prompt is computed
          if (ev.kind == StreamEvent::Kind::Error) {
            failed = true;
            last_error = c.url + " ended the stream with an error: " + data.substr(0, 300);
            return false;
          }
          if (!ev.out.empty() && !out.write(ev.out)) return !(client_gone = true);
          if (ev.kind == StreamEvent::Kind::Done) return false;
        }
        return true;
      });
    } catch (const HttpClientError& e) {
      failed = true;
      last_error = e.what();
    }
    if (client_gone || tracker.done()) return log_only;
    if (!failed && head.status != 200 && head.status != 503) {
      if (!started) return HttpResponse(head.status, head.content_type, error_body);
      // A replay refused (a 4xx on the continuation): end the stream with its error.
      last_error = c.url + " refused the continuation: " + error_body.substr(0, 300);
      break;
    }
    if (!failed && head.status == 200 && tracker.finished()) {  // ended without [DONE]: finish it for the client
      out.write(tracker.close());
      return log_only;
    }
    if (resuming && !failed && head.status == 200 && tracker.choice_finished(choice)) continue;  // the next choice
    ++attempt;
    moved = true;
    if (head.status == 503) last_error = c.url + " answered 503: " + error_body.substr(0, 300);
    else if (!failed) last_error = c.url + " ended the stream early";
    replicas_.mark_down(c.replica, last_error);
    exclude.insert(c.replica);
    if (started && tracker.finished()) {  // it died after the last finish_reason: nothing to replay
      out.write(tracker.close());
      return log_only;
    }
    if (started) {
      if (!info.replayable) {
        last_error = "a stream with " + info.not_replayable + " cannot resume on another replica; " + last_error;
        break;
      }
      resuming = true;
      tracker.begin_replay(tok_, info.ignore_eos);
    }
  }
  metrics_.replay_failed();
  const ApiError err = service_unavailable(last_error.empty() ? no_replica_message()
                                                              : "the request could not be completed: " + last_error);
  if (!started) throw ApiException(err);
  out.write(sse_event(to_json(err)));
  out.write(sse_event("[DONE]"));
  log_only.log.error = err.message;
  return log_only;
}

}  // namespace tp
