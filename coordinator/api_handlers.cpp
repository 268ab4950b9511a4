#include "coordinator/api_handlers.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/token_ids.h"
#include "common/version.h"
#include "coordinator/choice_stream.h"
#include "coordinator/openai_request.h"
#include "coordinator/openai_response.h"

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

// A route whose FieldErrors (a field of the request at fault, found past parsing) become OpenAI 400s.
HttpHandler field_errors_as_400(HttpHandler h) {
  return [h = std::move(h)](const HttpRequest& r, ResponseStream& s) {
    try {
      return h(r, s);
    } catch (const FieldError& e) {
      throw ApiException(bad_request(e.what(), e.field, e.code));
    }
  };
}

}  // namespace

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
  const auto route = [&](const char* method, const char* path, HttpHandler h) {
    server.route(method, path, field_errors_as_400(std::move(h)));
  };
  route("POST", "/v1/completions", [this](const HttpRequest& r, ResponseStream& s) { return completions(r, s); });
  route("POST", "/v1/chat/completions", [this](const HttpRequest& r, ResponseStream& s) { return chat_completions(r, s); });
  route("GET", "/v1/models", [this](const HttpRequest& r, ResponseStream&) { return models(r); });
  route("POST", "/tokenize", [this](const HttpRequest& r, ResponseStream&) { return tokenize(r); });
  route("POST", "/detokenize", [this](const HttpRequest& r, ResponseStream&) { return detokenize(r); });
  route("GET", "/tokenizer_info", [this](const HttpRequest& r, ResponseStream&) { return tokenizer_info(r); });
  route("GET", "/version", [](const HttpRequest&, ResponseStream&) {
    const BuildInfo& b = build_info();
    return json_response({{"version", b.version}, {"commit", b.commit}, {"build_type", b.build_type}});
  });
  route("GET", "/metrics", [this](const HttpRequest& r, ResponseStream&) { return metrics(r); });
  route("GET", "/health", [this](const HttpRequest&, ResponseStream&) {
    const std::string reason = cfg_.health ? cfg_.health() : std::string();
    if (!reason.empty()) return json_response({{"status", "unhealthy"}, {"reason", reason}}, 503);
    return json_response({{"status", "ok"}});
  });
  server.add_access_hook([this](const AccessRecord& r) { metrics_.observe_http(r.status); });
}

void ApiHandlers::abort_all() { in_flight_.abort_all(engine_); }

int64_t ApiHandlers::n_in_flight() const { return in_flight_.size(); }

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
  return generate(completion_job(std::move(c), tok_, cfg_.max_context), out);
}

HttpResponse ApiHandlers::chat_completions(const HttpRequest& req, ResponseStream& out) {
  check_auth(req);
  ChatCompletionRequest c = parse_chat_completion_body(req.body);
  check_model(c.params.model);
  return generate(chat_job(std::move(c), tok_, chat_, cfg_.max_context), out);
}

HttpResponse ApiHandlers::generate(const GenerationJob& job, ResponseStream& out) {
  const GenerationParams& p = job.params;
  const int32_t n = p.n;
  // Submit every prompt; a refusal aborts those already submitted (their handles go out of scope).
  auto queue = std::make_shared<OutputQueue>();  // outlives this handler while the engine still delivers
  const uint64_t seed = p.seed ? *p.seed : random_seed();
  const auto t_submit = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<RequestHandle>> handles;
  std::unordered_map<int64_t, size_t> prompt_of;  // engine request id -> prompt index
  int64_t n_prompt_tokens = 0;
  for (size_t j = 0; j < job.prompts.size(); ++j) {
    try {
      handles.push_back(std::make_unique<RequestHandle>(engine_, in_flight_, job.engine_request(j, seed, cfg_.max_context), queue));
    } catch (const QueueFullError& e) {
      throw ApiException(rate_limited(e.what()));
    }
    prompt_of[handles.back()->id()] = j;
    n_prompt_tokens += int64_t(job.prompts[j].tokens.size());
  }

  std::vector<std::unique_ptr<ChoiceStream>> choices;
  for (const JobPrompt& jp : job.prompts)
    for (int32_t i = 0; i < n; ++i) {
      ChoiceOptions o;
      o.chat = job.chat;
      o.ignore_eos = p.ignore_eos;
      o.stop = p.stop;
      o.want_logprobs = p.sampling.logprobs >= 0;
      o.echo = jp.echo;
      o.echo_logprobs = job.echo_logprobs;
      o.prompt_logprobs = p.prompt_logprobs.value_or(-1);
      if (o.echo_logprobs >= 0 || o.prompt_logprobs >= 0) o.prompt = jp.tokens;
      choices.push_back(std::make_unique<ChoiceStream>(tok_, std::move(o)));
    }

  const ResponseHeader header{(job.chat ? "chatcmpl-" : "cmpl-") + random_hex(24), int64_t(std::time(nullptr)),
                              cfg_.model_name, job.chat};
  SseWriter sse(out, header);
  bool client_gone = false;
  if (p.stream) {
    client_gone = !sse.start();
    for (int32_t i = 0; job.chat && i < job.n_choices() && !client_gone; ++i) client_gone = !sse.role(i);
  }

  // Per choice, for the metrics: its latest output's times and when it ended.
  std::vector<RequestTimes> times(choices.size(), RequestTimes{t_submit, {}, {}, {}});
  std::vector<SteadyTime> ended(choices.size());
  double ttft_s = -1;  // the first token of any choice (the access log)
  int64_t n_open = job.n_choices();
  while (!client_gone && n_open > 0) {
    std::optional<RequestOutput> o = queue->pop(std::chrono::milliseconds(50));
    if (!o) {
      client_gone = out.peer_closed();
      continue;
    }
    const auto it = prompt_of.find(o->request_id);
    if (it == prompt_of.end() || o->index < 0 || o->index >= n) continue;
    const size_t index = it->second * size_t(n) + size_t(o->index);
    ChoiceStream& c = *choices[index];
    if (!o->new_tokens.empty() && !c.finished()) {
      const int64_t n_new = int64_t(o->new_tokens.size());
      if (ttft_s < 0) ttft_s = secs(o->times.first_token - o->times.arrival);
      if (times[index].first_token == SteadyTime{})
        metrics_.observe_ttft(secs(o->times.first_token - o->times.arrival));
      else
        metrics_.observe_itl(secs(o->times.last_token - times[index].last_token) / double(n_new), n_new);
    }
    if (!c.finished()) times[index] = o->times;
    const bool was_open = !c.finished();
    const ChoiceDelta d = c.push(*o);
    if (d.stopped_by_string) handles[it->second]->abort(o->index);
    if (p.stream && !sse.delta(int32_t(index), d)) client_gone = true;
    if (was_open && c.finished()) {
      --n_open;
      ended[index] = std::chrono::steady_clock::now();
    }
  }
  // One finished request per prompt, as vLLM counts a batch; a choice still open when the client left is an abort.
  for (size_t j = 0; j < job.prompts.size(); ++j) {
    FinishedRequestStats stats{int64_t(job.prompts[j].tokens.size()), job.engine_request(j, seed, cfg_.max_context).max_tokens, {}};
    for (int32_t i = 0; i < n; ++i) {
      const size_t index = j * size_t(n) + size_t(i);
      const ChoiceStream& c = *choices[index];
      stats.choices.push_back({c.finished() ? c.finish_reason() : "abort", c.n_generated(), times[index], ended[index]});
    }
    metrics_.observe_finished(stats);
  }
  const bool all_done = std::all_of(choices.begin(), choices.end(), [](const auto& c) { return c->engine_done(); });
  for (size_t j = 0; j < handles.size() && all_done; ++j) handles[j]->set_finished();

  int64_t n_generated = 0;
  for (const auto& c : choices) n_generated += c->n_generated();
  ResponseLog log;  // the access log's view of this request
  log.request_id = header.id;
  log.n_prompt_tokens = n_prompt_tokens;
  log.n_output_tokens = n_generated;
  log.ttft_s = ttft_s;
  log.ignored_fields = p.ignored_fields;
  const auto logged = [&log](HttpResponse r, std::string error = {}) {
    r.log = log;
    r.log.error = std::move(error);
    return r;
  };
  const auto failed = std::find_if(choices.begin(), choices.end(), [](const auto& c) { return c->finish_reason() == "error"; });
  if (client_gone)  // nobody reads it; the handles abort the engine requests
    return logged(HttpResponse{499, "application/json", "", {}}, "the client went away; request aborted");
  if (failed != choices.end()) {
    const ApiError e = internal_error("generation failed: " + (*failed)->error());
    if (!p.stream) throw ApiException(e);
    sse.error(e);
    sse.done();
    return logged({}, e.message);
  }
  if (!p.stream) return logged(json_response(final_response(header, choices, n_prompt_tokens)));
  if (p.include_usage) sse.usage(n_prompt_tokens, n_generated);
  sse.done();
  return logged({});
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
  check_token_ids(d.tokens, tok_.vocab_size(), "tokens");
  return json_response({{"prompt", tok_.decode(d.tokens, true)}});
}

HttpResponse ApiHandlers::tokenizer_info(const HttpRequest& req) {
  check_auth(req);
  const auto text = [this](int32_t id) { return id >= 0 ? json(tok_.token_to_piece(id)) : json(nullptr); };
  return json_response({{"tokenizer_class", "byte-level BPE (pre-tokenizer " + tok_.pre() + ")"},
                        {"model", cfg_.model_name},
                        {"vocab_size", tok_.vocab_size()},
                        {"bos_token", text(tok_.bos_id())},
                        {"bos_token_id", tok_.bos_id()},
                        {"eos_token", text(tok_.eos_id())},
                        {"eos_token_id", tok_.eos_id()},
                        {"pad_token", nullptr},
                        {"add_bos_token", tok_.add_bos()},
                        {"add_eos_token", false},
                        {"model_max_length", cfg_.max_context},
                        {"chat_template", cfg_.chat_template.empty() ? json(nullptr) : json(cfg_.chat_template)}});
}

HttpResponse ApiHandlers::metrics(const HttpRequest&) {
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(engine_.metrics()), {}};
}

}  // namespace tp
