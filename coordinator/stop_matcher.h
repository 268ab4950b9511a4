// Stop strings on a streamed, detokenized text: the text a request may emit is everything before the first
// occurrence of any stop string; the stop string itself and everything after it are never emitted.
// Matching spans token boundaries: push() receives each new piece of decoded text (valid UTF-8 as an
// IncrementalDecoder hands it out) and returns the part that is safe to emit now. Only the minimal suffix
// that could still begin a stop string is held back, so streaming is delayed no more than necessary.
//
//   StopMatcher m({"\n\n", "User:"});
//   for each piece: auto r = m.push(piece); send(r.text); if (r.stopped) { finish("stop"); break; }
//   at the natural end (EOS / length): send(m.flush());
//
// Costs: push() is O((held + new) * total stop length); held < longest stop string.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

class StopMatcher {
 public:
  struct Result {
    std::string text;                     // safe to emit now (possibly empty)
    bool stopped = false;                 // a stop string matched; text is everything before it
    std::optional<size_t> stop_index;     // which stop matched (index into the constructor's list)
  };

  // Empty strings in `stops` are ignored; no stops means push() passes text straight through.
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Precondition: !stopped(). Feeds the next decoded piece.
  Result push(std::string_view new_text);
  // The held-back text when generation ends without a stop (empty once stopped). Leaves the matcher empty.
  std::string flush();

  bool stopped() const { return stopped_; }
  size_t n_held() const { return held_.size(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::vector<size_t> stop_ids_;  // stops_ index -> index in the constructor's list
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tp
