#include "coordinator/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>

#include "common/error.h"
#include "coordinator/openai_error.h"

namespace tp {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Reads and discards what the peer still sends (up to ~2 s / 64 MiB) so that closing after an early error
// response does not reset the connection before the client has read the response.
void drain_input(int fd) {
  char scratch[65536];
  int64_t total = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline && total < (int64_t(64) << 20)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) break;
    const ssize_t n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n <= 0) break;
    total += n;
  }
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string sse_event(std::string_view data) {
  std::string s = "data: ";
  s += data;
  s += "\n\n";
  return s;
}

struct HttpServer::Impl {
  net::io_context io;  // never run: every operation is synchronous
  tcp::acceptor acceptor{io};
};

struct HttpServer::Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)), fd(socket.native_handle()) {}
  tcp::socket socket;
  int fd;
  std::thread thread;
  std::atomic<bool> done{false};
  std::atomic<int64_t> reading_since_ns{0};  // steady ns when the current request read began; 0: not reading
};

namespace {

class ChunkedStream final : public ResponseStream {
 public:
  ChunkedStream(tcp::socket& s, bool keep_alive) : socket_(s), keep_alive_(keep_alive) {}

  bool start(int status, const std::string& content_type) override {
    if (started_) return !failed_;
    started_ = true;
    status_ = status;
    http::response<http::empty_body> res{http::int_to_status(unsigned(status)), 11};
    res.set(http::field::server, "tpserve");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(socket_, sr, ec);
    failed_ = bool(ec);
    return !failed_;
  }

  bool write(std::string_view data) override {
    if (!started_ || failed_) return false;
    if (data.empty()) return true;
    beast::error_code ec;
    net::write(socket_, http::make_chunk(net::const_buffer(data.data(), data.size())), ec);
    failed_ = bool(ec);
    return !failed_;
  }

  bool finish() {
    if (!started_ || failed_) return false;
    beast::error_code ec;
    net::write(socket_, http::make_chunk_last(), ec);
    failed_ = bool(ec);
    return !failed_;
  }

  bool started() const override { return started_; }

  bool peer_closed() override {
    if (failed_) return true;
    pollfd p{socket_.native_handle(), short(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {  // data: either a pipelined request or EOF
      char c;
      const ssize_t n = ::recv(socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n == 0;
    }
    return false;
  }

  int status() const { return status_; }

 private:
  tcp::socket& socket_;
  bool keep_alive_;
  bool started_ = false;
  bool failed_ = false;
  int status_ = 0;
};

HttpResponse error_response(const ApiError& e) { return HttpResponse{e.status, "application/json", to_json(e), {}}; }

bool write_response(tcp::socket& s, const HttpResponse& r, bool keep_alive) {
  http::response<http::string_body> res{http::int_to_status(unsigned(r.status)), 11};
  res.set(http::field::server, "tpserve");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  beast::error_code ec;
  http::write(s, res, ec);
  return !ec;
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : opt_(std::move(options)), impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_[path][method] = std::move(handler);
}

void HttpServer::start() {
  const std::string where = opt_.host + ":" + std::to_string(opt_.port);
  beast::error_code ec;
  const auto addr = net::ip::make_address(opt_.host, ec);
  if (ec) throw InputError("server.host: '" + opt_.host + "' is not an IP address (" + ec.message() + ")");
  const tcp::endpoint ep{addr, opt_.port};
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw InputError("cannot listen on " + where + ": " + ec.message());
  port_ = a.local_endpoint().port();
  acceptor_ = std::thread([this] { accept_loop(); });
  if (opt_.request_timeout_s > 0) watchdog_ = std::thread([this] { watch_reads(); });
}

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void HttpServer::watch_reads() {
  const auto limit = int64_t(opt_.request_timeout_s * 1e9);
  while (!stopping_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int64_t now = steady_ns();
    std::lock_guard lk(mu_);
    for (auto& c : conns_) {
      int64_t t0 = c->reading_since_ns.load();
      if (t0 != 0 && now - t0 > limit && c->reading_since_ns.compare_exchange_strong(t0, 0))
        ::shutdown(c->fd, SHUT_RDWR);  // the blocked read fails; the connection's thread ends it
    }
  }
}

void HttpServer::accept_loop() {
  for (;;) {
    tcp::socket s{impl_->io};
    beast::error_code ec;
    impl_->acceptor.accept(s, ec);
    if (stopping_.load() || !impl_->acceptor.is_open()) return;
    if (ec) {
      if (ec == net::error::invalid_argument || ec == net::error::bad_descriptor) return;  // shut down
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. out of file descriptors
      continue;
    }
    reap_finished();
    std::lock_guard lk(mu_);
    if (int(conns_.size()) >= opt_.max_connections) {
      write_response(s, error_response(service_unavailable("too many open connections")), false);
      s.shutdown(tcp::socket::shutdown_both, ec);
      continue;
    }
    auto c = std::make_shared<Connection>(std::move(s));
    conns_.push_back(c);
    c->thread = std::thread([this, c] { serve_connection(c); });
  }
}

void HttpServer::reap_finished() {
  std::list<std::shared_ptr<Connection>> done;
  {
    std::lock_guard lk(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load()) {
        done.push_back(*it);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done)
    if (c->thread.joinable()) c->thread.join();
}

void HttpServer::serve_connection(const std::shared_ptr<Connection>& c) {
  tcp::socket& s = c->socket;
  beast::flat_buffer buf;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(uint64_t(std::max<int64_t>(opt_.max_body_bytes, 0)));
    beast::error_code ec;
    c->reading_since_ns.store(steady_ns());
    http::read(s, buf, parser, ec);
    c->reading_since_ns.store(0);
    if (ec == http::error::body_limit) {
      const HttpResponse r = error_response(payload_too_large(
          "request body exceeds the limit of " + std::to_string(opt_.max_body_bytes) + " bytes (server.max_body_bytes)"));
      write_response(s, r, false);
      if (on_response_) on_response_(r.status);
      s.shutdown(tcp::socket::shutdown_send, ec);
      drain_input(c->fd);
      break;
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == net::error::bad_descriptor)
      break;
    if (ec) {
      if (buf.size() > 0 || parser.got_some()) {
        const HttpResponse r = error_response(bad_request("malformed HTTP request: " + ec.message()));
        write_response(s, r, false);
        if (on_response_) on_response_(r.status);
      }
      break;
    }
    const auto& breq = parser.get();
    HttpRequest req;
    req.method = std::string(breq.method_string());
    req.target = std::string(breq.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : breq) req.headers[lower(std::string(f.name_string()))] = std::string(f.value());
    req.body = breq.body();
    const bool keep_alive = breq.keep_alive() && !stopping_.load();

    ChunkedStream stream(s, keep_alive);
    HttpResponse res;
    ++n_active_;
    auto pit = routes_.find(req.path);
    if (pit == routes_.end()) {
      res = error_response(not_found("Not Found: " + req.method + " " + req.path));
    } else if (auto mit = pit->second.find(req.method); mit == pit->second.end()) {
      res = error_response(ApiError{405, "Method " + req.method + " not allowed on " + req.path,
                                    "invalid_request_error", "", ""});
    } else {
      try {
        res = mit->second(req, stream);
      } catch (const ApiException& e) {
        res = error_response(e.error);
      } catch (const std::exception& e) {
        res = error_response(internal_error(e.what()));
      }
    }
    bool ok;
    int status;
    if (stream.started()) {
      ok = stream.finish();
      status = stream.status();
    } else {
      ok = write_response(s, res, keep_alive);
      status = res.status;
    }
    --n_active_;
    if (on_response_) on_response_(status);
    if (!ok || !keep_alive || stopping_.load()) break;
  }
  beast::error_code ec;
  s.shutdown(tcp::socket::shutdown_both, ec);
  c->done.store(true);
}

void HttpServer::stop_accepting() {
  std::lock_guard lk(mu_);
  if (impl_->acceptor.is_open()) ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);  // wakes accept()
}

void HttpServer::stop() {
  stopping_.store(true);
  stop_accepting();
  if (acceptor_.joinable()) acceptor_.join();
  if (watchdog_.joinable()) watchdog_.join();
  {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  }
  std::list<std::shared_ptr<Connection>> all;
  {
    std::lock_guard lk(mu_);
    all.swap(conns_);
  }
  for (auto& c : all) ::shutdown(c->fd, SHUT_RDWR);  // a blocked read or write fails
  for (auto& c : all)
    if (c->thread.joinable()) c->thread.join();
}

}  // namespace tp
