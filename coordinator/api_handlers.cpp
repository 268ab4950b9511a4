#include "coordinator/api_handlers.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "coordinator/openai_logprobs.h"
#include "coordinator/openai_request.h"
#include "coordinator/stop_matcher.h"

namespace tp {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse json_response(const json& j, int status = 200) { return HttpResponse{status, "application/json", dump(j), {}}; }

double secs(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

uint64_t random_seed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

json usage_json(int64_t n_prompt, int64_t n_completion) {
  return {{"prompt_tokens", n_prompt}, {"completion_tokens", n_completion}, {"total_tokens", n_prompt + n_completion}};
}

}  // namespace

struct ApiHandlers::Generation {
  bool chat = false;
  GenerationParams params;
  std::vector<int32_t> prompt;
  std::string echo;  // completions with echo: the prompt text, emitted before the completion
};

std::string served_model_name(const std::string& configured_name, const std::string& model_path) {
  if (!configured_name.empty()) return configured_name;
  std::filesystem::path p(model_path);
  while (!p.empty() && !p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  std::string name = p.filename().string();
  if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.resize(name.size() - 5);
  static const std::regex kQuant(R"(\.(([IT]?Q\d[A-Za-z0-9_]*)|BF16|F16|F32|bf16|f16|f32))");
  std::smatch m;
  const auto dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) {
    const std::string tail = name.substr(dot);
    if (std::regex_match(tail, m, kQuant)) name.resize(dot);
  }
  return name.empty() ? model_path : name;
}

ApiHandlers::ApiHandlers(ApiConfig cfg, Engine& engine, const Tokenizer& tok, const ChatTemplate& chat,
                         ServerMetrics& metrics)
    : cfg_(std::move(cfg)), engine_(engine), tok_(tok), chat_(chat), metrics_(metrics),
      created_(int64_t(std::time(nullptr))) {}

void ApiHandlers::install(HttpServer& server) {
  server.route("POST", "/v1/completions", [this](const HttpRequest& r, ResponseStream& s) { return completions(r, s); });
  server.route("POST", "/v1/chat/completions",
               [this](const HttpRequest& r, ResponseStream& s) { return chat_completions(r, s); });
  server.route("GET", "/v1/models", [this](const HttpRequest& r, ResponseStream&) { return models(r); });
  server.route("POST", "/tokenize", [this](const HttpRequest& r, ResponseStream&) { return tokenize(r); });
  server.route("POST", "/detokenize", [this](const HttpRequest& r, ResponseStream&) { return detokenize(r); });
  server.route("GET", "/metrics", [this](const HttpRequest& r, ResponseStream&) { return metrics(r); });
  server.route("GET", "/health", [this](const HttpRequest&, ResponseStream&) {
    const std::string reason = cfg_.health ? cfg_.health() : std::string();
    if (!reason.empty()) return json_response({{"status", "unhealthy"}, {"reason", reason}}, 503);
    return json_response({{"status", "ok"}});
  });
  server.add_access_hook([this](const AccessRecord& r) { metrics_.observe_http(r.status); });
}

void ApiHandlers::abort_all() {
  std::lock_guard lk(mu_);
  for (int64_t id : in_flight_) engine_.abort(id);
}

int64_t ApiHandlers::n_in_flight() const {
  std::lock_guard lk(mu_);
  return int64_t(in_flight_.size());
}

void ApiHandlers::check_auth(const HttpRequest& req) const {
  if (cfg_.api_key.empty()) return;
  if (req.header("authorization") != "Bearer " + cfg_.api_key) throw ApiException(unauthorized());
}

void ApiHandlers::check_model(const std::string& model) const {
  if (!model.empty() && model != cfg_.model_name) throw ApiException(model_not_found(model));
}

HttpResponse ApiHandlers::completions(const HttpRequest& req, ResponseStream& out) {
  check_auth(req);
  CompletionRequest c = parse_completion_body(req.body);
  check_model(c.params.model);
  Generation g;
  g.params = std::move(c.params);
  if (c.prompt.is_tokens) {
    g.prompt = c.prompt.tokens;
    for (int32_t t : g.prompt)
      if (t >= tok_.vocab_size())
        throw ApiException(bad_request("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                           std::to_string(tok_.vocab_size()) + ")",
                                       "prompt"));
    if (c.echo) g.echo = tok_.decode(g.prompt, false);
  } else {
    g.prompt = tok_.encode(c.prompt.text, tok_.add_bos(), true);
    if (c.echo) g.echo = c.prompt.text;
  }
  return generate(g, out);
}

HttpResponse ApiHandlers::chat_completions(const HttpRequest& req, ResponseStream& out) {
  check_auth(req);
  ChatCompletionRequest c = parse_chat_completion_body(req.body);
  check_model(c.params.model);
  Generation g;
  g.chat = true;
  g.params = std::move(c.params);
  g.prompt = tok_.encode(chat_.render(c.messages, c.add_generation_prompt), false, true);
  return generate(g, out);
}

// What one choice of a generation has produced so far (one per index, on the connection's thread).
struct ApiHandlers::ChoiceState {
  ChoiceState(const Tokenizer& tok, const std::vector<std::string>& stops) : dec(tok, false), stop(stops) {}
  IncrementalDecoder dec;
  StopMatcher stop;
  std::string text;        // non-streaming: the whole completion (echo included)
  std::string finish;      // "" while running
  int64_t n_generated = 0;
  int64_t n_decoded = 0;   // characters (code points) decoded so far, echo included (completions' text_offset)
  json logprobs;           // non-streaming: the choice's logprobs object, built up token by token
  SteadyTime prev{};       // when its previous token came (inter-token latency); epoch before the first
};

HttpResponse ApiHandlers::generate(Generation& g, ResponseStream& out) {
  const GenerationParams& p = g.params;
  const int64_t n_prompt = int64_t(g.prompt.size());
  if (n_prompt == 0) throw ApiException(bad_request("the prompt encodes to no tokens", g.chat ? "messages" : "prompt"));
  if (n_prompt >= cfg_.max_context)
    throw ApiException(bad_request("This model's maximum context length is " + std::to_string(cfg_.max_context) +
                                       " tokens; the prompt has " + std::to_string(n_prompt) +
                                       " tokens, leaving no room for a completion",
                                   g.chat ? "messages" : "prompt", "context_length_exceeded"));

  Request r;
  r.prompt = g.prompt;
  r.sampling = p.sampling;
  r.sampling.seed = p.seed ? *p.seed : random_seed();
  r.n = p.n;
  r.max_tokens = p.max_tokens.value_or(cfg_.max_context - n_prompt);
  r.ignore_eos = p.ignore_eos;
  auto queue = std::make_shared<OutputQueue>();  // outlives this handler when the engine still delivers
  r.on_output = [queue](const RequestOutput& o) { queue->push(o); };
  const auto t_submit = std::chrono::steady_clock::now();
  int64_t id;
  try {
    id = engine_.submit(std::move(r));
  } catch (const QueueFullError& e) {
    throw ApiException(rate_limited(e.what()));
  } catch (const InputError& e) {
    const std::string msg = e.what();
    const bool ctx = msg.find("max context") != std::string::npos || msg.find("whole pool") != std::string::npos;
    const bool n_param = msg.rfind("n must be", 0) == 0;
    throw ApiException(bad_request(msg, ctx ? "max_tokens" : n_param ? "n" : "", ctx ? "context_length_exceeded" : ""));
  }
  {
    std::lock_guard lk(mu_);
    in_flight_.insert(id);
  }
  struct Untrack {
    ApiHandlers* self;
    int64_t id;
    ~Untrack() {
      std::lock_guard lk(self->mu_);
      self->in_flight_.erase(id);
    }
  } untrack{this, id};

  const std::string rid = (g.chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
  const int64_t created = int64_t(std::time(nullptr));
  const std::string object = g.chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [&](int32_t index, const std::string& text, const json& finish_reason, const json& logprobs,
                   bool role = false) {
    json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
    if (g.chat) {
      json delta = json::object();
      if (role) delta["role"] = "assistant";
      if (role || !text.empty()) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    return sse_event(dump({{"id", rid}, {"object", object}, {"created", created}, {"model", cfg_.model_name},
                           {"choices", json::array({choice})}}));
  };

  std::vector<std::unique_ptr<ChoiceState>> choices;
  for (int32_t i = 0; i < p.n; ++i) {
    choices.push_back(std::make_unique<ChoiceState>(tok_, p.stop));
    choices.back()->n_decoded = utf8_chars(g.echo);
  }
  const bool stream = p.stream;
  const bool want_logprobs = p.sampling.logprobs >= 0;
  const TokenPiece piece_of = [this](int32_t t) { return tok_.token_to_piece(t); };
  bool client_gone = false;
  if (stream) {
    client_gone = !out.start(200, "text/event-stream");
    for (int32_t i = 0; i < p.n && !client_gone; ++i) {
      if (g.chat) client_gone = !out.write(chunk(i, "", nullptr, nullptr, true));
      if (!client_gone && !g.echo.empty()) client_gone = !out.write(chunk(i, g.echo, nullptr, nullptr));
    }
  } else {
    for (auto& c : choices) c->text = g.echo;
  }

  int32_t n_open = p.n;
  std::string error;
  bool first = true;  // TTFT: the first token of any choice
  double ttft_s = -1;
  while (!client_gone && n_open > 0) {
    std::optional<RequestOutput> o = queue->pop(std::chrono::milliseconds(50));
    if (!o) {
      if (out.peer_closed()) client_gone = true;
      continue;
    }
    if (o->index < 0 || o->index >= p.n) continue;
    ChoiceState& c = *choices[size_t(o->index)];
    if (!c.finish.empty()) continue;  // stopped by a stop string; the engine's abort output follows
    if (!o->new_tokens.empty()) {
      const int64_t n = int64_t(o->new_tokens.size());
      if (first) {
        ttft_s = secs(o->times.first_token - o->times.arrival);
        metrics_.observe_ttft(ttft_s);
        first = false;
      }
      if (c.prev != SteadyTime{}) metrics_.observe_itl(secs(o->times.last_token - c.prev) / double(n), n);
      c.prev = o->times.last_token;
    }
    c.n_generated = o->n_generated;
    std::string piece;
    json lp;  // this delivery's logprobs (streaming)
    for (size_t k = 0; k < o->new_tokens.size(); ++k) {
      const int32_t t = o->new_tokens[k];
      if (!p.ignore_eos && tok_.is_eog(t)) continue;
      const std::string decoded = c.dec.push(t);
      if (want_logprobs && k < o->logprobs.size())
        append_logprobs(stream ? lp : c.logprobs, g.chat, piece_of, t, o->logprobs[k], c.n_decoded);
      c.n_decoded += utf8_chars(decoded);
      StopMatcher::Result sr = c.stop.push(decoded);
      piece += sr.text;
      if (sr.stopped) {
        c.finish = "stop";
        break;
      }
    }
    if (c.finish.empty() && o->finished) {
      StopMatcher::Result sr = c.stop.push(c.dec.flush());
      piece += sr.text;
      piece += c.stop.flush();
      c.finish = sr.stopped ? "stop" : std::string(finish_reason_name(o->finish_reason));
      if (o->finish_reason == FinishReason::Error) error = o->error;
    }
    if (!c.finish.empty() && !o->finished) engine_.abort(id, o->index);  // a stop string: end this choice
    if (stream) {
      if ((!piece.empty() || !lp.is_null()) && !out.write(chunk(o->index, piece, nullptr, lp))) client_gone = true;
      if (!client_gone && !c.finish.empty() && c.finish != "error" && !out.write(chunk(o->index, "", c.finish, nullptr)))
        client_gone = true;
    } else {
      c.text += piece;
    }
    if (!c.finish.empty()) --n_open;
  }
  int64_t n_generated = 0;
  bool errored = false;
  for (const auto& c : choices) {
    n_generated += c->n_generated;
    errored = errored || c->finish == "error";
  }
  auto logged = [&](HttpResponse r) {  // the access log's view of this request
    r.log.request_id = rid;
    r.log.n_prompt_tokens = n_prompt;
    r.log.n_output_tokens = n_generated;
    r.log.ttft_s = ttft_s;
    return r;
  };
  if (client_gone) {
    engine_.abort(id);
    metrics_.observe_finished(secs(std::chrono::steady_clock::now() - t_submit), "abort");
    HttpResponse r = logged(HttpResponse{499, "application/json", "", {}});  // nobody reads it
    r.log.error = "the client went away; request aborted";
    return r;
  }
  const std::string finish = errored ? "error" : choices[0]->finish;  // the request's, for the metrics
  metrics_.observe_finished(secs(std::chrono::steady_clock::now() - t_submit), finish);

  if (finish == "error") {
    engine_.abort(id);
    const ApiError e = internal_error("generation failed: " + error);
    if (!stream) throw ApiException(e);
    out.write(sse_event(to_json(e)));
    out.write(sse_event("[DONE]"));
    HttpResponse r = logged({});
    r.log.error = e.message;
    return r;
  }
  if (stream) {
    if (p.include_usage)
      out.write(sse_event(dump({{"id", rid}, {"object", object}, {"created", created}, {"model", cfg_.model_name},
                                {"choices", json::array()}, {"usage", usage_json(n_prompt, n_generated)}})));
    out.write(sse_event("[DONE]"));
    return logged({});
  }
  json out_choices = json::array();
  for (int32_t i = 0; i < p.n; ++i) {
    ChoiceState& c = *choices[size_t(i)];
    json choice = {{"index", i}, {"logprobs", c.logprobs}, {"finish_reason", c.finish}};
    if (want_logprobs && c.logprobs.is_null()) choice["logprobs"] = empty_logprobs(g.chat);  // no token in the text
    if (g.chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    out_choices.push_back(std::move(choice));
  }
  return logged(json_response({{"id", rid},
                               {"object", g.chat ? "chat.completion" : "text_completion"},
                               {"created", created},
                               {"model", cfg_.model_name},
                               {"choices", out_choices},
                               {"usage", usage_json(n_prompt, n_generated)}}));
}

HttpResponse ApiHandlers::models(const HttpRequest& req) {
  check_auth(req);
  json m = {{"id", cfg_.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "tpserve"},
            {"root", cfg_.model_name}, {"parent", nullptr}, {"max_model_len", cfg_.max_context}};
  return json_response({{"object", "list"}, {"data", json::array({m})}});
}

HttpResponse ApiHandlers::tokenize(const HttpRequest& req) {
  const TokenizeRequest t = parse_tokenize_body(req.body);
  check_model(t.model);
  std::vector<int32_t> ids;
  if (t.is_chat)
    ids = tok_.encode(chat_.render(t.messages, t.add_generation_prompt), t.add_special_tokens && tok_.add_bos(), true);
  else
    ids = tok_.encode(t.prompt, t.add_special_tokens && tok_.add_bos(), true);
  return json_response({{"count", ids.size()}, {"max_model_len", cfg_.max_context}, {"tokens", ids}});
}

HttpResponse ApiHandlers::detokenize(const HttpRequest& req) {
  const DetokenizeRequest d = parse_detokenize_body(req.body);
  check_model(d.model);
  for (int32_t t : d.tokens)
    if (t >= tok_.vocab_size())
      throw ApiException(bad_request("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                         std::to_string(tok_.vocab_size()) + ")",
                                     "tokens"));
  return json_response({{"prompt", tok_.decode(d.tokens, true)}});
}

HttpResponse ApiHandlers::metrics(const HttpRequest&) {
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(engine_.metrics()), {}};
}

}  // namespace tp
