// HttpClient (coordinator/http_client.h) against a real HttpServer over loopback: a whole body, a chunked stream
// delivered piece by piece as it is written, an early stop, a silent server abandoned by keep_waiting and by the
// idle timeout, a refused connection, and base URLs parsed or refused with their reason.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "coordinator/http_client.h"
#include "coordinator/http_server.h"

namespace tp {
namespace {

using Clock = std::chrono::steady_clock;

class HttpClientTest : public testing::Test {
 protected:
  void SetUp() override {
    server_.route("GET", "/plain", [](const HttpRequest&, ResponseStream&) {
      return HttpResponse(200, "application/json", std::string(100000, 'x'));
    });
    server_.route("POST", "/echo", [](const HttpRequest& r, ResponseStream&) {
      return HttpResponse(201, "text/plain", r.body + "|" + r.header("authorization"));
    });
    server_.route("GET", "/stream", [](const HttpRequest&, ResponseStream& out) {
      out.start(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) {
        out.write(sse_event("chunk " + std::to_string(i)));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      return HttpResponse();
    });
    server_.route("GET", "/silent", [this](const HttpRequest&, ResponseStream&) {
      while (!release_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return HttpResponse(200, "text/plain", "late");
    });
    server_.start();
  }
  void TearDown() override {
    release_.store(true);
    server_.stop();
  }
  HttpServer server_{HttpServerOptions{}};
  std::atomic<bool> release_{false};
};

TEST_F(HttpClientTest, WholeBodyAndEcho) {
  HttpClientRequest q;
  q.target = "/plain";
  const HttpClientResponse r = http_call("127.0.0.1", server_.port(), q);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, std::string(100000, 'x'));
  q.method = "POST";
  q.target = "/echo";
  q.body = "{\"a\":1}";
  q.headers = {{"Authorization", "Bearer k"}};
  const HttpClientResponse e = http_call("127.0.0.1", server_.port(), q);
  EXPECT_EQ(e.status, 201);
  EXPECT_EQ(e.body, "{\"a\":1}|Bearer k");
}

TEST_F(HttpClientTest, StreamPiecesArriveAsWritten) {
  HttpClientRequest q;
  q.target = "/stream";
  std::vector<std::pair<double, std::string>> pieces;
  const auto t0 = Clock::now();
  const HttpClientResponse r = http_call("127.0.0.1", server_.port(), q, [&](const HttpClientResponse& h, std::string_view p) {
    EXPECT_EQ(h.status, 200);
    pieces.emplace_back(std::chrono::duration<double>(Clock::now() - t0).count(), std::string(p));
    return true;
  });
  EXPECT_TRUE(r.body.empty());
  std::string all;
  for (const auto& [t, p] : pieces) all += p;
  EXPECT_EQ(all, "data: chunk 0\n\ndata: chunk 1\n\ndata: chunk 2\n\n");
  ASSERT_GE(pieces.size(), 3u);
  EXPECT_LT(pieces[0].first, 0.25) << "the first chunk must not wait for the rest (300 ms apart)";
  // Stopping early returns at once.
  int n = 0;
  http_call("127.0.0.1", server_.port(), q, [&](const HttpClientResponse&, std::string_view) { return ++n < 1; });
  EXPECT_EQ(n, 1);
}

TEST_F(HttpClientTest, SilenceAbandonedOrTimedOut) {
  HttpClientRequest q;
  q.target = "/silent";
  std::atomic<int> asked{0};
  q.keep_waiting = [&] { return ++asked < 3; };
  auto t0 = Clock::now();
  try {
    http_call("127.0.0.1", server_.port(), q);
    FAIL() << "answered";
  } catch (const HttpClientError& e) {
    EXPECT_NE(std::string(e.what()).find("abandoned"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  q.keep_waiting = nullptr;
  q.idle_timeout_s = 0.5;
  t0 = Clock::now();
  EXPECT_THROW(http_call("127.0.0.1", server_.port(), q), HttpClientError);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, 0.5);
  EXPECT_LT(s, 2.0);
}

TEST(HttpClient, RefusedAndBadUrls) {
  uint16_t port = 0;
  {
    HttpServer s{HttpServerOptions{}};
    s.listen();
    port = s.port();
  }  // closed: nothing listens there now
  HttpClientRequest q;
  try {
    http_call("127.0.0.1", port, q);
    FAIL() << "connected";
  } catch (const HttpClientError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_base_url("http://127.0.0.1:8000/"), (std::pair<std::string, uint16_t>{"127.0.0.1", 8000}));
  for (const char* bad : {"127.0.0.1:80", "http://host", "http://host:0", "http://host:99999", "http://h:1/v1", "http://h:x"})
    EXPECT_THROW(parse_base_url(bad), InputError) << bad;
}

}  // namespace
}  // namespace tp
