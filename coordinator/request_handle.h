// The engine requests an HTTP handler has submitted, as RAII handles: destroying a handle whose request has
// not finished aborts it (a client that went away, an exception on the handler's thread), so no request and
// no KV block outlives its handler. InFlightRequests tracks every live handle for a shutdown that must abort
// them all at its deadline.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include "coordinator/engine.h"

namespace tp {

class InFlightRequests {
 public:
  void add(int64_t id);
  void remove(int64_t id);
  void abort_all(Engine& engine) const;
  int64_t size() const;

 private:
  mutable std::mutex mu_;
  std::set<int64_t> ids_;
};

class RequestHandle {
 public:
  // Submits `r` with its outputs going to `queue` (which outlives the engine's last delivery: the callback
  // holds it). Throws what Engine::submit throws (FieldError, QueueFullError); nothing is tracked then.
  RequestHandle(Engine& engine, InFlightRequests& in_flight, Request r, std::shared_ptr<OutputQueue> queue);
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;
  ~RequestHandle();  // aborts the request unless finished()

  int64_t id() const { return id_; }
  // Every choice delivered its finished output: nothing is left to abort.
  void set_finished() { finished_ = true; }
  void abort(int32_t index = -1) { engine_.abort(id_, index); }

 private:
  Engine& engine_;
  InFlightRequests& in_flight_;
  int64_t id_ = -1;
  bool finished_ = false;
};

}  // namespace tp
