#include "coordinator/request.h"

#include <cmath>

namespace tp {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
  }
  return "";
}

void validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    throw InputError("temperature must be finite and >= 0, got " + std::to_string(p.temperature));
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1)
    throw InputError("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) throw InputError("top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1)
    throw InputError("min_p must be in [0, 1], got " + std::to_string(p.min_p));
}

void OutputQueue::push(const RequestOutput& out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(out);
  }
  cv_.notify_one();
}

std::optional<RequestOutput> OutputQueue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !q_.empty(); })) return std::nullopt;
  RequestOutput out = std::move(q_.front());
  q_.pop_front();
  return out;
}

std::optional<RequestOutput> OutputQueue::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (q_.empty()) return std::nullopt;
  RequestOutput out = std::move(q_.front());
  q_.pop_front();
  return out;
}

}  // namespace tp
