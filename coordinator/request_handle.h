// The engine requests an HTTP handler has submitted, as RAII handles: destroying a handle whose request has
// not finished aborts it (a client that went away, an exception on the handler's thread), so no request and
// no KV block outlives its handler. InFlightRequests tracks every live handle for a shutdown that must abort
// them all at its deadline, or fail them all at once when the engine cannot (fail_all: a rank died and the
// engine thread is stuck in a collective that will never return, so no abort or output can come from it).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <map>
#include <string>

#include "coordinator/engine.h"

namespace tp {

class InFlightRequests {
 public:
  // Request `id` with `n` choices whose outputs go to `queue`.
  void add(int64_t id, int32_t n, std::weak_ptr<OutputQueue> queue);
  void remove(int64_t id);
  void abort_all(Engine& engine) const;
  // Pushes a finished output with FinishReason::Error and `error` for every choice of every tracked request
  // straight into its queue, bypassing the engine (any thread). A handler then ends its response with an
  // error event + [DONE] (stream) or an error JSON; later outputs of a closed choice are ignored.
  void fail_all(const std::string& error) const;
  int64_t size() const;

 private:
  struct Tracked {
    int32_t n = 1;
    std::weak_ptr<OutputQueue> queue;
  };
  mutable std::mutex mu_;
  std::map<int64_t, Tracked> ids_;
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
