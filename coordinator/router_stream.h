// The router's side of one streamed generation: it cuts the replica's SSE bytes into events, keeps what the
// client has been sent (the generated token ids, from return_token_ids; the bytes of text; the logprobs entries;
// whether the choice finished; whether [DONE] came), and rewrites each event for the client: token_ids removed
// unless the client asked for them, and, after a replay, the continuation's chunks (the original endpoint's
// shape: router_request.h replay_body) given the original response's id, created and model, its role chunk
// dropped (chat: the client has one).
// Where a replay resumes: a replica sends a token's id (and its logprobs) at once but may hold its text back (a
// partial stop-string match, an incomplete UTF-8 character), and that text dies with it. So the continuation
// starts after the longest prefix of the received ids whose text the client has entirely (decoded as the
// replicas do: IncrementalDecoder without special tokens, end-of-generation tokens dropped unless ignore_eos;
// nothing left pending; before an end-of-generation token); the tokens after it are generated again (greedy or seeded: the same ones), and the
// router drops from the continuation what the client already has — the first `skip` text bytes (the sent part
// of a token whose text was cut), the ids and the logprobs entries it was already sent.
// One stream, one thread.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/tokenizer.h"

namespace tp {

// Splits a byte stream into SSE events' data ("data: X\n\n" -> "X"); other lines are dropped.
class SseSplitter {
 public:
  // Appends `bytes`; returns the data of every event completed by them.
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string buf_;
};

struct StreamEvent {
  enum class Kind { Chunk, Done, Error } kind = Kind::Chunk;
  std::string out;  // what to send the client (empty: nothing)
};

class StreamTracker {
 public:
  // echo_bytes: the size of the completions echo (the prompt's text) that leads choice 0's text; 0: none.
  // echo_logprobs: the prompt's entries leading choice 0's logprobs (completions echo + logprobs); 0: none.
  StreamTracker(bool chat, bool client_wants_token_ids, int64_t echo_bytes = 0, int64_t echo_logprobs = 0)
      : chat_(chat), keep_ids_(client_wants_token_ids), echo_left_(echo_bytes), echo_lp_left_(echo_logprobs) {}

  // One event's data from the replica. After begin_replay(), chunks are the continuation's and are rewritten.
  StreamEvent on_event(const std::string& data);
  // The next events come from a replay on another replica: cuts resume_tokens() back to what the client has
  // as text (see above). `tok` must be the replicas' tokenizer.
  void begin_replay(const Tokenizer& tok, bool ignore_eos);
  // The client has no part of the echo yet (no chunk came): the replay is the original request again (it
  // echoes), not a continuation.
  bool replay_from_start() const { return echo_left_ > 0; }

  // Choice 0's generated ids a continuation starts after: all received so far, or after begin_replay() the
  // resumption point plus the continuation's ids.
  const std::vector<int32_t>& resume_tokens() const { return tokens_; }
  int64_t text_bytes() const { return text_bytes_; }  // choice 0's text the client got (echo excluded)
  bool finished() const { return finished_; }  // choice 0 got its finish_reason
  bool done() const { return done_; }          // [DONE] seen
  int64_t n_chunks() const { return n_chunks_; }

 private:
  const bool chat_, keep_ids_;
  int64_t echo_left_;              // echo bytes still to come in choice 0's text
  int64_t echo_lp_left_;           // echo logprobs entries still to come in choice 0's logprobs
  bool replaying_ = false, finished_ = false, done_ = false, role_sent_ = false;
  std::vector<int32_t> tokens_;
  int64_t text_bytes_ = 0;         // choice 0's text bytes the client got, echo excluded
  int64_t ids_sent_ = 0;           // choice 0's token ids the client got
  int64_t skip_bytes_ = 0;         // continuation text bytes the client already has
  int64_t skip_ids_ = 0;           // continuation ids the client already has
  int64_t lp_sent_ = 0;            // choice 0's output logprobs entries the client got (echo's excluded)
  int64_t skip_lp_ = 0;            // continuation logprobs entries the client already has
  int64_t n_chunks_ = 0;
  // The original response's identity, taken from its first chunk.
  nlohmann::json id_, created_, model_;
};

}  // namespace tp
