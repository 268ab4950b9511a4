// A small HTTP/1.1 server on Boost.Beast: keep-alive, a router (method + path -> handler), a request body
// limit (413 as an OpenAI error), and chunked streaming responses (Server-Sent Events).
//
// Threads: one I/O thread (Asio) accepts connections and reads requests asynchronously, so an idle keep-alive
// connection costs no thread. Each complete request is handled on a thread of its own, which may block
// (waiting for the engine) without stalling other clients, writes the response with Beast's synchronous API,
// and hands the connection back to the I/O thread for its next request.
//
// Timeouts (each 0: none):
//   request_timeout_s    receiving one request, headers and body, from its first byte (a new connection: from
//                        the connect); past it the socket is closed (slowloris).
//   keepalive_timeout_s  the idle wait for the first byte of the next request on a kept-alive connection; past
//                        it the connection is closed.
//   send_timeout_s       one write (a whole plain response, or one chunk, or the chunked header) must complete
//                        within it; past it the connection is shut down, the write fails and so does every
//                        later one (a handler sees write() == false and ResponseStream::peer_closed() == true).
//                        Checked every min(250 ms, send_timeout_s / 4).
// Connection cap: at most max_connections connections are served at once. A new connection past the cap first
// evicts the oldest connection waiting for a request (idle keep-alive, or connected but silent); when none is
// waiting it is served from a reserve of kHealthReserve connections that may only ask GET /health (anything
// else gets 503, connection closed; it must send its request within kReserveReadTimeout); past that reserve
// it gets 503 at once and is closed.
// A request body over max_body_bytes gets 413 with Connection: close; the rest of the body is not read: the
// server half-closes, waits up to kErrorLinger for the client to close (so it can read the 413), then closes.
//
// A handler either returns an HttpResponse, or starts a chunked stream on the ResponseStream it is given
// (start() then write() per chunk; the server sends the terminating chunk after the handler returns; the
// returned HttpResponse's body is then ignored, its `log` is still read). peer_closed() tells a long-running
// handler, without blocking, that the client went away (a reset, or a failed write), so it can abort its work.
// A client that half-closes (shutdown(SHUT_WR)) after sending its request is not gone: it gets its response.
// A client that fully closes is seen at the next write (its kernel answers with a reset).
//
// Access log: after every finished request (and every 503 at the cap) each hook added with add_access_hook()
// gets an AccessRecord, on the thread that served it (hooks must be thread-safe and must not throw).
//
// Lifecycle: listen() binds and listens (port 0: any free port; port() then says which); start() listens if
// not done yet and begins accepting; stop_accepting() closes the listening socket; n_active_requests() counts
// handlers running now; stop() closes every connection (a pending read or a blocked write fails), waits up to
// 10 s for the handlers to notice, and joins all threads. Not restartable.
#pragma once
#include <atomic>
#include <chrono>
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

// What a handler reports about a request for the access log (it fills what applies; the defaults mean n/a).
struct ResponseLog {
  std::string request_id;                   // e.g. "cmpl-..." (empty: none)
  int64_t n_prompt_tokens = 0;
  int64_t n_output_tokens = 0;              // generated tokens, every choice
  double ttft_s = -1.0;                     // time to first token in seconds; negative: n/a
  std::string error;                        // why the request failed (a streamed error, an abort), else empty
  std::vector<std::string> ignored_fields;  // request fields accepted but ignored, by name
};

struct HttpResponse {
  HttpResponse() = default;
  HttpResponse(int status_, std::string content_type_, std::string body_,
               std::vector<std::pair<std::string, std::string>> headers_ = {})
      : status(status_), content_type(std::move(content_type_)), body(std::move(body_)), headers(std::move(headers_)) {}
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  ResponseLog log;                                           // read by the server even for a streamed response
};

// One finished request, for the access log and metrics.
struct AccessRecord {
  std::string method;       // empty when no request was read (a 503 at the connection cap, a garbled request)
  std::string path;         // without the query string; empty as above
  int status = 0;           // the status sent (a stream: the one start() sent)
  double duration_s = 0;    // from the request's first byte (or the accept) to its response's last byte
  std::string peer;         // "ip:port" of the client
  int64_t bytes_sent = 0;   // bytes written to the socket for this response: headers, body, chunk framing
  bool complete = true;     // false: the connection failed before the whole response was written
  // The message of a response the server generated or translated from an ApiException (400 malformed, 404,
  // 405, 413, 500, 503) and of a send timeout; empty otherwise (see log.error for the handler's own).
  std::string error;
  ResponseLog log;          // what the handler reported (defaults when no handler ran)
};
using AccessHook = std::function<void(const AccessRecord&)>;

// A chunked response under construction; the connection's thread only.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Sends the status line and headers (Transfer-Encoding: chunked). False when the client is gone.
  virtual bool start(int status, const std::string& content_type) = 0;
  // One chunk. False when the client is gone (the handler should stop and clean up).
  virtual bool write(std::string_view data) = 0;
  virtual bool started() const = 0;
  // True when the connection failed: a reset from the peer, a failed write, or a send timeout (non-blocking
  // check). A half-close (the client shut down its sending side) is not a failure.
  virtual bool peer_closed() = 0;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&, ResponseStream&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                    // 0: any free port
  int64_t max_body_bytes = 8 << 20;     // larger bodies get 413
  int max_connections = 1024;
  double request_timeout_s = 60.0;      // receive one request within this, from its first byte; 0: no limit
  double keepalive_timeout_s = 5.0;     // close a kept-alive connection idle this long; 0: never
  double send_timeout_s = 30.0;         // close a connection when one write takes longer; 0: no limit
};

// Past max_connections: connections that may still ask GET /health, and how long they get to send it.
constexpr int kHealthReserve = 8;
constexpr double kReserveReadTimeout = 2.0;  // seconds
// After an error that closes the connection with request bytes unread (413): how long to wait for the client to
// close before the server does.
constexpr double kErrorLinger = 0.5;  // seconds

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before start(). Unknown path -> 404, known path with another method -> 405 (OpenAI JSON).
  void route(const std::string& method, const std::string& path, HttpHandler handler);
  // Adds a hook called once per finished request (see AccessRecord); before start(). Hooks run in the order
  // added, on the thread that served the request.
  void add_access_hook(AccessHook hook) { access_hooks_.push_back(std::move(hook)); }

  // Binds and listens (no accepting yet: connections wait in the backlog); throws InputError naming host:port
  // and the OS error when it cannot. Idempotent.
  void listen();
  // listen() if not done, then begins accepting.
  void start();
  uint16_t port() const { return port_; }
  void stop_accepting();
  int n_active_requests() const { return n_active_.load(); }
  // Connections in the cap waiting for a request (idle keep-alive, or connected but silent: the ones a new
  // connection past the cap may evict). Any thread.
  int n_waiting_connections();
  // Open connections in the health reserve (past the cap; answered and closed). Any thread.
  int n_reserve_connections();
  void stop();

 private:
  struct Connection;
  using Clock = std::chrono::steady_clock;
  void accept_next();                                          // I/O thread
  // I/O thread: waits for the first byte of the next request (fresh: a new connection), then reads it.
  void wait_request(const std::shared_ptr<Connection>& c, bool fresh);
  void read_request(const std::shared_ptr<Connection>& c, Clock::time_point deadline);  // I/O thread
  void arm_timer(const std::shared_ptr<Connection>& c, Clock::time_point deadline);     // I/O thread
  void serve_request(const std::shared_ptr<Connection>& c);    // a handler thread: one request, its response
  void close(const std::shared_ptr<Connection>& c);
  void reap_finished();                                        // I/O thread: forgets closed connections
  int prune_closed_idle();                                     // I/O thread: marks idle ones the client left done
  bool evict_oldest_waiting();                                 // I/O thread: closes one waiting connection
  void sweep_send_timeouts();                                  // I/O thread, periodic
  void notify(const AccessRecord& r);
  int n_served_connections(int* n_reserve = nullptr);          // connections in the cap; those in the reserve

  HttpServerOptions opt_;
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;  // path -> method -> handler
  std::vector<AccessHook> access_hooks_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  bool listening_ = false;
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
