#include "coordinator/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

namespace tp {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

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
  // Every read and write runs asynchronously on `io` in slices of kPollSlice (sync socket calls would block in
  // asio's own poll() however the socket's timeouts are set): after each slice of silence keep_waiting() is asked,
  // and idle_timeout_s of silence ends the call.
  auto silence = std::chrono::steady_clock::now();
  auto run = [&](auto&& start_op) {
    bool done = false;
    beast::error_code res;
    io.restart();
    start_op([&](const beast::error_code& e, std::size_t) {
      res = e;
      done = true;
    });
    while (!done) {
      io.run_for(std::chrono::milliseconds(int64_t(std::min(kPollSlice, req.idle_timeout_s) * 1000)));
      if (done) break;
      std::string why;
      if (req.keep_waiting && !req.keep_waiting()) why = "abandoned (the replica is down)";
      else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - silence).count() > req.idle_timeout_s)
        why = "no data for " + std::to_string(req.idle_timeout_s) + " s";
      if (why.empty()) continue;
      beast::error_code ignored;
      sock.close(ignored);
      io.restart();
      io.run();  // the cancelled operation's handler
      throw HttpClientError(where + ": " + why);
    }
    return res;
  };

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
  ec = run([&](auto h) { http::async_write(sock, r, h); });
  if (ec) throw HttpClientError(where + ": sending the request failed: " + ec.message());

  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none: Boost 1.74 compares a length > none as true
  silence = std::chrono::steady_clock::now();
  ec = run([&](auto h) { http::async_read_header(sock, buf, parser, h); });
  if (ec) throw HttpClientError(where + ": no response: " + ec.message());
  HttpClientResponse out;
  out.status = int(parser.get().result_int());
  out.content_type = std::string(parser.get()[http::field::content_type]);
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    silence = std::chrono::steady_clock::now();
    ec = run([&](auto h) { http::async_read_some(sock, buf, parser, h); });
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof chunk - parser.get().body().size;
    if (n > 0) {
      if (on_data) {
        if (!on_data(out, std::string_view(chunk, n))) break;
      } else {
        out.body.append(chunk, n);
      }
    }
    if (ec) throw HttpClientError(where + ": the response broke off: " + ec.message());
  }
  beast::error_code ignored;
  sock.shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

}  // namespace tp
