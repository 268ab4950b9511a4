// `tpserve serve`: the OpenAI-compatible HTTP server over one TP group. Followers run their Worker loop; the
// leader runs the engine on one dedicated thread (the only thread making MPI calls) and the HTTP server
// (coordinator/http_server.h, api_handlers.h) on its own threads. SIGINT / SIGTERM: stop accepting, let
// in-flight requests finish until server.shutdown_deadline_s, abort the rest, shut the ranks down, exit 0.
// An engine failure (a rank died and MPI said so) fails in-flight requests and exits 1. A rank that died
// without MPI noticing (shared memory: the leader waits in a collective forever) is seen by the peer watch
// (launch/peer_watch.h, local ranks, every 200 ms); a rank alive but stuck leaves a step without progress (no
// layer finishes): past server.step_timeout_s of that, /health answers 503. Either way the leader ends every
// in-flight request itself (an error event + [DONE] on streams, 503 JSON otherwise; ApiHandlers::fail_all —
// the stuck engine thread cannot), gives the handlers up to 2 s to write them, and aborts the job (MPI_Abort,
// exit 3) — a collective cannot be cancelled, and a server that hangs forever helps nobody. A long step that
// keeps finishing layers is healthy. launch/start runs serve with orte_abort_on_non_zero_status off so mpirun
// does not kill the leader first.
// The leader binds server.host:server.port before the model loads (a taken port fails at once). It logs one
// access line per request and a periodic stats line (launch/serve_log.h) on stderr, as text or JSON lines
// (--log-format / server.log_format).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/log.h"
#include "coordinator/api_handlers.h"
#include "coordinator/chat_template.h"
#include "coordinator/tool_call_parser.h"
#include "coordinator/engine.h"
#include "coordinator/http_server.h"
#include "coordinator/kv_fetch_client.h"
#include "kvstore/kv_transfer.h"
#include "coordinator/metrics.h"
#include "coordinator/tokenizer.h"
#include "launch/server_setup.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_group.h"
#include "launch/model_options.h"
#include "launch/peer_watch.h"
#include "launch/serve_log.h"
#include "launch/worker_executor.h"
#include "kvstore/kv_event_publisher.h"
#include "parallel/mpi_communicator.h"

namespace tp {
namespace {

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// This process's MPI world rank from the launcher's environment (0 when not under MPI): known before MPI_Init.
int world_rank_from_env() {
  if (!launched_by_mpi()) return 0;
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

// Each line of a multi-line report as one info line.
void log_lines(Logger& log, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) log.info(line);
}

// Every rank: its KV transfer agent (null, with a warning, when UCX cannot start here) and the UCX addresses of
// every rank of the TP group in rank order (collective; empty when any rank has no agent).
std::vector<std::string> start_kv_transfer(ModelGroup& group, Logger& log, std::unique_ptr<KvTransferAgent>& agent) {
  try {
    if (group.pool && group.pool->host()) agent = std::make_unique<KvTransferAgent>(*group.pool);
  } catch (const std::exception& e) {
    log.warn(std::string("KV transfer between replicas is off on this rank: ") + e.what());
  }
  group.worker->set_kv_agent(agent.get());
  const std::string mine = agent ? agent->address() : std::string();
  if (!group.tp_comm || group.tp_comm->size() == 1) return mine.empty() ? std::vector<std::string>{} : std::vector{mine};
  Communicator& comm = *group.tp_comm;
  const size_t n = size_t(comm.size());
  uint64_t len = mine.size();
  std::vector<uint64_t> lens(n);
  comm.all_gather(&len, sizeof len, lens.data());
  uint64_t longest = 0;
  for (uint64_t l : lens) longest = std::max(longest, l);
  std::string padded = mine;
  padded.resize(size_t(longest), '\0');
  std::string all(size_t(longest) * n, '\0');
  if (longest > 0) comm.all_gather(padded.data(), size_t(longest), all.data());
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) {
    if (lens[r] == 0) return {};
    out.push_back(all.substr(r * size_t(longest), size_t(lens[r])));
  }
  return out;
}

// The leader's start-up measurement of the UCX link for the fetch-or-recompute cost (kv_fetch_policy.h): a probe
// agent over a small pool of the same layout fetches up to 32 blocks from this rank's agent over loopback (the
// replicas of this machine share it). The second of two runs (the first sets up the connection).
void measure_kv_link(KvTransferAgent& agent, KvPool& pool, Engine& engine, Logger& log) {
  const int32_t n = int32_t(std::min<int64_t>(32, pool.shape().n_blocks));
  if (n == 0) return;
  std::vector<int32_t> blocks(static_cast<size_t>(n));
  std::vector<uint64_t> hashes(size_t(n), 0);
  for (int32_t i = 0; i < n; ++i) blocks[size_t(i)] = i;
  try {
    KvPoolShape shape = pool.shape();
    shape.n_blocks = n;
    KvTensorScales ones;  // a pool with tensor scales needs some; the probe's bytes are never read as K/V
    if (shape.tensor_scales) ones = {std::vector<float>(size_t(shape.n_layers), 1.0f), std::vector<float>(size_t(shape.n_layers), 1.0f)};
    KvPool probe_pool(shape, ones);
    KvTransferAgent probe(probe_pool);
    KvFetchStats st;
    for (int run = 0; run < 2; ++run) st = probe.fetch(agent.address(), blocks, blocks, hashes, std::chrono::seconds(5));
    engine.kv_policy().set_link(st.bytes, st.seconds);
    char line[200];
    std::snprintf(line, sizeof line, "KV transfer: UCX loopback %.0f MB/s (%d blocks, %.2f MB in %.2f ms)",
                  engine.kv_policy().link_bytes_per_s() / 1e6, int(n), double(st.bytes) / 1e6, st.seconds * 1e3);
    log.info(line);
  } catch (const std::exception& e) {
    log.warn(std::string("KV transfer: the start-up link measurement failed (keeping the prior): ") + e.what());
  }
}

}  // namespace

const CommandSpec& serve_spec() {
  static const Config d;  // the defaults without a config
  static const CommandSpec spec{
      "serve",
      "serve the OpenAI-compatible HTTP API (completions, chat, models, health, metrics) over one TP group",
      with(model_options(), {
          OptionSpec::computed("host", "H", "server.host of the config, else " + d.server.host, "address to listen on"),
          OptionSpec::computed("port", "N", "server.port of the config, else " + std::to_string(d.server.port),
                               "port to listen on; 0: any free port"),
          OptionSpec::computed("api-key", "K", "server.api_key of the config, else none",
                               "require `Authorization: Bearer K` on every request"),
          OptionSpec::computed("log-format", "text|json", "server.log_format of the config, else " + d.server.log_format,
                               "the server's log lines on stderr: plain text or one JSON object a line"),
          OptionSpec::flag("kv-events", "publish KV events over ZeroMQ (kv_events.enable; GET /kv_events says where)"),
      })};
  return spec;
}

int run_serve(const CliArgs& a) {
  int threads = 0;
  Config cfg = config_with_model_options(a, "serve", &threads);
  if (auto h = a.str("host")) cfg.server.host = *h;
  if (auto k = a.str("api-key")) cfg.server.api_key = *k;
  cfg.server.port = a.integer("port", cfg.server.port, 0, 65535);
  if (auto f = a.str("log-format")) cfg.server.log_format = *f;
  if (a.flag("kv-events")) cfg.kv_events.enable = true;
  Logger log(parse_log_format(cfg.server.log_format, "--log-format"));

  // SIGINT/SIGTERM are blocked in every thread (MPI's and ours inherit this mask) and taken by sigtimedwait
  // on the main thread below; a write to a closed client socket must not kill the process.
  const sigset_t sigs = block_stop_signals();
  const HttpServerOptions ho = http_server_options(cfg.server);
  // Bound before the model loads, so a taken port fails in a second, not after the weights are read.
  std::unique_ptr<HttpServer> server;
  if (world_rank_from_env() == 0) {
    server = std::make_unique<HttpServer>(ho);
    server->listen();
  }

  // JSON logs: the weight-loading lines are log lines too (text: a bar on a terminal, plain lines otherwise).
  std::function<void(const std::string&)> progress_line;
  if (cfg.server.log_format == "json") progress_line = [&log](const std::string& l) { log.info(l); };
  ModelGroup group(nullptr, nullptr, cfg, threads, std::move(progress_line));
  log.info(group.report());
  std::unique_ptr<KvTransferAgent> kv_agent;  // outlives the worker's serve loop and the engine thread
  const std::vector<std::string> kv_addresses = start_kv_transfer(group, log, kv_agent);
  if (!group.is_leader()) {
    server.reset();
    pthread_sigmask(SIG_UNBLOCK, &sigs, nullptr);
    group.worker->serve();
    return 0;
  }

  const Tokenizer tok(group.file->tokenizer());
  const auto token_text = [&tok](int32_t id) { return id >= 0 ? tok.token_to_piece(id) : std::string(); };
  // An unrecognized template is a start-up error (InputError, one line) unless the config names a style.
  const ChatTemplate chat = ChatTemplate::resolve(cfg.model.chat_template, group.file->tokenizer().chat_template,
                                                  token_text(tok.bos_id()), token_text(tok.eos_id()));
  log.info(chat.jinja() ? "chat template: the model's own (Jinja; tool calls parsed as " +
                              std::string(tool_call_syntax_name(detect_tool_call_syntax(chat.jinja()->source()))) + ")"
                        : "chat template: built-in " + std::string(chat_style_name(chat.style())) + " (fall-back)");

  // Every rank is up once the model loaded: the local ones are watched from here on.
  const PeerWatch peers = PeerWatch::local_siblings(world_rank_from_env());
  log.info("watching " + std::to_string(peers.peers().size()) + " local ranks for exits");

  EngineConfig ec = group.engine_config(cfg);
  ec.is_eog = [&tok](int32_t id) { return tok.is_eog(id); };
  WorkerExecutor executor(*group.worker);
  // KV events (kv_events.enable): recorded by the block manager, published after every step over ZeroMQ PUB in
  // vLLM's wire shape; GET /kv_events tells a router where to subscribe.
  BlockManagerOptions bm_options;
  std::unique_ptr<KvEventPublisher> kv_publisher;
  if (cfg.kv_events.enable) {
    bm_options.record_events = true;
    kv_publisher = std::make_unique<KvEventPublisher>(cfg.kv_events.endpoint, cfg.kv_events.topic);
    log.info("kv events: publishing on " + kv_publisher->endpoint());
  }
  Engine engine(ec, executor, std::move(bm_options));
  log_lines(log, engine.startup_report());
  if (kv_agent) measure_kv_link(*kv_agent, *group.pool, engine, log);
  log.info(kv_addresses.empty() ? "KV transfer between replicas: off"
                                : "KV transfer between replicas: on (UCX, " + std::to_string(kv_addresses.size()) +
                                      " rank addresses; POST /v1/kv/export)");
  KvFetchClient kv_client(group.tp_comm ? group.tp_comm->size() : 1, [&log](const std::string& l) { log.info(l); });

  const std::string name = served_model_name(cfg.model.name, cfg.model.path);
  ServerMetrics metrics({name, cfg.server.metrics_prefix, ec.scheduler.max_context, ec.scheduler.block_size,
                         ec.scheduler.prefix_caching, ec.kv_footprint.dtype, ec.kv_footprint.bytes_per_token,
                         ec.kv_footprint.block_bytes(ec.scheduler.block_size)});
  // The engine thread: the only thread that steps the engine (and so makes MPI calls).
  std::atomic<bool> engine_stop{false}, engine_failed{false};
  std::string engine_error;
  const double step_timeout_s = cfg.server.step_timeout_s;
  // A step is stuck when it makes no progress (no layer finished) for step_timeout_s, however long it runs.
  auto step_seconds = [&engine] { return std::chrono::duration<double>(engine.step_stalled_for()).count(); };
  ApiConfig api_cfg;
  api_cfg.model_name = name;
  api_cfg.api_key = cfg.server.api_key;
  api_cfg.max_context = ec.scheduler.max_context;
  api_cfg.chat_template = group.file->tokenizer().chat_template;
  api_cfg.kv_addresses = kv_addresses;
  api_cfg.kv_fetch = kv_addresses.empty() ? nullptr : &kv_client;
  api_cfg.health = [&]() -> std::string {
    if (engine_failed.load()) return "the engine failed";
    if (std::string dead = peers.first_dead(); !dead.empty()) return dead;
    if (step_timeout_s > 0 && step_seconds() > step_timeout_s)
      return "a step has made no progress for " + std::to_string(int64_t(step_seconds())) +
             " s (server.step_timeout_s = " +
             format_seconds(step_timeout_s) + "): a rank is not responding";
    return "";
  };
  ApiHandlers api(api_cfg, engine, tok, chat, metrics);
  if (!server) server = std::make_unique<HttpServer>(ho);
  struct StopServer {  // declared after api: the server's threads end before the handlers they call go away
    HttpServer& s;
    ~StopServer() { s.stop(); }
  } stop_server{*server};
  api.install(*server);
  const std::string kv_events_json =
      nlohmann::json{{"enabled", kv_publisher != nullptr},
                     {"endpoint", kv_publisher ? kv_publisher->endpoint() : ""},
                     {"topic", cfg.kv_events.topic},
                     {"block_size", ec.scheduler.block_size}}
          .dump();
  server->route("GET", "/kv_events", [&kv_events_json](const HttpRequest&, ResponseStream&) {
    return HttpResponse(200, "application/json", kv_events_json);
  });
  server->add_access_hook([&log](const AccessRecord& r) { log_access(log, r); });
  StatsLogger stats(log, cfg.server.stats_interval_s);
  // The baseline before any request can arrive: a first tick taken later (a loaded machine) would fold the first
  // requests into it, and an interval that saw them would never be logged.
  stats.tick(engine.metrics(), StatsLogger::Clock::now());

  std::thread engine_thread([&] {
    try {
      while (!engine_stop.load()) {
        if (!engine.wait_for_work(std::chrono::milliseconds(50))) continue;
        while (engine.has_work() && engine.step()) {
          metrics.observe_step(engine.metrics());
          if (kv_publisher) kv_publisher->publish(engine.take_kv_events());
        }
      }
      engine.shutdown();
    } catch (const std::exception& e) {
      engine_error = e.what();
      engine_failed.store(true);
    }
  });

  try {
    server->start();
  } catch (...) {
    engine_stop.store(true);
    engine_thread.join();
    throw;
  }
  std::printf("tpserve serving %s at http://%s:%u\n", name.c_str(), cfg.server.host.c_str(), unsigned(server->port()));
  std::printf("  curl http://%s:%u/v1/completions -H 'Content-Type: application/json' %s-d '{\"model\": \"%s\", "
              "\"prompt\": \"The capital of France is\", \"max_tokens\": 16}'\n",
              cfg.server.host.c_str(), unsigned(server->port()),
              cfg.server.api_key.empty() ? "" : "-H 'Authorization: Bearer $API_KEY' ", name.c_str());
  std::fflush(stdout);

  // The watchdog: a local rank gone, or a step without progress for server.step_timeout_s (a rank alive but
  // stuck): the collective will never return and nothing can cancel it, so the leader fails every in-flight
  // request itself, lets the handlers write the error ends, and aborts the job.
  auto watchdog = [&] {
    std::string why = peers.first_dead();
    const double s = step_seconds();
    if (why.empty() && step_timeout_s > 0 && s > step_timeout_s + 1.0) {
      char msg[200];
      std::snprintf(msg, sizeof msg,
                    "a step has made no progress for %.1f s, past server.step_timeout_s = %.1f: a rank is not "
                    "responding",
                    s, step_timeout_s);
      why = msg;
    }
    if (why.empty()) return;
    log.error(why + "; failing " + std::to_string(api.n_in_flight()) + " in-flight requests and aborting the job");
    server->stop_accepting();
    api.fail_all(why);
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (server->n_active_requests() > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Backstop, should MPI_Abort from this thread block while the engine thread sits in a collective (suspected
    // in one test run whose job did not end): 5 s later the local ranks are killed and this process exits.
    std::thread([&peers] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      peers.kill_all();
      std::_Exit(3);
    }).detach();
    abort_job(3);
  };
  int sig = 0;
  while (!engine_failed.load()) {
    const timespec ts{0, 200'000'000};
    sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig > 0) break;
    watchdog();
    stats.tick(engine.metrics(), std::chrono::steady_clock::now());
  }
  if (sig > 0) log.info("signal " + std::to_string(sig) + ": shutting down");

  // Graceful shutdown: no new connections; in-flight requests get until the deadline, then are aborted.
  server->stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(cfg.server.shutdown_deadline_s * 1000.0));
  while (server->n_active_requests() > 0 && std::chrono::steady_clock::now() < deadline && !engine_failed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    watchdog();
  }
  if (api.n_in_flight() > 0) {
    log.warn("aborting " + std::to_string(api.n_in_flight()) + " in-flight requests at the shutdown deadline");
    api.abort_all();
    // Let the handlers write the abort chunk and [DONE] before the sockets close (bounded: 1 s).
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (server->n_active_requests() > 0 && std::chrono::steady_clock::now() < grace && !engine_failed.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (engine_failed.load()) {  // the engine failed its requests: let the handlers write the error ends (<= 2 s)
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (server->n_active_requests() > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server->stop();
  engine_stop.store(true);
  while (step_seconds() > 0) {  // the engine thread may be inside a step that never returns
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    watchdog();
  }
  engine_thread.join();
  if (engine_failed.load()) throw Error("engine failed: " + engine_error);
  log.info("stopped");
  return 0;
}

}  // namespace tp
