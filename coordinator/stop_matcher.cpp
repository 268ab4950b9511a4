// Stop-string matching across decoded pieces (see stop_matcher.h).
#include "coordinator/stop_matcher.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace tp {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    stops_.push_back(std::move(stops[i]));
    stop_ids_.push_back(i);
  }
}

StopMatcher::Result StopMatcher::push(std::string_view new_text) {
  assert(!stopped_);
  Result r;
  if (stops_.empty()) {
    r.text.assign(new_text);
    return r;
  }
  held_.append(new_text);

  // Earliest full match of any stop. Every match starts inside held_ (see the invariant below), so
  // searching the whole buffer is complete.
  size_t best = std::string::npos;
  size_t best_stop = 0;
  for (size_t s = 0; s < stops_.size(); ++s) {
    size_t pos = held_.find(stops_[s]);
    if (pos < best) {
      best = pos;
      best_stop = s;
    }
  }
  if (best != std::string::npos) {
    r.text = held_.substr(0, best);
    r.stopped = true;
    r.stop_index = stop_ids_[best_stop];
    stopped_ = true;
    held_.clear();
    return r;
  }

  // Invariant: keep the longest suffix of held_ that is a proper prefix of some stop string; any later
  // match must start there. A suffix starting earlier than that cannot begin any stop.
  size_t keep = 0;
  for (const auto& stop : stops_) {
    size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace tp
