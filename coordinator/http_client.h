// A blocking HTTP/1.1 client on Boost.Beast for the router's calls to its replicas: one request per connection
// (Connection: close), the response body delivered piece by piece as it arrives (a streamed SSE response is
// forwarded while it is being generated). Every socket operation runs on a private io_context in slices of
// kPollSlice, so a replica that stops answering costs at most `idle_timeout_s` of silence (or less, when
// keep_waiting says to give up), never a hang.
// Thread-safe: every call has its own socket.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace tp {

// The replica could not be reached, or the connection failed or timed out before the whole response arrived.
struct HttpClientError : Error {
  using Error::Error;
};

// "http://host:port" (an optional trailing "/"; no path) -> host, port. Throws InputError naming `url`.
std::pair<std::string, uint16_t> parse_base_url(const std::string& url);

struct HttpClientRequest {
  std::string method = "GET";
  std::string target = "/";                                  // path + query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Content-Type: application/json is set
                                                             // for a non-empty body unless given)
  double connect_timeout_s = 2.0;
  double idle_timeout_s = 30.0;  // longest silence while sending or receiving
  // Asked every kPollSlice of silence while waiting for the response; false abandons the call (HttpClientError
  // "abandoned"): the router gives up on a replica its health checks marked down. Empty: wait idle_timeout_s.
  std::function<bool()> keep_waiting;
};
inline constexpr double kPollSlice = 0.25;  // seconds

struct HttpClientResponse {
  int status = 0;
  std::string content_type;
  std::string body;  // empty when on_data took the body
};

// Sends `req` to host:port. Without `on_data` the whole body is returned; with it, each piece of the body goes to
// on_data as it arrives (the body field stays empty) — on_data returning false closes the connection early
// (the call then returns normally). on_data is called only after the status line and headers are read (status
// and content type are set when it runs). Throws HttpClientError on a connection failure or timeout.
using HttpDataFn = std::function<bool(const HttpClientResponse& head, std::string_view piece)>;
HttpClientResponse http_call(const std::string& host, uint16_t port, const HttpClientRequest& req,
                             const HttpDataFn& on_data = {});

}  // namespace tp
