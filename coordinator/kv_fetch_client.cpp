#include "coordinator/kv_fetch_client.h"

#include <nlohmann/json.hpp>

#include "coordinator/http_client.h"

namespace tp {

using json = nlohmann::json;

namespace {
// POSTs a JSON body to `base_url` + path, `timeout` for the connection and for each silence while waiting.
// parse_base_url throws InputError (the request named a bad URL); HttpClientError: the holder did not answer.
HttpClientResponse post_json(const std::string& base_url, const std::string& path, const std::string& body,
                             std::chrono::milliseconds timeout) {
  const auto [host, port] = parse_base_url(base_url);
  HttpClientRequest q;
  q.method = "POST";
  q.target = path;
  q.body = body;
  q.connect_timeout_s = q.idle_timeout_s = double(timeout.count()) / 1000.0;
  return http_call(host, port, q);
}
}  // namespace

KvFetchClient::KvFetchClient(int tp, LogFn log, std::chrono::milliseconds timeout)
    : tp_(tp), log_(std::move(log)), timeout_(timeout), releaser_([this] { release_loop(); }) {}

KvFetchClient::~KvFetchClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  releaser_.join();
}

void KvFetchClient::release_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !releases_.empty(); });
    if (releases_.empty()) return;  // stop_ with nothing left
    auto [holder, pin] = releases_.front();
    releases_.pop_front();
    lock.unlock();
    try {  // a lost release only keeps the holder's blocks pinned until its pin times out
      post_json(holder, "/v1/kv/release", json{{"pin_id", pin}}.dump(), timeout_);
    } catch (const std::exception& e) {
      if (log_) log_("KV fetch: releasing pin " + std::to_string(pin) + " at " + holder + " failed: " + e.what());
    }
    lock.lock();
  }
}

std::shared_ptr<KvImport> KvFetchClient::prepare(const std::string& holder, const std::vector<int32_t>& tokens) {
  parse_base_url(holder);  // InputError: the request's fault
  auto im = std::make_shared<KvImport>();
  im->holder = holder;
  im->timeout_ms = timeout_.count();
  uint64_t pin = 0;
  try {
    const HttpClientResponse r = post_json(holder, "/v1/kv/export", json{{"prompt_token_ids", tokens}}.dump(), timeout_);
    if (r.status != 200) throw Error("HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
    const json a = json::parse(r.body);
    pin = a.at("pin_id").get<uint64_t>();
    im->pinned_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.at("pin_ms").get<int64_t>());
    im->block_size = a.at("block_size").get<int32_t>();
    im->holder_blocks = a.at("blocks").get<std::vector<int32_t>>();
    im->block_hashes = a.at("block_hashes").get<std::vector<uint64_t>>();
    for (const json& rk : a.at("ranks")) im->holder_addresses.push_back(rk.at("ucx_address").get<std::string>());
    const int holder_tp = a.at("tp").get<int>();
    if (holder_tp != tp_)
      throw Error("the holder runs tp " + std::to_string(holder_tp) + ", this replica tp " + std::to_string(tp_) +
                  " (blocks move rank t to rank t)");
    if (int(im->holder_addresses.size()) != holder_tp) throw Error("the holder lists " +
                                                                   std::to_string(im->holder_addresses.size()) +
                                                                   " rank addresses for tp " + std::to_string(holder_tp));
  } catch (const std::exception& e) {
    im->error = "asking " + holder + " for its KV blocks failed: " + e.what();
  }
  LogFn log = log_;
  KvFetchClient* self = this;
  im->on_done = [self, log, holder, pin](bool ok, const std::string& what) {
    if (log) log("KV fetch from " + holder + ": " + (ok || what.rfind("recompute:", 0) == 0 ? "" : "recomputing: ") + what);
    if (pin == 0) return;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->releases_.emplace_back(holder, pin);
    }
    self->cv_.notify_all();
  };
  return im;
}

}  // namespace tp
