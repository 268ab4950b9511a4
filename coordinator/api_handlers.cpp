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
#include "coordinator/responses_api.h"
#include "coordinator/tool_call_response.h"

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
  route("POST", "/v1/responses", [this](const HttpRequest& r, ResponseStream& s) { return responses(r, s); });
  route("POST", "/v1/kv/export", [this](const HttpRequest& r, ResponseStream&) { return kv_export(r); });
  route("POST", "/v1/kv/release", [this](const HttpRequest& r, ResponseStream&) { return kv_release(r); });
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

void ApiHandlers::fail_all(const std::string& error) { in_flight_.fail_all(error); }

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
  GenerationJob job = completion_job(std::move(c), tok_, cfg_.max_context);
  compile_constraint(job);
  attach_kv_imports(req.body, job);
  return generate(job, out);
}

HttpResponse ApiHandlers::chat_completions(const HttpRequest& req, ResponseStream& out) {
  check_auth(req);
  ChatCompletionRequest c = parse_chat_completion_body(req.body);
  check_model(c.params.model);
  GenerationJob job = chat_job(std::move(c), tok_, chat_, cfg_.max_context);
  compile_constraint(job);
  attach_kv_imports(req.body, job);
  return generate(job, out);
}

void ApiHandlers::compile_constraint(GenerationJob& job) {
  if (!job.params.constraint.active()) return;
  std::call_once(grammar_compiler_once_, [this] {
    grammar_compiler_ = std::make_unique<StructuredOutputCompiler>(tok_, tok_.vocab_size());
  });
  job.grammar = grammar_compiler_->compile(job.params.constraint);
}

HttpResponse ApiHandlers::responses(const HttpRequest& req, ResponseStream& out) {
  check_auth(req);
  const json body = parse_json_body(req.body);
  ChatCompletionRequest c = parse_chat_completion_request(responses_to_chat_body(body));
  check_model(c.params.model);
  const std::string id = "resp_" + random_hex(24);
  const json instructions = body.value("instructions", json(nullptr));
  GenerationJob job = chat_job(std::move(c), tok_, chat_, cfg_.max_context);
  compile_constraint(job);
  if (job.params.stream) {
    ResponsesStream events(out, id, cfg_.model_name, int64_t(std::time(nullptr)), instructions);
    return generate(job, events);
  }
  HttpResponse r = generate(job, out);
  if (r.status == 200) r.body = dump(chat_to_response(json::parse(r.body), id, instructions));
  return r;
}

namespace {

// A job's engine requests, one per prompt, submitted with their outputs into one queue.
struct Submitted {
  std::shared_ptr<OutputQueue> queue = std::make_shared<OutputQueue>();  // outlives the handler if need be
  std::vector<std::unique_ptr<RequestHandle>> handles;                  // [prompt]
  std::unordered_map<int64_t, size_t> prompt_of;                        // engine request id -> prompt index
  std::vector<int64_t> max_tokens;                                      // [prompt] as submitted
  int64_t n_prompt_tokens = 0;
};

// Submits every prompt; a refusal (429) aborts those already submitted (their handles go out of scope).
Submitted submit_all(const GenerationJob& job, uint64_t seed, int64_t max_context, Engine& engine,
                     InFlightRequests& in_flight) {
  Submitted s;
  for (size_t j = 0; j < job.prompts.size(); ++j) {
    Request r = job.engine_request(j, seed, max_context);
    if (j < job.kv_imports.size()) r.kv_import = job.kv_imports[j];
    s.max_tokens.push_back(r.max_tokens);
    try {
      s.handles.push_back(std::make_unique<RequestHandle>(engine, in_flight, std::move(r), s.queue));
    } catch (const QueueFullError& e) {
      throw ApiException(rate_limited(e.what()));
    }
    s.prompt_of[s.handles.back()->id()] = j;
    s.n_prompt_tokens += int64_t(job.prompts[j].tokens.size());
  }
  return s;
}

// One ChoiceStream per choice, in OpenAI index order (prompt j's choice i at j * n + i).
std::vector<std::unique_ptr<ChoiceStream>> make_choices(const GenerationJob& job, const Tokenizer& tok) {
  const GenerationParams& p = job.params;
  std::vector<std::unique_ptr<ChoiceStream>> choices;
  for (const JobPrompt& jp : job.prompts)
    for (int32_t i = 0; i < p.n; ++i) {
      ChoiceOptions o;
      o.chat = job.chat;
      o.ignore_eos = p.ignore_eos;
      o.stop = p.stop;
      o.want_logprobs = p.sampling.logprobs >= 0;
      o.echo = jp.echo;
      o.continued_chars = jp.continued_chars;
      o.echo_logprobs = job.echo_logprobs;
      o.prompt_logprobs = p.prompt_logprobs.value_or(-1);
      if (o.echo_logprobs >= 0 || o.prompt_logprobs >= 0) o.prompt = jp.tokens;
      choices.push_back(std::make_unique<ChoiceStream>(tok, std::move(o)));
    }
  return choices;
}

// The latency metrics of a job's choices: TTFT and inter-token latency as outputs arrive, one finished request
// per prompt at the end (as vLLM counts a batch), and the first token of any choice for the access log.
class ChoiceTimings {
 public:
  ChoiceTimings(size_t n_choices, SteadyTime submitted)
      : times_(n_choices, RequestTimes{submitted, {}, {}, {}}), ended_(n_choices) {}

  // Output `o` of choice `index`, which is still open.
  void observe(ServerMetrics& m, size_t index, const RequestOutput& o) {
    if (!o.new_tokens.empty()) {
      const int64_t n_new = int64_t(o.new_tokens.size());
      if (ttft_s_ < 0) ttft_s_ = secs(o.times.first_token - o.times.arrival);
      if (times_[index].first_token == SteadyTime{})
        m.observe_ttft(secs(o.times.first_token - o.times.arrival));
      else
        m.observe_itl(secs(o.times.last_token - times_[index].last_token) / double(n_new), n_new);
    }
    times_[index] = o.times;
  }
  void ended(size_t index) { ended_[index] = std::chrono::steady_clock::now(); }
  // One FinishedRequestStats per prompt; a choice still open (the client left) counts as an abort.
  void report(ServerMetrics& m, const GenerationJob& job, const Submitted& s,
              const std::vector<std::unique_ptr<ChoiceStream>>& choices) const {
    const size_t n = size_t(job.params.n);
    for (size_t j = 0; j < job.prompts.size(); ++j) {
      FinishedRequestStats stats{int64_t(job.prompts[j].tokens.size()), s.max_tokens[j], {}};
      for (size_t i = j * n; i < (j + 1) * n; ++i) {
        const ChoiceStream& c = *choices[i];
        stats.choices.push_back({c.finished() ? c.finish_reason() : "abort", c.n_generated(), times_[i], ended_[i]});
      }
      m.observe_finished(stats);
    }
  }
  double ttft_s() const { return ttft_s_; }  // -1: no token yet

 private:
  std::vector<RequestTimes> times_;  // [choice] its latest output's times
  std::vector<SteadyTime> ended_;    // [choice] when it ended
  double ttft_s_ = -1;
};

}  // namespace

HttpResponse ApiHandlers::generate(const GenerationJob& job, ResponseStream& out) {
  const GenerationParams& p = job.params;
  const uint64_t seed = p.seed ? *p.seed : random_seed();
  Submitted sub = submit_all(job, seed, cfg_.max_context, engine_, in_flight_);
  std::vector<std::unique_ptr<ChoiceStream>> choices = make_choices(job, tok_);
  ChoiceTimings timings(choices.size(), std::chrono::steady_clock::now());
  const ResponseHeader header{(job.chat ? "chatcmpl-" : "cmpl-") + random_hex(24), int64_t(std::time(nullptr)),
                              cfg_.model_name, job.chat, p.return_token_ids};
  SseWriter sse(out, header);
  const ToolCallIdFn new_call_id = [] { return "call_" + random_hex(24); };
  std::optional<ToolCallStreams> tool_streams;  // tools with tool_choice auto: calls parsed from the output
  if (job.tool_syntax && p.stream) tool_streams.emplace(*job.tool_syntax, job.tools, choices.size(), new_call_id);
  if (tool_streams && job.n_continued > 0) tool_streams->prime(0, job.continued_text);  // a resumed stream (n = 1)
  bool client_gone = false;
  if (p.stream) {
    client_gone = !sse.start();
    for (int32_t i = 0; job.chat && i < job.n_choices() && !client_gone; ++i) client_gone = !sse.role(i);
  }

  // Each output to its choice; stream the deltas; until every choice ended or the client went away.
  int64_t n_open = job.n_choices();
  while (!client_gone && n_open > 0) {
    std::optional<RequestOutput> o = sub.queue->pop(std::chrono::milliseconds(50));
    if (!o) {
      client_gone = out.peer_closed();
      continue;
    }
    const auto it = sub.prompt_of.find(o->request_id);
    if (it == sub.prompt_of.end() || o->index < 0 || o->index >= p.n) continue;
    const size_t index = it->second * size_t(p.n) + size_t(o->index);
    ChoiceStream& c = *choices[index];
    const bool was_open = !c.finished();
    if (was_open) timings.observe(metrics_, index, *o);
    const ChoiceDelta d = c.push(*o);
    if (d.stopped_by_string) sub.handles[it->second]->abort(o->index);
    if (p.stream && !(tool_streams ? tool_streams->delta(sse, int32_t(index), d) : sse.delta(int32_t(index), d)))
      client_gone = true;
    if (was_open && c.finished()) {
      --n_open;
      timings.ended(index);
    }
  }
  timings.report(metrics_, job, sub, choices);
  if (std::all_of(choices.begin(), choices.end(), [](const auto& c) { return c->engine_done(); }))
    for (auto& h : sub.handles) h->set_finished();  // else the handles abort what still runs

  int64_t n_generated = 0;
  for (const auto& c : choices) n_generated += c->n_generated();
  const auto logged = [&](HttpResponse r, std::string error = {}) {  // the access log's view of this request
    r.log = {header.id, sub.n_prompt_tokens, n_generated, timings.ttft_s(), std::move(error), p.ignored_fields};
    return r;
  };
  const auto failed =
      std::find_if(choices.begin(), choices.end(), [](const auto& c) { return c->finish_reason() == "error"; });
  if (client_gone) return logged(HttpResponse{499, "application/json", "", {}}, "the client went away; request aborted");
  if (failed != choices.end()) {
    const ApiError e = service_unavailable("generation failed: " + (*failed)->error());
    if (!p.stream) throw ApiException(e);
    sse.error(e);
    sse.done();
    return logged({}, e.message);
  }
  if (!p.stream) {
    json body = final_response(header, choices, sub.n_prompt_tokens);
    if (job.n_continued > 0)
      body["usage"] = usage_json(sub.n_prompt_tokens - job.n_continued, n_generated + job.n_continued);
    if (job.tool_syntax) apply_tool_calls(body, *job.tool_syntax, job.tools, new_call_id);
    return logged(json_response(body));
  }
  // A continuation's earlier output is completion tokens, as on the unbroken run.
  if (p.include_usage) sse.usage(sub.n_prompt_tokens - job.n_continued, n_generated + job.n_continued);
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
