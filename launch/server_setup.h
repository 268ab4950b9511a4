// What `tpserve serve` and `tpserve router` set up alike before they listen: the HTTP server's options from the
// config's server section, and the stop signals taken on the main thread.
#pragma once
#include <csignal>

#include "common/config.h"
#include "coordinator/http_server.h"

namespace tp {

// HttpServerOptions from `server:` (host, port, body limit, timeouts, connection cap).
HttpServerOptions http_server_options(const ServerSection& s);

// Blocks SIGINT and SIGTERM in this thread and every thread it starts (they are taken later by sigtimedwait on
// the returned set) and ignores SIGPIPE (a write to a closed client socket must not kill the process).
sigset_t block_stop_signals();

}  // namespace tp
