#include "coordinator/request_handle.h"

namespace tp {

void InFlightRequests::add(int64_t id) {
  std::lock_guard lk(mu_);
  ids_.insert(id);
}

void InFlightRequests::remove(int64_t id) {
  std::lock_guard lk(mu_);
  ids_.erase(id);
}

void InFlightRequests::abort_all(Engine& engine) const {
  std::lock_guard lk(mu_);
  for (const int64_t id : ids_) engine.abort(id);
}

int64_t InFlightRequests::size() const {
  std::lock_guard lk(mu_);
  return int64_t(ids_.size());
}

RequestHandle::RequestHandle(Engine& engine, InFlightRequests& in_flight, Request r, std::shared_ptr<OutputQueue> queue)
    : engine_(engine), in_flight_(in_flight) {
  r.on_output = [queue = std::move(queue)](const RequestOutput& o) { queue->push(o); };
  id_ = engine_.submit(std::move(r));
  in_flight_.add(id_);
}

RequestHandle::~RequestHandle() {
  if (!finished_) engine_.abort(id_);
  in_flight_.remove(id_);
}

}  // namespace tp
