#include "kvstore/kv_event_publisher.h"

#include <zmq.h>

#include <chrono>

#include "common/error.h"

namespace tp {

KvEventPublisher::KvEventPublisher(const std::string& endpoint, std::string topic) : topic_(std::move(topic)) {
  ctx_ = zmq_ctx_new();
  sock_ = zmq_socket(ctx_, ZMQ_PUB);
  const int hwm = 100000, linger = 0;
  zmq_setsockopt(sock_, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(sock_, endpoint.c_str()) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    zmq_close(sock_);
    zmq_ctx_term(ctx_);
    throw InputError("kv_events.endpoint '" + endpoint + "': cannot bind: " + err);
  }
  char buf[256];
  size_t n = sizeof buf;
  zmq_getsockopt(sock_, ZMQ_LAST_ENDPOINT, buf, &n);
  endpoint_ = std::string(buf, n > 0 && buf[n - 1] == '\0' ? n - 1 : n);
}

KvEventPublisher::~KvEventPublisher() {
  zmq_close(sock_);
  zmq_ctx_term(ctx_);
}

void KvEventPublisher::publish(const std::vector<KvEvent>& events) {
  if (events.empty()) return;
  KvEventBatch b;
  b.ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  b.events = events;
  const std::string payload = encode_kv_event_batch(b);
  const std::string seq = encode_kv_event_seq(seq_++);
  zmq_send(sock_, topic_.data(), topic_.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(sock_, seq.data(), seq.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(sock_, payload.data(), payload.size(), ZMQ_DONTWAIT);
}

}  // namespace tp
