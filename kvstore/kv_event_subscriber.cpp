#include "kvstore/kv_event_subscriber.h"

#include <zmq.h>

#include "common/error.h"

namespace tp {
namespace {

// One whole multipart message as frames; empty when none is waiting.
std::vector<std::string> recv_message(void* sock) {
  std::vector<std::string> frames;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return frames;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    const bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (!more) return frames;
  }
}

}  // namespace

KvEventSubscriber::KvEventSubscriber() : ctx_(zmq_ctx_new()) {}

KvEventSubscriber::~KvEventSubscriber() {
  for (auto& [k, s] : socks_) zmq_close(s.sock);
  zmq_ctx_term(ctx_);
}

void KvEventSubscriber::connect(int key, const std::string& endpoint, const std::string& topic) {
  disconnect(key);
  void* s = zmq_socket(ctx_, ZMQ_SUB);
  const int linger = 0, hwm = 100000;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic.data(), topic.size());
  if (zmq_connect(s, endpoint.c_str()) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    zmq_close(s);
    throw InputError("kv events endpoint '" + endpoint + "': cannot connect: " + err);
  }
  socks_[key] = Sub{s, endpoint, false, 0};
}

void KvEventSubscriber::disconnect(int key) {
  auto it = socks_.find(key);
  if (it == socks_.end()) return;
  zmq_close(it->second.sock);
  socks_.erase(it);
}

std::vector<ReceivedKvBatch> KvEventSubscriber::poll(int timeout_ms) {
  std::vector<ReceivedKvBatch> out;
  std::vector<zmq_pollitem_t> items;
  std::vector<int> keys;
  for (auto& [k, s] : socks_) {
    items.push_back({s.sock, 0, ZMQ_POLLIN, 0});
    keys.push_back(k);
  }
  if (items.empty()) {
    if (timeout_ms > 0) zmq_poll(nullptr, 0, timeout_ms);
    return out;
  }
  if (zmq_poll(items.data(), int(items.size()), timeout_ms) <= 0) return out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!(items[i].revents & ZMQ_POLLIN)) continue;
    Sub& s = socks_[keys[i]];
    for (;;) {
      std::vector<std::string> f = recv_message(s.sock);
      if (f.empty()) break;
      try {
        if (f.size() != 3)
          throw InputError("kv event message from " + s.endpoint + ": " + std::to_string(f.size()) +
                           " frames, expected 3 (topic, seq, payload)");
        ReceivedKvBatch r;
        r.key = keys[i];
        r.seq = decode_kv_event_seq(f[1]);
        r.batch = decode_kv_event_batch(f[2]);
        r.gap = s.seen && r.seq != s.last_seq + 1;
        s.seen = true;
        s.last_seq = r.seq;
        out.push_back(std::move(r));
      } catch (const InputError& e) {
        ++n_malformed_;
        last_error_ = e.what();
      }
    }
  }
  return out;
}

}  // namespace tp
