#include "coordinator/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
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

using Clock = std::chrono::steady_clock;

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// `seconds` after `t`; 0 or less: never.
Clock::time_point after(Clock::time_point t, double seconds) {
  if (seconds <= 0) return Clock::time_point::max();
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// After an error response sent with the request (partly) unread and the sending side shut down: waits up to
// `seconds` for the client to close its side (a FIN or a reset), reading nothing, so that the close that
// follows does not reset the connection before a client that reads while it sends has seen the response.
void linger_for_close(int fd, double seconds) {
  const auto deadline = after(Clock::now(), seconds);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd, short(POLLRDHUP), 0};
    const int n = ::poll(&p, 1, int(left));
    if (n > 0) return;                   // the client closed (or reset): done
    if (n < 0 && errno != EINTR) return;
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
  net::io_context io;  // run by the I/O thread: accepts, request reads, timeouts
  tcp::acceptor acceptor{io};
  net::steady_timer sweep{io};  // server.send_timeout_s checks
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
};

// One open connection. Between requests it is owned by the I/O thread (waiting for a request's first byte, then
// reading it); while a request is handled it is owned by its handler thread, which posts the wait for the next
// request back to the I/O thread.
struct HttpServer::Connection {
  enum class Phase { Waiting, Reading, Handling };
  Connection(tcp::socket s, net::io_context& io, std::string peer_)
      : socket(std::move(s)), fd(socket.native_handle()), peer(std::move(peer_)), timer(io) {}
  tcp::socket socket;
  int fd;
  std::string peer;           // "ip:port"
  beast::flat_buffer buf;
  std::optional<http::request_parser<http::string_body>> parser;
  net::steady_timer timer;    // the deadline of the wait or read in progress
  uint64_t timer_gen = 0;     // bumped whenever the deadline changes: a stale expiry does nothing
  bool timed_out = false;     // the read in progress was cut by its deadline
  std::atomic<Phase> phase{Phase::Waiting};  // the I/O thread's view (it sets all three; others may read it)
  Clock::time_point waiting_since{};  // when it began waiting for a request (eviction: oldest first)
  Clock::time_point request_start{};  // the first byte of the request being read or handled
  bool reserve = false;       // accepted past max_connections: may only ask GET /health
  beast::error_code read_ec;  // how the latest read ended (handed to its handler thread)
  std::atomic<int64_t> write_deadline_ns{0};  // steady-clock ns by which the write in progress must end; 0: none
  std::atomic<bool> send_timed_out{false};
  std::thread handler;        // the thread of the latest request
  std::atomic<bool> done{false};
};

namespace {

// The writes of one response on its handler thread: each one is timed (server.send_timeout_s, enforced by the
// I/O thread's sweep, which shuts the socket down) and its bytes counted. After one write fails, all do.
struct Sender {
  tcp::socket& socket;
  std::atomic<int64_t>& deadline_ns;
  double timeout_s;
  int64_t bytes = 0;
  bool failed = false;

  template <class WriteOp>
  bool run(WriteOp&& op) {
    if (failed) return false;
    if (timeout_s > 0) deadline_ns.store(now_ns() + int64_t(timeout_s * 1e9));
    beast::error_code ec;
    bytes += int64_t(op(ec));
    deadline_ns.store(0);
    failed = bool(ec);
    return !failed;
  }
};

class ChunkedStream final : public ResponseStream {
 public:
  ChunkedStream(Sender& out, bool keep_alive) : out_(out), keep_alive_(keep_alive) {}

  bool start(int status, const std::string& content_type) override {
    if (started_) return !out_.failed;
    started_ = true;
    status_ = status;
    http::response<http::empty_body> res{http::int_to_status(unsigned(status)), 11};
    res.set(http::field::server, "tpserve");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    return out_.run([&](beast::error_code& ec) { return http::write_header(out_.socket, sr, ec); });
  }

  bool write(std::string_view data) override {
    if (!started_ || out_.failed) return false;
    if (data.empty()) return true;
    return out_.run([&](beast::error_code& ec) {
      return net::write(out_.socket, http::make_chunk(net::const_buffer(data.data(), data.size())), ec);
    });
  }

  bool finish() {
    if (!started_ || out_.failed) return false;
    return out_.run([&](beast::error_code& ec) { return net::write(out_.socket, http::make_chunk_last(), ec); });
  }

  bool started() const override { return started_; }

  // A reset from the client (or our own shutdown: a send timeout, stop()) shows as POLLERR / POLLHUP; a
  // half-close only as POLLRDHUP (with POLLIN), which is not a failure: the client may still be reading.
  bool peer_closed() override {
    if (out_.failed) return true;
    pollfd p{out_.socket.native_handle(), 0, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
  }

  int status() const { return status_; }

 private:
  Sender& out_;
  bool keep_alive_;
  bool started_ = false;
  int status_ = 0;
};

HttpResponse error_response(const ApiError& e) { return HttpResponse{e.status, "application/json", to_json(e), {}}; }

bool write_response(Sender& out, const HttpResponse& r, bool keep_alive) {
  http::response<http::string_body> res{http::int_to_status(unsigned(r.status)), 11};
  res.set(http::field::server, "tpserve");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  return out.run([&](beast::error_code& ec) { return http::write(out.socket, res, ec); });
}

std::string peer_of(const tcp::socket& s) {
  beast::error_code ec;
  const tcp::endpoint ep = s.remote_endpoint(ec);
  if (ec) return "?";
  const auto a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : opt_(std::move(options)), impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_[path][method] = std::move(handler);
}

void HttpServer::listen() {
  if (listening_) return;
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
  if (ec) {
    beast::error_code ignored;
    a.close(ignored);
    throw InputError("cannot listen on " + where + ": " + ec.message() + " (server.host, server.port)");
  }
  port_ = a.local_endpoint().port();
  listening_ = true;
}

void HttpServer::start() {
  listen();
  accept_next();
  if (opt_.send_timeout_s > 0) sweep_send_timeouts();
  io_thread_ = std::thread([this] { impl_->io.run(); });
}

void HttpServer::notify(const AccessRecord& r) {
  for (const auto& hook : access_hooks_) {
    try {
      hook(r);
    } catch (...) {
      // a hook must not throw; one that does loses its record, never the connection's thread
    }
  }
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
    int n_reserve = 0;
    int n = n_served_connections(&n_reserve);
    if (n >= opt_.max_connections && prune_closed_idle() > 0) {
      reap_finished();
      n = n_served_connections(&n_reserve);
    }
    if (n >= opt_.max_connections && evict_oldest_waiting()) {
      reap_finished();
      n = n_served_connections(&n_reserve);
    }
    const bool reserve = n >= opt_.max_connections;
    std::string peer = peer_of(s);
    if (reserve && n_reserve >= kHealthReserve) {
      // A small response into an empty send buffer: does not block the I/O thread.
      const ApiError e = service_unavailable("too many open connections (server.max_connections = " +
                                             std::to_string(opt_.max_connections) + ")");
      std::atomic<int64_t> no_deadline{0};
      Sender out{s, no_deadline, 0.0};
      AccessRecord rec;
      rec.status = e.status;
      rec.peer = std::move(peer);
      rec.error = e.message;
      rec.complete = write_response(out, error_response(e), false);
      rec.bytes_sent = out.bytes;
      s.shutdown(tcp::socket::shutdown_both, ec);
      notify(rec);
    } else {
      auto c = std::make_shared<Connection>(std::move(s), impl_->io, std::move(peer));
      c->reserve = reserve;
      {
        std::lock_guard lk(mu_);
        conns_.push_back(c);
      }
      wait_request(c, true);
    }
    accept_next();
  });
}

void HttpServer::arm_timer(const std::shared_ptr<Connection>& c, Clock::time_point deadline) {
  const uint64_t gen = ++c->timer_gen;
  c->timer.cancel();
  if (deadline == Clock::time_point::max()) return;
  c->timer.expires_at(deadline);
  c->timer.async_wait([this, c, gen](beast::error_code ec) {
    if (ec || gen != c->timer_gen || c->done.load()) return;
    if (c->phase == Connection::Phase::Waiting) {
      close(c);  // idle past its timeout: its pending wait completes and sees it done
    } else if (c->phase == Connection::Phase::Reading && !(c->parser && c->parser->is_done())) {
      // Still reading (a read that completed just before the deadline has a done parser: left alone).
      c->timed_out = true;
      ::shutdown(c->fd, SHUT_RDWR);
    }
  });
}

void HttpServer::wait_request(const std::shared_ptr<Connection>& c, bool fresh) {
  if (stopping_.load() || c->done.load()) {
    close(c);
    return;
  }
  const auto now = Clock::now();
  c->phase = Connection::Phase::Waiting;
  c->waiting_since = now;
  if (c->buf.size() > 0) {  // the next (pipelined) request has already begun
    read_request(c, after(now, opt_.request_timeout_s));
    return;
  }
  // A new connection gets request_timeout_s from its connect for its whole first request; a kept-alive one
  // keepalive_timeout_s for the first byte of the next, then request_timeout_s for the rest.
  Clock::time_point deadline = after(now, fresh ? opt_.request_timeout_s : opt_.keepalive_timeout_s);
  if (c->reserve) deadline = std::min(deadline, after(now, kReserveReadTimeout));
  arm_timer(c, deadline);
  c->socket.async_wait(tcp::socket::wait_read, [this, c, fresh, deadline](beast::error_code ec) {
    ++c->timer_gen;
    c->timer.cancel();  // a pending timer holds the connection: let it go now
    if (ec || c->done.load() || stopping_.load()) {
      close(c);
      return;
    }
    read_request(c, fresh ? deadline : after(Clock::now(), opt_.request_timeout_s));
  });
}

void HttpServer::read_request(const std::shared_ptr<Connection>& c, Clock::time_point deadline) {
  c->phase = Connection::Phase::Reading;
  c->request_start = Clock::now();
  c->timed_out = false;
  c->parser.emplace();
  c->parser->body_limit(uint64_t(std::max<int64_t>(opt_.max_body_bytes, 0)));
  arm_timer(c, deadline);
  http::async_read(c->socket, c->buf, *c->parser, [this, c](beast::error_code ec, size_t) {
    ++c->timer_gen;
    c->timer.cancel();
    if (c->done.load()) {  // pruned or evicted: already forgotten
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
    c->phase = Connection::Phase::Handling;
    if (c->handler.joinable()) c->handler.join();  // the previous request's thread has posted this wait: ending
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

int HttpServer::n_served_connections(int* n_reserve) {
  std::lock_guard lk(mu_);
  int n = 0, r = 0;
  for (const auto& c : conns_) (c->reserve ? r : n) += 1;
  if (n_reserve) *n_reserve = r;
  return n;
}

int HttpServer::n_reserve_connections() {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const auto& c : conns_) n += c->reserve && !c->done.load();
  return n;
}

int HttpServer::n_waiting_connections() {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const auto& c : conns_)
    n += !c->reserve && !c->done.load() && c->phase.load() == Connection::Phase::Waiting;
  return n;
}

int HttpServer::prune_closed_idle() {
  // Connections waiting for a request whose client has already hung up: their pending wait will see the EOF
  // soon, but they must not count against max_connections in the meantime.
  std::lock_guard lk(mu_);
  int n = 0;
  for (auto& cp : conns_) {
    Connection& c = *cp;
    if (c.phase != Connection::Phase::Waiting || c.done.load() || c.reserve || c.buf.size() != 0) continue;
    pollfd p{c.fd, short(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char ch;
    // Gone: an error or hang-up, or EOF with no request bytes waiting (a half-closed client that sent a
    // request is not gone).
    const bool gone = (p.revents & (POLLHUP | POLLERR)) ||
                      ((p.revents & (POLLIN | POLLRDHUP)) && ::recv(c.fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
    if (!gone) continue;
    ::shutdown(c.fd, SHUT_RDWR);  // its pending wait completes (and closes it again, harmlessly)
    c.done.store(true);           // reap_finished forgets it now
    ++n;
  }
  return n;
}

bool HttpServer::evict_oldest_waiting() {
  std::lock_guard lk(mu_);
  Connection* oldest = nullptr;
  for (auto& cp : conns_) {
    Connection& c = *cp;
    if (c.phase != Connection::Phase::Waiting || c.done.load() || c.reserve || c.buf.size() != 0) continue;
    // Bytes already waiting in the socket: a request has begun that the I/O thread has not looked at yet (its
    // wait completes next); the connection is busy, not idle.
    char ch;
    if (::recv(c.fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) > 0) continue;
    if (!oldest || c.waiting_since < oldest->waiting_since) oldest = &c;
  }
  if (!oldest) return false;
  ::shutdown(oldest->fd, SHUT_RDWR);  // the client sees the close; its pending wait completes
  oldest->done.store(true);
  return true;
}

void HttpServer::sweep_send_timeouts() {
  {
    const int64_t now = now_ns();
    std::lock_guard lk(mu_);
    for (auto& c : conns_) {
      const int64_t d = c->write_deadline_ns.load();
      if (d == 0 || now < d || c->send_timed_out.load() || c->done.load()) continue;
      c->send_timed_out.store(true);
      ::shutdown(c->fd, SHUT_RDWR);  // the blocked write fails, and so does every later one
    }
  }
  const double period_s = std::min(0.25, opt_.send_timeout_s / 4);
  impl_->sweep.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_s)));
  impl_->sweep.async_wait([this](beast::error_code ec) {
    if (!ec && !stopping_.load()) sweep_send_timeouts();
  });
}

void HttpServer::close(const std::shared_ptr<Connection>& c) {
  // Under mu_: whoever polls or shuts down connection fds (under mu_) skips done ones, so a descriptor number
  // the kernel reuses for a new connection is never touched through this one.
  std::lock_guard lk(mu_);
  c->done.store(true);  // before the client can see the close: a client that saw it finds its slot free
  beast::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
  c->socket.close(ec);  // now, not when the last reference goes: unread input resets the connection
}

void HttpServer::serve_request(const std::shared_ptr<Connection>& c) {
  Sender out{c->socket, c->write_deadline_ns, opt_.send_timeout_s};
  AccessRecord rec;
  rec.peer = c->peer;
  auto finish_record = [&](int status, bool complete) {
    rec.status = status;
    rec.complete = complete;
    rec.bytes_sent = out.bytes;
    rec.duration_s = std::chrono::duration<double>(Clock::now() - c->request_start).count();
    if (c->send_timed_out.load()) {
      const std::string t = "send timed out after " + format_seconds(opt_.send_timeout_s) + " s (server.send_timeout_s)";
      rec.error = rec.error.empty() ? t : rec.error + "; " + t;
    }
  };

  if (const beast::error_code ec = c->read_ec) {
    // No request to route: a body over the limit, a malformed request, or one cut by request_timeout_s.
    const auto& m = c->parser->get();  // its start line, when that much was parsed
    if (!m.target().empty()) {
      rec.method = std::string(m.method_string());
      const std::string target(m.target());
      rec.path = target.substr(0, target.find('?'));
    }
    ApiError e;
    if (ec == http::error::body_limit)
      e = payload_too_large("request body exceeds the limit of " + std::to_string(opt_.max_body_bytes) +
                            " bytes (server.max_body_bytes)");
    else if (c->timed_out)
      e = ApiError{408, "request not received within " + format_seconds(opt_.request_timeout_s) +
                            " s (server.request_timeout_s)", "invalid_request_error", "", ""};
    else
      e = bad_request("malformed HTTP request: " + ec.message());
    rec.error = e.message;
    // A timed-out connection is already shut down: nothing can be sent.
    const bool ok = !c->timed_out && write_response(out, error_response(e), false);
    if (ok) {  // the rest of the request stays unread: half-close, give the client a moment to read, close
      ::shutdown(c->fd, SHUT_WR);
      linger_for_close(c->fd, kErrorLinger);
    }
    finish_record(e.status, ok);
    notify(rec);
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
  rec.method = req.method;
  rec.path = req.path;
  const bool keep_alive = breq.keep_alive() && !stopping_.load() && !c->reserve;

  ChunkedStream stream(out, keep_alive);
  HttpResponse res;
  ++n_active_;
  auto fail = [&](const ApiError& e) {
    res = error_response(e);
    rec.error = e.message;
  };
  auto pit = routes_.find(req.path);
  if (c->reserve && !(req.method == "GET" && req.path == "/health")) {
    fail(service_unavailable("too many open connections (server.max_connections = " +
                             std::to_string(opt_.max_connections) + ")"));
  } else if (pit == routes_.end()) {
    fail(not_found("Not Found: " + req.method + " " + req.path));
  } else if (auto mit = pit->second.find(req.method); mit == pit->second.end()) {
    fail(ApiError{405, "Method " + req.method + " not allowed on " + req.path, "invalid_request_error", "", ""});
  } else {
    try {
      res = mit->second(req, stream);
    } catch (const ApiException& e) {
      fail(e.error);
    } catch (const std::exception& e) {
      fail(internal_error(e.what()));
    }
  }
  bool ok;
  int status;
  if (stream.started()) {
    ok = stream.finish();
    status = stream.status();
  } else {
    ok = write_response(out, res, keep_alive);
    status = res.status;
  }
  rec.log = std::move(res.log);
  finish_record(status, ok);
  notify(rec);
  --n_active_;
  if (!ok || !keep_alive || stopping_.load()) {
    close(c);
    return;
  }
  net::post(impl_->io, [this, c] { wait_request(c, false); });  // the next request on this connection
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
    for (auto& c : conns_)
      if (!c->done.load()) ::shutdown(c->fd, SHUT_RDWR);  // pending reads and blocked writes fail
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
