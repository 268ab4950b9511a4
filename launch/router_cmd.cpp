// `tpserve router`: the front door over several `tpserve serve` replicas (coordinator/router_proxy.h): the same
// OpenAI API, routed by router.policy from the global prefix index (fed by the replicas' KV events over
// ZeroMQ), health checks per replica (coordinator/router_health.h), replays of a failed replica's requests.
// Replicas: --replicas URL,URL,... or router.replicas of the config; more join and leave at run time through
// POST / DELETE /router/replicas. It loads only the model's tokenizer and chat template (to hash prompts as the
// replicas do), not its weights. SIGINT / SIGTERM: stop accepting, let in-flight requests finish until
// server.shutdown_deadline_s, exit 0.
#include <signal.h>
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "coordinator/chat_template.h"
#include "coordinator/http_client.h"
#include "coordinator/http_server.h"
#include "coordinator/router_events.h"
#include "coordinator/router_health.h"
#include "coordinator/router_metrics.h"
#include "coordinator/router_policy.h"
#include "coordinator/router_proxy.h"
#include "coordinator/router_replicas.h"
#include "coordinator/tokenizer.h"
#include "launch/server_setup.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/serve_log.h"
#include "rank/model_file.h"

namespace tp {

const CommandSpec& router_spec() {
  static const Config d;
  static const CommandSpec spec{
      "router",
      "serve the OpenAI API in front of several `tpserve serve` replicas, routed by KV prefix and load",
      {
          OptionSpec::computed("config", "FILE", "built-in defaults", "YAML config (router:, server:, model.path)"),
          OptionSpec::computed("model", "PATH", "model.path of the config, else " + d.model.path,
                               "the replicas' model (its tokenizer and chat template only)"),
          OptionSpec::computed("replicas", "URL,...", "router.replicas of the config",
                               "replica base URLs, comma-separated (http://host:port)"),
          OptionSpec::computed("policy", "NAME", "router.policy of the config, else " + d.router.policy,
                               "round_robin, least_load or prefix_aware"),
          OptionSpec::computed("host", "H", "server.host of the config, else " + d.server.host, "address to listen on"),
          OptionSpec::computed("port", "N", "server.port of the config, else " + std::to_string(d.server.port),
                               "port to listen on; 0: any free port"),
          OptionSpec::computed("api-key", "K", "server.api_key of the config, else none",
                               "require `Authorization: Bearer K` (passed on to the replicas)"),
          OptionSpec::computed("log-format", "text|json", "server.log_format of the config, else " + d.server.log_format,
                               "the router's log lines on stderr"),
          OptionSpec::flag("kv-fetch", "set router.kv_fetch: tell a replica lacking a prefix where to fetch it"),
      }};
  return spec;
}

int run_router(const CliArgs& a) {
  Config cfg = a.has("config") ? load_config(a.required("config")) : Config{};
  if (auto m = a.str("model")) cfg.model.path = *m;
  if (auto h = a.str("host")) cfg.server.host = *h;
  if (auto k = a.str("api-key")) cfg.server.api_key = *k;
  cfg.server.port = a.integer("port", cfg.server.port, 0, 65535);
  if (auto f = a.str("log-format")) cfg.server.log_format = *f;
  if (auto p = a.str("policy")) cfg.router.policy = *p;
  if (a.flag("kv-fetch")) cfg.router.kv_fetch = true;
  if (auto r = a.str("replicas")) {
    cfg.router.replicas.clear();
    std::stringstream ss(*r);
    std::string url;
    while (std::getline(ss, url, ','))
      if (!url.empty()) cfg.router.replicas.push_back(url);
  }
  const RoutePolicy policy = parse_route_policy(cfg.router.policy, a.has("policy") ? "--policy" : "router.policy");
  for (const std::string& u : cfg.router.replicas) parse_base_url(u);  // a bad URL fails here, named
  Logger log(parse_log_format(cfg.server.log_format, "--log-format"));

  const sigset_t sigs = block_stop_signals();
  const HttpServerOptions ho = http_server_options(cfg.server);
  HttpServer server(ho);
  server.listen();

  const std::unique_ptr<ModelFile> file = open_model(cfg.model.path);
  const Tokenizer tok(file->tokenizer());
  const auto token_text = [&tok](int32_t id) { return id >= 0 ? tok.token_to_piece(id) : std::string(); };
  const ChatTemplate chat = ChatTemplate::resolve(cfg.model.chat_template, file->tokenizer().chat_template,
                                                  token_text(tok.bos_id()), token_text(tok.eos_id()));

  RouteCostParams cost;
  cost.block_size = cfg.cache.block_size;
  cost.kv_usage_tokens = cfg.router.kv_usage_tokens;
  RouterReplicas replicas(policy, cost);
  for (const std::string& u : cfg.router.replicas) replicas.join(u);
  RouterMetrics metrics;
  const auto log_line = [&log](const std::string& s) { log.info(s); };
  RouterHealth health(replicas, {cfg.router.health_interval_s, cfg.router.health_timeout_s, cfg.router.unhealthy_after},
                      log_line);
  RouterEvents events(replicas, metrics, log_line);

  RouterApiConfig rc;
  rc.api_key = cfg.server.api_key;
  rc.max_context = cfg.cache.max_context > 0 ? cfg.cache.max_context : file->config().max_context;
  rc.block_size = cfg.cache.block_size;
  rc.kv_fetch = cfg.router.kv_fetch;
  rc.max_replays = cfg.router.max_replays;
  RouterApi api(rc, replicas, metrics, tok, chat);
  api.install(server);
  server.add_access_hook([&log](const AccessRecord& r) { log_access(log, r); });
  struct Stop {  // the server's threads end before what they call goes away
    HttpServer& s;
    ~Stop() { s.stop(); }
  } stop_server{server};

  health.check_all();  // the replicas' state before the first request
  health.start();
  events.start();
  server.start();
  log.info("policy " + cfg.router.policy + ", " + std::to_string(replicas.n_up()) + " of " +
           std::to_string(replicas.n_joined()) + " replicas up");
  std::printf("tpserve router at http://%s:%u\n", cfg.server.host.c_str(), unsigned(server.port()));
  std::fflush(stdout);

  int sig = 0;
  while (sig <= 0) {
    const timespec ts{0, 200'000'000};
    sig = sigtimedwait(&sigs, nullptr, &ts);
  }
  log.info("signal " + std::to_string(sig) + ": shutting down");
  server.stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(cfg.server.shutdown_deadline_s * 1000.0));
  while (server.n_active_requests() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.stop();
  health.stop();
  events.stop();
  log.info("stopped");
  return 0;
}

}  // namespace tp
