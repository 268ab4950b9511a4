#include "coordinator/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <list>
#include <optional>

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
  net::io_context io;  // run by the I/O thread: accepts, request reads, request timeouts
  tcp::acceptor acceptor{io};
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
};

// One open connection. Between requests it is owned by the I/O thread (an async read is pending); while a
// request is handled it is owned by its handler thread, which posts the next read back to the I/O thread.
struct HttpServer::Connection {
  Connection(tcp::socket s, net::io_context& io) : socket(std::move(s)), fd(socket.native_handle()), timer(io) {}
  tcp::socket socket;
  int fd;
  beast::flat_buffer buf;
  std::optional<http::request_parser<http::string_body>> parser;
  net::steady_timer timer;   // server.request_timeout_s for the read in progress
  beast::error_code read_ec; // how the latest read ended (handed to its handler thread)
  bool reading = false;      // an async read is pending (I/O thread only)
  std::thread handler;       // the thread of the latest request
  std::atomic<bool> done{false};
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
  accept_next();
  io_thread_ = std::thread([this] { impl_->io.run(); });
}

void HttpServer::accept_next() {
  impl_->acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (stopping_.load() || !impl_->acceptor.is_open()) return;
    if (ec) {
      if (ec == net::error::operation_aborted || ec == net::error::bad_descriptor) return;  // closed
      // e.g. out of file descriptors: try again shortly, without spinning
      auto t = std::make_shared<net::steady_timer>(impl_->io, std::chrono::milliseconds(10));
      t->async_wait([this, t](beast::error_code) { accept_next(); });
      return;
    }
    reap_finished();
    if (n_connections() >= opt_.max_connections && prune_closed_idle() > 0) reap_finished();
    std::shared_ptr<Connection> c;
    {
      std::lock_guard lk(mu_);
      if (int(conns_.size()) < opt_.max_connections) {
        c = std::make_shared<Connection>(std::move(s), impl_->io);
        conns_.push_back(c);
      }
    }
    if (c) {
      read_next(c);
    } else {  // a small response into an empty send buffer: does not block the I/O thread
      write_response(s, error_response(service_unavailable("too many open connections")), false);
      s.shutdown(tcp::socket::shutdown_both, ec);
    }
    accept_next();
  });
}

void HttpServer::read_next(const std::shared_ptr<Connection>& c) {
  if (stopping_.load()) {
    close(c);
    return;
  }
  c->parser.emplace();
  c->parser->body_limit(uint64_t(std::max<int64_t>(opt_.max_body_bytes, 0)));
  if (opt_.request_timeout_s > 0) {
    c->timer.expires_after(std::chrono::milliseconds(int64_t(opt_.request_timeout_s * 1000.0)));
    c->timer.async_wait([c](beast::error_code ec) {
      // Still reading (a completion queued just before expiry cleared it): the read fails, the connection closes.
      if (!ec && c->reading) ::shutdown(c->fd, SHUT_RDWR);
    });
  }
  c->reading = true;
  http::async_read(c->socket, c->buf, *c->parser, [this, c](beast::error_code ec, size_t) {
    c->reading = false;
    c->timer.cancel();
    if (c->done.load()) {  // pruned while idle (prune_closed_idle): already forgotten
      close(c);
      return;
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
        (ec && ec != http::error::body_limit && c->buf.size() == 0 && !c->parser->got_some())) {
      close(c);
      return;
    }
    // A request (or a bad one to answer): handled on its own thread, which may block on the engine.
    if (c->handler.joinable()) c->handler.join();  // the previous request's thread has posted this read: ending
    c->read_ec = ec;
    c->handler = std::thread([this, c] { serve_request(c); });
  });
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
    if (c->handler.joinable()) c->handler.join();  // it marked the connection done as its last act
}

int HttpServer::n_connections() {
  std::lock_guard lk(mu_);
  return int(conns_.size());
}

int HttpServer::prune_closed_idle() {
  // Connections waiting for a request whose client has already hung up: their pending read will see the EOF
  // soon, but they must not count against max_connections in the meantime.
  std::lock_guard lk(mu_);
  int n = 0;
  for (auto& cp : conns_) {
    Connection& c = *cp;
    if (!c.reading || c.done.load() || !c.parser || c.parser->got_some() || c.buf.size() != 0) continue;
    pollfd p{c.fd, short(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char ch;
    // Gone: an error or hang-up, or EOF with no request bytes waiting (a half-closed client that sent a
    // request is not gone).
    const bool gone = (p.revents & (POLLHUP | POLLERR)) ||
                      ((p.revents & (POLLIN | POLLRDHUP)) && ::recv(c.fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
    if (!gone) continue;
    ::shutdown(c.fd, SHUT_RDWR);  // its pending read fails (and closes it again, harmlessly)
    c.done.store(true);           // reap_finished forgets it now
    ++n;
  }
  return n;
}

void HttpServer::close(const std::shared_ptr<Connection>& c) {
  beast::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
  c->done.store(true);
}

void HttpServer::serve_request(const std::shared_ptr<Connection>& c) {
  tcp::socket& s = c->socket;
  beast::error_code ec = c->read_ec;
  if (ec == http::error::body_limit) {
    const HttpResponse r = error_response(payload_too_large(
        "request body exceeds the limit of " + std::to_string(opt_.max_body_bytes) + " bytes (server.max_body_bytes)"));
    write_response(s, r, false);
    if (on_response_) on_response_(r.status);
    s.shutdown(tcp::socket::shutdown_send, ec);
    drain_input(c->fd);
    close(c);
    return;
  }
  if (ec) {  // malformed after some bytes (a timeout that cut a request short lands here too)
    const HttpResponse r = error_response(bad_request("malformed HTTP request: " + ec.message()));
    write_response(s, r, false);
    if (on_response_) on_response_(r.status);
    close(c);
    return;
  }
  const auto& breq = c->parser->get();
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
  if (!ok || !keep_alive || stopping_.load()) {
    close(c);
    return;
  }
  net::post(impl_->io, [this, c] { read_next(c); });  // the next request on this connection
}

void HttpServer::stop_accepting() {
  net::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);  // the pending accept completes with operation_aborted
  });
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  stop_accepting();
  {
    std::lock_guard lk(mu_);
    for (auto& c : conns_) ::shutdown(c->fd, SHUT_RDWR);  // pending reads and blocked writes fail
  }
  // Handlers notice (ResponseStream::peer_closed / failed writes) and end; then the I/O thread stops, and only
  // after that are the handler threads joined (the I/O thread also joins them, so never both at once).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (n_active_.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->work.reset();
  impl_->io.stop();
  if (io_thread_.joinable()) io_thread_.join();
  std::list<std::shared_ptr<Connection>> all;
  {
    std::lock_guard lk(mu_);
    all.swap(conns_);
  }
  for (auto& c : all)
    if (c->handler.joinable()) c->handler.join();
  beast::error_code ec;
  impl_->acceptor.close(ec);
}

}  // namespace tp
