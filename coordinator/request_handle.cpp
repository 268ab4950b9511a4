#include "coordinator/request_handle.h"

namespace tp {

void InFlightRequests::add(int64_t id, int32_t n, std::weak_ptr<OutputQueue> queue) {
  std::lock_guard lk(mu_);
  ids_[id] = Tracked{n, std::move(queue)};
}

void InFlightRequests::remove(int64_t id) {
  std::lock_guard lk(mu_);
  ids_.erase(id);
}

void InFlightRequests::abort_all(Engine& engine) const {
  std::lock_guard lk(mu_);
  for (const auto& [id, t] : ids_) engine.abort(id);
}

void InFlightRequests::fail_all(const std::string& error) const {
  std::lock_guard lk(mu_);
  for (const auto& [id, t] : ids_) {
    const std::shared_ptr<OutputQueue> q = t.queue.lock();
    if (!q) continue;
    for (int32_t i = 0; i < t.n; ++i) {
      RequestOutput o;
      o.request_id = id;
      o.index = i;
      o.finished = true;
      o.finish_reason = FinishReason::Error;
      o.error = error;
      q->push(o);
    }
  }
}

int64_t InFlightRequests::size() const {
  std::lock_guard lk(mu_);
  return int64_t(ids_.size());
}

RequestHandle::RequestHandle(Engine& engine, InFlightRequests& in_flight, Request r, std::shared_ptr<OutputQueue> queue)
    : engine_(engine), in_flight_(in_flight) {
  const int32_t n = r.n;
  std::weak_ptr<OutputQueue> weak = queue;
  r.on_output = [queue = std::move(queue)](const RequestOutput& o) { queue->push(o); };
  id_ = engine_.submit(std::move(r));
  in_flight_.add(id_, n, std::move(weak));
}

RequestHandle::~RequestHandle() {
  if (!finished_) engine_.abort(id_);
  in_flight_.remove(id_);
}

}  // namespace tp
