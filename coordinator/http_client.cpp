#include "coordinator/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>

namespace tp {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

HttpUrl parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw InputError("URL '" + url + "' does not start with http://");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos)
    throw InputError("URL '" + url + "' is not http://HOST:PORT");
  HttpUrl u;
  u.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw InputError("URL '" + url + "': port '" + port + "' is not a number");
  const long p = std::stol(port);
  if (p < 1 || p > 65535) throw InputError("URL '" + url + "': port " + port + " is outside [1, 65535]");
  u.port = uint16_t(p);
  return u;
}

HttpClientResponse http_post_json(const HttpUrl& url, const std::string& path, const std::string& body,
                                  std::chrono::milliseconds timeout) {
  const std::string where = "http://" + url.host + ":" + std::to_string(url.port) + path;
  asio::io_context io;
  beast::tcp_stream stream(io);
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, url.host);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  std::optional<beast::error_code> failed;
  asio::ip::tcp::resolver resolver(io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) throw Error("POST " + where + ": cannot resolve " + url.host + ": " + ec.message());
  stream.expires_after(timeout);  // one deadline for the whole exchange
  stream.async_connect(endpoints, [&](beast::error_code e, const asio::ip::tcp::endpoint&) {
    if (e) return void(failed = e);
    http::async_write(stream, req, [&](beast::error_code e2, size_t) {
      if (e2) return void(failed = e2);
      http::async_read(stream, buf, res, [&](beast::error_code e3, size_t) { failed = e3; });
    });
  });
  io.run();
  if (!failed || *failed)
    throw Error("POST " + where + ": " + (failed ? failed->message() : std::string("no response")));
  return {int(res.result_int()), res.body()};
}

}  // namespace tp
