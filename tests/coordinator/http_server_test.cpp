// HttpServer on its own (no model), driven by raw sockets over loopback: the connection cap keeps /health
// answerable (eviction of idle connections, the /health reserve), idle keep-alive connections close after
// keepalive_timeout_s, a client that never reads is cut off after send_timeout_s, a 413 closes the connection
// without reading the rest of the body, a half-closed client is answered while a reset one is seen as gone, and
// the access hook gets one record per request with the right fields.
#include "coordinator/http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/openai_error.h"

namespace tp {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Access records as the hook delivers them (any thread).
struct Records {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<AccessRecord> all;
  void add(const AccessRecord& r) {
    std::lock_guard lk(mu);
    all.push_back(r);
    cv.notify_all();
  }
  // The first record with this path (waits up to 5 s; status 0 when none came).
  AccessRecord wait_for(const std::string& path) {
    std::unique_lock lk(mu);
    AccessRecord found;
    cv.wait_for(lk, std::chrono::seconds(5), [&] {
      for (const auto& r : all)
        if (r.path == path) {
          found = r;
          return true;
        }
      return false;
    });
    return found;
  }
  size_t count(const std::string& path) {
    std::lock_guard lk(mu);
    size_t n = 0;
    for (const auto& r : all) n += r.path == path;
    return n;
  }
};

// A client socket. Reads never block longer than the receive timeout (SO_RCVTIMEO, 5 s).
struct Client {
  net::io_context io;
  tcp::socket s{io};
  int fd() { return s.native_handle(); }

  explicit Client(int port, int rcvbuf = 0) {
    s.open(tcp::v4());
    if (rcvbuf > 0) setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{5, 0};
    setsockopt(fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
  }
  void send(const std::string& raw) { net::write(s, net::buffer(raw)); }
  // Everything until the server closes (or a reset, or 5 s of silence).
  std::string read_all() {
    std::string out;
    std::array<char, 65536> buf;
    boost::system::error_code ec;
    while (!ec) {
      const size_t n = s.read_some(net::buffer(buf), ec);
      out.append(buf.data(), n);
    }
    return out;
  }
  // One response to a request sent with Content-Length (not chunked): headers + body.
  std::string read_one() {
    std::string out;
    std::array<char, 4096> buf;
    boost::system::error_code ec;
    while (!ec) {
      const auto hdr_end = out.find("\r\n\r\n");
      if (hdr_end != std::string::npos) {
        const auto cl = out.find("Content-Length: ");
        if (cl != std::string::npos && cl < hdr_end &&
            out.size() >= hdr_end + 4 + std::stoul(out.substr(cl + 16)))
          return out;
      }
      const size_t n = s.read_some(net::buffer(buf), ec);
      out.append(buf.data(), n);
    }
    return out;
  }
  // Seconds until the server closes the connection (EOF or reset); `limit_s` when it stays open that long.
  // Anything the server sends meanwhile is discarded.
  double seconds_until_closed(double limit_s) {
    const auto t0 = Clock::now();
    std::array<char, 4096> buf;
    while (since(t0) < limit_s) {
      pollfd p{fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) return since(t0);
    }
    return limit_s;
  }
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string get(const std::string& path, bool close = false) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + (close ? "Connection: close\r\n" : "") + "\r\n";
}

// One GET on a new connection: the status (0 on failure).
int get_status(int port, const std::string& path) {
  Client c(port);
  c.send(get(path, true));
  return status_of(c.read_one());
}

class HttpServerUnit : public testing::Test {
 protected:
  // Starts a server with these options and the test routes.
  void start(HttpServerOptions o) {
    server_ = std::make_unique<HttpServer>(o);
    server_->route("GET", "/health", [](const HttpRequest&, ResponseStream&) {
      return HttpResponse{200, "application/json", "{\"status\":\"ok\"}"};
    });
    server_->route("POST", "/echo", [](const HttpRequest& r, ResponseStream&) {
      HttpResponse res{200, "text/plain", r.body};
      res.log.request_id = "req-1";
      res.log.n_prompt_tokens = 3;
      res.log.n_output_tokens = 7;
      res.log.ttft_s = 0.25;
      res.log.ignored_fields = {"user", "logit_bias"};
      return res;
    });
    server_->route("POST", "/bad", [](const HttpRequest&, ResponseStream&) -> HttpResponse {
      throw ApiException(bad_request("temperature must be in [0, 2], got 9", "temperature"));
    });
    // Waits 300 ms while checking peer_closed() every 10 ms; 499 when the client went away.
    server_->route("GET", "/slow", [this](const HttpRequest&, ResponseStream& out) {
      const auto t0 = Clock::now();
      while (since(t0) < 0.3) {
        if (out.peer_closed()) {
          slow_saw_gone_ = true;
          return HttpResponse{499, "application/json", ""};
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return HttpResponse{200, "text/plain", "slow done"};
    });
    // A stream of `n` chunks of 64 KiB (n from the body, default 8) as fast as the client takes them, stopping at
    // the first failed write; records when the last good write ended and when the failing one did.
    server_->route("POST", "/stream", [this](const HttpRequest& r, ResponseStream& out) {
      const int n = r.body.empty() ? 8 : std::stoi(r.body);
      const std::string chunk(65536, 'x');
      out.start(200, "text/event-stream");
      for (int i = 0; i < n; ++i) {
        if (!out.write(chunk)) {
          stream_failed_at_ = Clock::now();
          stream_failed_ = true;
          break;
        }
        last_good_write_ = Clock::now();
      }
      HttpResponse res;
      res.log.request_id = "stream-1";
      res.log.n_output_tokens = n;
      return res;
    });
    // A chunk every 20 ms for up to 5 s, until the client is gone (a failed write or peer_closed()).
    server_->route("GET", "/ticks", [this](const HttpRequest&, ResponseStream& out) {
      out.start(200, "text/event-stream");
      const auto t0 = Clock::now();
      while (since(t0) < 5.0) {
        if (out.peer_closed() || !out.write(sse_event("tick"))) {
          ticks_saw_gone_ = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return HttpResponse{};
    });
    server_->route("GET", "/big", [](const HttpRequest&, ResponseStream&) {
      return HttpResponse{200, "application/octet-stream", std::string(size_t(64) << 20, 'b')};
    });
    server_->add_access_hook([this](const AccessRecord& r) { records_.add(r); });
    server_->start();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->stop();
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  Records records_;
  std::atomic<bool> slow_saw_gone_{false}, ticks_saw_gone_{false}, stream_failed_{false};
  Clock::time_point last_good_write_{}, stream_failed_at_{};
};

TEST_F(HttpServerUnit, CapFullOfIdleConnectionsStillAnswersHealth) {
  HttpServerOptions o;
  o.max_connections = 4;
  start(o);
  // Two kept-alive connections after a request each, two connected but silent: the cap is full, every one idle.
  // Each one accepted and waiting (a served one handed back by its handler thread) before the next connects, so
  // that they wait in the order made: a fixed sleep here failed on a machine at load 13, where a hand-back took
  // longer than 100 ms; waiting only for all four let idle[0]'s hand-back come after idle[1]'s under load (CI,
  // 2026-12-05), and idle[1] was then the oldest.
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Client>(port_));
    if (i < 2) {
      idle.back()->send(get("/health"));
      ASSERT_EQ(status_of(idle.back()->read_one()), 200);
    }
    const auto t0 = Clock::now();
    while (server_->n_waiting_connections() < i + 1 && since(t0) < 10.0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(server_->n_waiting_connections(), i + 1);
  }
  const std::string r = [&] {
    Client c(port_);
    c.send(get("/health", true));
    return c.read_one();
  }();
  EXPECT_EQ(status_of(r), 200) << r;
  // The oldest idle connection made room: it is closed; the newest ones are not.
  EXPECT_LT(idle[0]->seconds_until_closed(1.0), 1.0);
  EXPECT_GE(idle[3]->seconds_until_closed(0.2), 0.2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(get_status(port_, "/health"), 200) << i;
}

TEST_F(HttpServerUnit, HealthAnsweredFromTheReserveWhenEveryConnectionIsBusy) {
  HttpServerOptions o;
  o.max_connections = 2;
  start(o);
  // Two connections in the middle of a request (headers begun): busy, not evictable.
  std::vector<std::unique_ptr<Client>> busy;
  for (int i = 0; i < 2; ++i) {
    busy.push_back(std::make_unique<Client>(port_));
    busy.back()->send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Le");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(get_status(port_, "/health"), 200);
  Client other(port_);
  other.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
  const std::string r = other.read_one();
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("too many open connections (server.max_connections = 2)"), std::string::npos) << r;
  EXPECT_LT(other.seconds_until_closed(2.0), 2.0);  // a reserve connection is never kept alive
  const AccessRecord rec = records_.wait_for("/echo");
  EXPECT_EQ(rec.status, 503);
  EXPECT_NE(rec.error.find("too many open connections"), std::string::npos);
  // Past the reserve: refused at once with 503. The reserve emptied first, then filled by silent connections (a
  // fixed 100 ms for their accepts failed in CI with another build running, 2026-12-05: the next connection was
  // taken into the reserve and got no answer).
  const auto reserve_holds = [&](int n) {
    const auto t0 = Clock::now();
    while (server_->n_reserve_connections() != n && since(t0) < 10.0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return server_->n_reserve_connections();
  };
  ASSERT_EQ(reserve_holds(0), 0);
  std::vector<std::unique_ptr<Client>> silent;
  for (int i = 0; i < kHealthReserve; ++i) silent.push_back(std::make_unique<Client>(port_));
  ASSERT_EQ(reserve_holds(kHealthReserve), kHealthReserve);
  Client refused(port_);
  EXPECT_EQ(status_of(refused.read_one()), 503);
}

TEST_F(HttpServerUnit, IdleKeepAliveClosedAfterKeepaliveTimeoutNotBefore) {
  HttpServerOptions o;
  o.keepalive_timeout_s = 0.5;
  o.request_timeout_s = 3.0;
  start(o);
  Client kept(port_);
  kept.send(get("/health"));
  ASSERT_EQ(status_of(kept.read_one()), 200);
  Client fresh(port_);  // connected, silent: bound by request_timeout_s, not the keep-alive timeout
  const double closed_after = kept.seconds_until_closed(3.0);
  EXPECT_GT(closed_after, 0.4);
  EXPECT_LT(closed_after, 1.5);
  EXPECT_GE(fresh.seconds_until_closed(0.5), 0.5);
  // A second request within the timeout keeps it alive, and each request restarts the idle clock.
  Client busy(port_);
  for (int i = 0; i < 3; ++i) {
    busy.send(get("/health"));
    ASSERT_EQ(status_of(busy.read_one()), 200) << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

TEST_F(HttpServerUnit, ClientThatNeverReadsIsCutOffAfterSendTimeout) {
  HttpServerOptions o;
  o.send_timeout_s = 1.0;
  start(o);
  // A small receive buffer, never read: the stream of 2,000 × 64 KiB stalls once the buffers fill.
  Client stalled(port_, 4096);
  stalled.send("POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n2000");
  const AccessRecord rec = records_.wait_for("/stream");
  ASSERT_EQ(rec.path, "/stream") << "no record within 5 s: the handler is still blocked";
  ASSERT_TRUE(stream_failed_.load());
  const double stalled_for = std::chrono::duration<double>(stream_failed_at_ - last_good_write_).count();
  EXPECT_GT(stalled_for, 0.9);
  EXPECT_LT(stalled_for, 2.0);
  EXPECT_FALSE(rec.complete);
  EXPECT_NE(rec.error.find("send timed out after 1 s (server.send_timeout_s)"), std::string::npos) << rec.error;
  EXPECT_EQ(rec.log.request_id, "stream-1");  // the handler's log is read for a stream too
  // The same for one large plain response; the server stays healthy.
  Client stalled2(port_, 4096);
  stalled2.send(get("/big"));
  const AccessRecord big = records_.wait_for("/big");
  ASSERT_EQ(big.path, "/big");
  EXPECT_FALSE(big.complete);
  EXPECT_GT(big.duration_s, 0.9);
  EXPECT_LT(big.duration_s, 2.5);
  EXPECT_LT(big.bytes_sent, int64_t(64) << 20);
  EXPECT_EQ(get_status(port_, "/health"), 200);
  for (int i = 0; i < 100 && server_->n_active_requests() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server_->n_active_requests(), 0);
}

TEST_F(HttpServerUnit, BodyTooLargeGets413AndTheConnectionClosesWithoutReadingTheRest) {
  HttpServerOptions o;
  o.max_body_bytes = 65536;
  start(o);
  Client c(port_);
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  // A writer that keeps sending the 100 MB body until the connection fails.
  std::atomic<int64_t> sent{0};
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    const std::string block(65536, 'a');
    while (sent.load() < 100000000) {
      const ssize_t n = ::send(c.fd(), block.data(), block.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += n;
    }
    writer_done = true;
  });
  const auto t0 = Clock::now();
  const std::string r = c.read_one();
  const double closed_after = c.seconds_until_closed(5.0) + since(t0);
  while (!writer_done.load() && since(t0) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool finished = writer_done.load();
  if (!finished) ::shutdown(c.fd(), SHUT_RDWR);
  writer.join();
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 200);
  EXPECT_NE(r.find("server.max_body_bytes"), std::string::npos);
  EXPECT_NE(r.find("Connection: close"), std::string::npos);
  EXPECT_LT(closed_after, 3.0);
  EXPECT_TRUE(finished) << "the writer still sends after 10 s";
  EXPECT_LT(sent.load(), int64_t(32) << 20) << "the server read the body it refused";
  const AccessRecord rec = records_.wait_for("/echo");
  EXPECT_EQ(rec.status, 413);
  EXPECT_EQ(rec.method, "POST");
  EXPECT_NE(rec.error.find("exceeds the limit of 65536 bytes"), std::string::npos) << rec.error;
  EXPECT_EQ(get_status(port_, "/health"), 200);
}

TEST_F(HttpServerUnit, HalfClosedClientIsAnsweredResetClientIsGone) {
  start(HttpServerOptions{});
  {  // plain response
    Client c(port_);
    c.send(get("/slow"));
    ::shutdown(c.fd(), SHUT_WR);
    const std::string r = c.read_all();
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_NE(r.find("slow done"), std::string::npos) << r;
    EXPECT_FALSE(slow_saw_gone_.load());
  }
  {  // a stream
    Client c(port_);
    c.send("POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n4");
    ::shutdown(c.fd(), SHUT_WR);
    const std::string r = c.read_all();
    EXPECT_EQ(status_of(r), 200);
    EXPECT_GT(r.size(), size_t(4 * 65536));
    EXPECT_NE(r.find("\r\n0\r\n\r\n"), std::string::npos) << "no terminating chunk";
    EXPECT_FALSE(stream_failed_.load());
  }
  {  // a reset while the handler waits: peer_closed() says so
    Client c(port_);
    c.send(get("/slow"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    linger lg{1, 0};
    setsockopt(c.fd(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    c.s.close();  // RST
    for (int i = 0; i < 100 && !slow_saw_gone_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(slow_saw_gone_.load());
  }
}

TEST_F(HttpServerUnit, ClientClosingMidStreamIsSeenAsGone) {
  start(HttpServerOptions{});
  {
    Client c(port_);
    c.send(get("/ticks"));
    std::string got;
    std::array<char, 1024> buf;
    while (got.find("tick", got.find("tick") + 1) == std::string::npos) {  // two chunks
      boost::system::error_code ec;
      const size_t n = c.s.read_some(net::buffer(buf), ec);
      ASSERT_FALSE(ec) << ec.message();
      got.append(buf.data(), n);
    }
  }  // a plain close (FIN), everything read: the next chunks meet a reset
  const AccessRecord rec = records_.wait_for("/ticks");
  ASSERT_EQ(rec.path, "/ticks");
  EXPECT_TRUE(ticks_saw_gone_.load());
  EXPECT_FALSE(rec.complete);
  EXPECT_LT(rec.duration_s, 1.0);
}

TEST_F(HttpServerUnit, AccessRecordsCarryTheRequestAndTheHandlersLog) {
  start(HttpServerOptions{});
  Client c(port_);
  c.send("POST /echo?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  const std::string ok = c.read_one();
  ASSERT_EQ(status_of(ok), 200);
  AccessRecord r = records_.wait_for("/echo");
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.bytes_sent, int64_t(ok.size()));
  EXPECT_EQ(r.peer, "127.0.0.1:" + std::to_string(c.s.local_endpoint().port()));
  EXPECT_GE(r.duration_s, 0.0);
  EXPECT_LT(r.duration_s, 1.0);
  EXPECT_TRUE(r.error.empty());
  EXPECT_EQ(r.log.request_id, "req-1");
  EXPECT_EQ(r.log.n_prompt_tokens, 3);
  EXPECT_EQ(r.log.n_output_tokens, 7);
  EXPECT_EQ(r.log.ttft_s, 0.25);
  EXPECT_EQ(r.log.ignored_fields, (std::vector<std::string>{"user", "logit_bias"}));

  // Errors: the message of each response the server made or translated.
  c.send("POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(status_of(c.read_one()), 400);
  c.send(get("/nope"));
  EXPECT_EQ(status_of(c.read_one()), 404);
  c.send("DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(c.read_one()), 405);
  r = records_.wait_for("/bad");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.error, "temperature must be in [0, 2], got 9");
  r = records_.wait_for("/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.error, "Not Found: GET /nope");
  EXPECT_TRUE(r.log.request_id.empty());
  EXPECT_LT(r.log.ttft_s, 0);
  // The 405 is the first record under /health in this test.
  r = records_.wait_for("/health");
  EXPECT_EQ(r.method, "DELETE");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.error, "Method DELETE not allowed on /health");

  // A malformed request: 400 with the parser's message, no method or path.
  Client bad(port_);
  bad.send("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(status_of(bad.read_one()), 400);
  r = records_.wait_for("");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.error.find("malformed HTTP request"), std::string::npos) << r.error;
  EXPECT_EQ(records_.count("/echo"), 1u);  // one record per request
}

TEST(HttpServerListen, TakenPortFailsAtListenNamingHostPortAndTheOsError) {
  HttpServer first(HttpServerOptions{});
  first.listen();
  ASSERT_GT(first.port(), 0);
  HttpServerOptions o;
  o.port = first.port();
  HttpServer second(o);
  try {
    second.listen();
    FAIL() << "a second listener on the same port";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot listen on 127.0.0.1:" + std::to_string(first.port()) +
                                         ": Address already in use (server.host, server.port)");
  }
}

}  // namespace
}  // namespace tp
