// A small HTTP/1.1 server on Boost.Beast: keep-alive, a router (method + path -> handler), a request body
// limit (413 as an OpenAI error), and chunked streaming responses (Server-Sent Events).
//
// Threads: one I/O thread (Asio) accepts connections and reads requests asynchronously, so an idle keep-alive
// connection costs no thread. Each complete request is handled on a thread of its own, which may block
// (waiting for the engine) without stalling other clients, writes the response with Beast's synchronous API,
// and hands the connection back to the I/O thread for its next request. At most max_connections connections
// are open at once; more get 503 and are closed. A connection gets request_timeout_s to deliver each whole
// request (headers and body), the idle wait for the next keep-alive request included; past it the socket is
// closed, so slow or silent clients cannot hold connection slots (slowloris). Handlers and responses are not
// timed.
//
// A handler either returns an HttpResponse, or starts a chunked stream on the ResponseStream it is given
// (start() then write() per chunk; the server sends the terminating chunk after the handler returns, and the
// returned HttpResponse is then ignored). peer_closed() tells a long-running handler, without blocking,
// that the client went away, so it can abort its work.
//
// Lifecycle: start() binds (port 0: any free port; port() then says which) and begins accepting;
// stop_accepting() closes the listening socket; n_active_requests() counts handlers running now; stop()
// closes every connection (a pending read or a blocked write fails), waits up to 10 s for the handlers to
// notice, and joins all threads. Not restartable.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace tp {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent: path + query
  std::string path;     // target without the query string
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  // The value of a header (name in any case), empty when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// A chunked response under construction; the connection's thread only.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Sends the status line and headers (Transfer-Encoding: chunked). False when the client is gone.
  virtual bool start(int status, const std::string& content_type) = 0;
  // One chunk. False when the client is gone (the handler should stop and clean up).
  virtual bool write(std::string_view data) = 0;
  virtual bool started() const = 0;
  // True when the peer closed its side or the connection failed (non-blocking check).
  virtual bool peer_closed() = 0;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&, ResponseStream&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                    // 0: any free port
  int64_t max_body_bytes = 8 << 20;     // larger bodies get 413
  int max_connections = 1024;
  double request_timeout_s = 60.0;      // receive one request within this; 0: no limit
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before start(). Unknown path -> 404, known path with another method -> 405 (OpenAI JSON).
  void route(const std::string& method, const std::string& path, HttpHandler handler);
  // Called after every response with its status (for metrics); optional.
  void on_response(std::function<void(int)> cb) { on_response_ = std::move(cb); }

  // Binds and listens; throws InputError naming host:port when it cannot.
  void start();
  uint16_t port() const { return port_; }
  void stop_accepting();
  int n_active_requests() const { return n_active_.load(); }
  void stop();

 private:
  struct Connection;
  void accept_next();                                          // I/O thread
  void read_next(const std::shared_ptr<Connection>& c);        // I/O thread: async read of the next request
  void serve_request(const std::shared_ptr<Connection>& c);    // a handler thread: one request, its response
  void close(const std::shared_ptr<Connection>& c);
  void reap_finished();                                        // I/O thread: forgets closed connections
  int prune_closed_idle();                                     // I/O thread: marks idle ones the client left done
  int n_connections();

  HttpServerOptions opt_;
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;  // path -> method -> handler
  std::function<void(int)> on_response_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> n_active_{0};
  std::thread io_thread_;
  bool stopped_ = false;
  std::mutex mu_;  // guards conns_
  std::list<std::shared_ptr<Connection>> conns_;
};

// One Server-Sent Event carrying `data`: "data: <data>\n\n".
std::string sse_event(std::string_view data);

}  // namespace tp
