// A minimal blocking HTTP/1.1 client for replica-to-replica calls (the KV export of another replica): one request
// per connection, a JSON body, a deadline on connect + write + read. Not for streaming responses.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace tp {

// "http://HOST:PORT" (an optional trailing '/'; no path, no https). Throws InputError naming the URL otherwise.
struct HttpUrl {
  std::string host;
  uint16_t port = 0;
};
HttpUrl parse_http_url(const std::string& url);

struct HttpClientResponse {
  int status = 0;
  std::string body;
};

// POSTs `body` (Content-Type: application/json) to url.host:url.port + path. Throws Error naming the URL when the
// connection fails, the deadline passes, or the response is not HTTP.
HttpClientResponse http_post_json(const HttpUrl& url, const std::string& path, const std::string& body,
                                  std::chrono::milliseconds timeout);

}  // namespace tp
