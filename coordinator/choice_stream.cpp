#include "coordinator/choice_stream.h"

#include <utility>

namespace tp {

using json = nlohmann::json;

ChoiceStream::ChoiceStream(const Tokenizer& tok, ChoiceOptions options)
    : tok_(tok),
      opt_(std::move(options)),
      piece_([&tok](int32_t t) { return tok.token_to_piece(t); }),
      dec_(tok, false),
      stop_(opt_.stop) {}

void ChoiceStream::begin(const RequestOutput& o, ChoiceDelta& d) {
  begun_ = true;
  d.text = opt_.echo;
  n_decoded_ = utf8_chars(opt_.echo) + opt_.continued_chars;
  if (!o.prompt_logprobs) return;
  if (opt_.echo_logprobs >= 0) append_prompt_logprobs(d.logprobs, piece_, opt_.prompt, *o.prompt_logprobs, opt_.echo_logprobs);
  if (opt_.prompt_logprobs >= 0)
    d.prompt_logprobs = prompt_lp_ = vllm_prompt_logprobs(piece_, opt_.prompt, *o.prompt_logprobs, opt_.prompt_logprobs);
}

ChoiceDelta ChoiceStream::push(const RequestOutput& o) {
  ChoiceDelta d;
  engine_done_ = engine_done_ || o.finished;
  if (finished()) return d;  // ended by a stop string; the engine's abort output follows
  if (!begun_) begin(o, d);
  n_generated_ = o.n_generated;
  d.token_ids = o.new_tokens;
  for (size_t k = 0; k < o.new_tokens.size(); ++k) {
    const int32_t t = o.new_tokens[k];
    if (!opt_.ignore_eos && tok_.is_eog(t)) continue;
    const std::string decoded = dec_.push(t);
    if (opt_.want_logprobs && k < o.logprobs.size())
      append_logprobs(d.logprobs, opt_.chat, piece_, t, o.logprobs[k], n_decoded_);
    n_decoded_ += utf8_chars(decoded);
    const StopMatcher::Result sr = stop_.push(decoded);
    d.text += sr.text;
    if (sr.stopped) {
      finish_ = "stop";
      break;
    }
  }
  if (!finished() && o.finished) {
    const StopMatcher::Result sr = stop_.push(dec_.flush());
    d.text += sr.text;
    d.text += stop_.flush();
    finish_ = sr.stopped ? "stop" : std::string(finish_reason_name(o.finish_reason));
    if (o.finish_reason == FinishReason::Error) error_ = o.error;
  }
  d.finish = finish_;
  d.stopped_by_string = finished() && !o.finished;
  text_ += d.text;
  extend_logprobs(logprobs_, d.logprobs);
  return d;
}

json ChoiceStream::logprobs() const {
  if (!opt_.want_logprobs && opt_.echo_logprobs < 0) return nullptr;
  return logprobs_.is_null() ? empty_logprobs(opt_.chat) : logprobs_;
}

}  // namespace tp
