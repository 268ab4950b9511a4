#include "launch/server_setup.h"

#include <pthread.h>

namespace tp {

HttpServerOptions http_server_options(const ServerSection& s) {
  HttpServerOptions ho;
  ho.host = s.host;
  ho.port = uint16_t(s.port);
  ho.max_body_bytes = s.max_body_bytes;
  ho.request_timeout_s = s.request_timeout_s;
  ho.keepalive_timeout_s = s.keepalive_timeout_s;
  ho.send_timeout_s = s.send_timeout_s;
  ho.max_connections = int(s.max_connections);
  return ho;
}

sigset_t block_stop_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

}  // namespace tp
