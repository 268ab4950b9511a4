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
  if (!std::isfinite(p.presence_penalty) || p.presence_penalty < -2 || p.presence_penalty > 2)
    throw InputError("presence_penalty must be in [-2, 2], got " + std::to_string(p.presence_penalty));
  if (!std::isfinite(p.frequency_penalty) || p.frequency_penalty < -2 || p.frequency_penalty > 2)
    throw InputError("frequency_penalty must be in [-2, 2], got " + std::to_string(p.frequency_penalty));
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0 || p.repetition_penalty > 2)
    throw InputError("repetition_penalty must be in (0, 2], got " + std::to_string(p.repetition_penalty));
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs)
    throw InputError("logprobs must be -1 (off) or in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                     std::to_string(p.logprobs));
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
