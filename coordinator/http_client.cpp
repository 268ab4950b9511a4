#include "coordinator/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <chrono>

namespace tp {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

void set_timeouts(tcp::socket& s, double seconds) {
  timeval tv{};
  tv.tv_sec = time_t(seconds);
  tv.tv_usec = suseconds_t((seconds - double(tv.tv_sec)) * 1e6);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

std::pair<std::string, uint16_t> parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw InputError("replica URL '" + url + "': expected http://host:port");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos)
    throw InputError("replica URL '" + url + "': expected http://host:port (a port, no path)");
  const std::string port = rest.substr(colon + 1);
  int64_t p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') throw InputError("replica URL '" + url + "': port '" + port + "' is not a number");
    p = p * 10 + (c - '0');
    if (p > 65535) break;
  }
  if (port.empty() || p < 1 || p > 65535) throw InputError("replica URL '" + url + "': port out of range [1, 65535]");
  return {rest.substr(0, colon), uint16_t(p)};
}

HttpClientResponse http_call(const std::string& host, uint16_t port, const HttpClientRequest& req,
                             const HttpDataFn& on_data) {
  const std::string where = host + ":" + std::to_string(port) + " " + req.method + " " + req.target;
  net::io_context io;
  tcp::socket sock(io);
  beast::error_code ec;
  {
    // Connect with a deadline: an async connect run for at most connect_timeout_s.
    tcp::resolver resolver(io);
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) throw HttpClientError(where + ": cannot resolve: " + ec.message());
    bool done = false;
    net::async_connect(sock, endpoints, [&](const beast::error_code& e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    io.run_for(std::chrono::milliseconds(int64_t(req.connect_timeout_s * 1000)));
    if (!done) {
      sock.close();
      throw HttpClientError(where + ": connect timed out after " + std::to_string(req.connect_timeout_s) + " s");
    }
    if (ec) throw HttpClientError(where + ": cannot connect: " + ec.message());
  }
  set_timeouts(sock, req.idle_timeout_s);

  http::request<http::string_body> r{http::verb::get, req.target, 11};
  r.method_string(req.method);
  r.set(http::field::host, host + ":" + std::to_string(port));
  r.set(http::field::connection, "close");
  bool has_type = false;
  for (const auto& [k, v] : req.headers) {
    r.set(k, v);
    has_type = has_type || beast::iequals(k, "content-type");
  }
  if (!req.body.empty() && !has_type) r.set(http::field::content_type, "application/json");
  r.body() = req.body;
  r.prepare_payload();
  http::write(sock, r, ec);
  if (ec) throw HttpClientError(where + ": sending the request failed: " + ec.message());

  // Reads in slices of kPollSlice: a timed-out read (EAGAIN) leaves the parser and buffer as they were, so it is
  // simply retried until idle_timeout_s of silence, or until keep_waiting() says to give up.
  set_timeouts(sock, std::min(kPollSlice, req.idle_timeout_s));
  auto silence = std::chrono::steady_clock::now();
  auto timed_out = [&](const beast::error_code& e) {
    if (e != net::error::would_block && e != net::error::try_again && e != net::error::timed_out) return false;
    if (req.keep_waiting && !req.keep_waiting()) throw HttpClientError(where + ": abandoned (the replica is down)");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - silence).count() > req.idle_timeout_s)
      throw HttpClientError(where + ": no data for " + std::to_string(req.idle_timeout_s) + " s");
    return true;
  };
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  for (;;) {
    ec = {};
    http::read_header(sock, buf, parser, ec);
    if (!ec || !timed_out(ec)) break;
  }
  if (ec) throw HttpClientError(where + ": no response: " + ec.message());
  HttpClientResponse out;
  out.status = int(parser.get().result_int());
  out.content_type = std::string(parser.get()[http::field::content_type]);
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    ec = {};
    http::read_some(sock, buf, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof chunk - parser.get().body().size;
    if (ec && timed_out(ec) && n == 0) continue;
    if (ec && n == 0) throw HttpClientError(where + ": the response broke off: " + ec.message());
    if (n == 0) continue;
    silence = std::chrono::steady_clock::now();
    if (on_data) {
      if (!on_data(out, std::string_view(chunk, n))) break;
    } else {
      out.body.append(chunk, n);
    }
  }
  beast::error_code ignored;
  sock.shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

}  // namespace tp
