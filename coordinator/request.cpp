#include "coordinator/request.h"


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
  if (auto bad = check_sampling(p)) throw FieldError(bad->field, bad->message);
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
