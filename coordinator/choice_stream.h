// One choice of a generation turned into what a client reads: its engine outputs (RequestOutput, token by
// token) are detokenized incrementally, cut at stop strings (the stop string is not emitted), and their
// logprobs put into OpenAI's shapes (openai_logprobs.h). push() returns what this output adds — the delta a
// stream sends — and the choice also keeps the whole text and logprobs for a non-streamed response.
// Echo (completions): the prompt text, and with echo_logprobs >= 0 the prompt tokens' logprobs, come first,
// with the choice's first output (which carries the prompt logprobs when the request asked for them).
// Connection thread only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/openai_logprobs.h"
#include "coordinator/request.h"
#include "coordinator/stop_matcher.h"
#include "coordinator/tokenizer.h"

namespace tp {

struct ChoiceOptions {
  bool chat = false;
  bool ignore_eos = false;          // false: end-of-generation tokens are not part of the text
  std::vector<std::string> stop;    // stop strings
  bool want_logprobs = false;       // the sampled tokens' logprobs (they arrive with each output)
  std::string echo;                 // text before the completion's (completions echo)
  int64_t continued_chars = 0;      // characters of the choice's text a continuation's client already has
                                    // (JobPrompt::continued_chars): text_offset starts after them
  int32_t echo_logprobs = -1;       // >= 0: the prompt tokens (top k) lead the logprobs
  int32_t prompt_logprobs = -1;     // >= 0: vLLM's prompt_logprobs list (top k)
  std::vector<int32_t> prompt;      // the prompt's token ids (for the two above)
};

// What one output adds to a choice.
struct ChoiceDelta {
  std::string text;                 // new text (may be empty)
  nlohmann::json logprobs;          // the logprobs of that text, same shape as the choice's; null: none
  nlohmann::json prompt_logprobs;   // vLLM's list, on the choice's first delta only; null otherwise
  std::string finish;               // set on the delta that ended the choice: "stop", "length", "abort", "error"
  bool stopped_by_string = false;   // a stop string ended it while the engine still runs it: abort that choice
  std::vector<int32_t> token_ids;   // the engine output's new token ids this delta consumed (EOG included)
  bool empty() const { return text.empty() && logprobs.is_null() && prompt_logprobs.is_null(); }
};

class ChoiceStream {
 public:
  ChoiceStream(const Tokenizer& tok, ChoiceOptions options);

  // Takes this choice's next engine output. After the choice finished (a stop string), outputs still
  // arriving from the engine return an empty delta.
  ChoiceDelta push(const RequestOutput& o);

  bool finished() const { return !finish_.empty(); }
  // The engine delivered this choice's finished output (nothing is left running for it).
  bool engine_done() const { return engine_done_; }
  const std::string& finish_reason() const { return finish_; }
  const std::string& error() const { return error_; }  // finish_reason() == "error": why
  int64_t n_generated() const { return n_generated_; }
  const std::string& text() const { return text_; }    // echo included
  // The whole logprobs object; null when not wanted; an empty object when wanted but nothing came.
  nlohmann::json logprobs() const;
  const nlohmann::json& prompt_logprobs() const { return prompt_lp_; }

 private:
  void begin(const RequestOutput& o, ChoiceDelta& d);  // echo and prompt logprobs, with the first output

  const Tokenizer& tok_;
  const ChoiceOptions opt_;
  const TokenPiece piece_;
  IncrementalDecoder dec_;
  StopMatcher stop_;
  bool begun_ = false;
  bool engine_done_ = false;
  std::string finish_, error_, text_;
  int64_t n_generated_ = 0;
  int64_t n_decoded_ = 0;           // characters of text_ so far (completions' text_offset)
  nlohmann::json logprobs_, prompt_lp_;
};

}  // namespace tp
