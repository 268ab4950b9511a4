// The router's side of one streamed generation: it cuts the replica's SSE bytes into events, keeps what the
// client has been sent of each choice (the generated token ids, from return_token_ids; the bytes of text; the
// logprobs entries; whether the choice finished; whether [DONE] came), and rewrites each event for the client:
// token_ids removed unless the client asked for them, and, after a replay, the continuation's chunks (the
// original endpoint's shape, one choice at a time: router_request.h replay_body) given the original response's
// id, created, model and the choice's index, its role chunk dropped (chat: the client has one).
// Where a replay resumes: a replica sends a token's id (and its logprobs) at once but may hold its text back (a
// partial stop-string match, an incomplete UTF-8 character), and that text dies with it. So the continuation
// starts after the longest prefix of the received ids whose text the client has entirely (decoded as the
// replicas do: IncrementalDecoder without special tokens, end-of-generation tokens dropped unless ignore_eos;
// nothing left pending; before an end-of-generation token); the tokens after it are generated again (greedy or seeded: the same ones), and the
// router drops from the continuation what the client already has — the first `skip` text bytes (the sent part
// of a token whose text was cut), the ids and the logprobs entries it was already sent.
// Usage (stream_options.include_usage): after a replay the continuations' usage chunks are not passed on; the
// client gets ONE usage chunk before [DONE], as the unfailed run's: prompt tokens once (a continuation's
// prompt_tokens, which excludes its continued output; else the router's count), completion tokens summed over
// the choices (a choice's continuation's completion_tokens, which include its continued output; else the ids
// it received).
// Tool calls (a chat stream with tools): a replica holds back the text that may be a call and sends the calls
// when the choice ends (tool_call_response.h): per call a header chunk (index k, id, type, function.name) then
// its arguments in fragments, then finish_reason "tool_calls". That text is not content the client has, so a
// replay resumes before it, and the continuation (its parser primed with the continued text) sends every call
// again; the router drops the headers the client has (so each call keeps the id the client saw: no id to
// rewrite, nothing to tell the replica) and, per call, the argument bytes it has; a chunk left with nothing is
// not sent.
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
  // n_choices: the response's choices (n), indices [0, n). echo_bytes: the size of the completions echo (the
  // prompt's text) that leads each choice's text; 0: none. echo_logprobs: the prompt's entries leading each
  // choice's logprobs (completions echo + logprobs); 0: none.
  // include_usage: the client asked for a usage chunk; n_prompt_tokens: the router's count of the prompt (used
  // only when no continuation reported one). prompt_logprobs: the client asked for them (they come with each
  // choice's first output chunk; a continuation is sent without the field, router_request.h).
  StreamTracker(bool chat, bool client_wants_token_ids, int32_t n_choices = 1, int64_t echo_bytes = 0,
                int64_t echo_logprobs = 0, bool include_usage = false, int64_t n_prompt_tokens = 0,
                bool prompt_logprobs = false);

  // One event's data from the replica. After continue_choice(i), the events are an n = 1 continuation of
  // choice i: its index 0 becomes i, its chunks get the original response's identity, and its [DONE] goes to
  // the client only when every choice has finished.
  StreamEvent on_event(const std::string& data);
  // The next events come from replays on other replicas: cuts each unfinished choice's resume_tokens() back to
  // what the client has as text (see above). `tok` must be the replicas' tokenizer.
  void begin_replay(const Tokenizer& tok, bool ignore_eos);
  // Several prompts (completions): choice k is prompt k / n_per_prompt's, led by that prompt's echo (bytes, and
  // logprobs entries) [prompt]; the usage chunk counts the prompt tokens as the constructor's n_prompt_tokens
  // (every prompt's), not as a continuation's (its one prompt).
  void set_prompts(int32_t n_per_prompt, const std::vector<int64_t>& echo_bytes,
                   const std::vector<int64_t>& echo_logprobs);
  // The first choice without its finish_reason; -1 when all have one.
  int32_t next_choice() const;
  // The next events are a continuation of choice i alone (begin_replay() came first).
  void continue_choice(int32_t i);
  // Choice i's client has no part of its echo, or not its prompt_logprobs, yet (no output chunk came): its replay
  // is the request again (it echoes, it computes them), not a continuation.
  bool replay_from_start(int32_t i = 0) const {
    const Choice& ch = choices_.at(size_t(i));
    return ch.echo_left > 0 || (prompt_logprobs_ && !ch.prompt_lp_sent);
  }

  // Choice i's generated ids a continuation starts after: all received so far, or after begin_replay() the
  // resumption point plus the continuation's ids.
  const std::vector<int32_t>& resume_tokens(int32_t i = 0) const { return choices_.at(size_t(i)).tokens; }
  // Choice i's text the client got (echo excluded).
  int64_t text_bytes(int32_t i = 0) const { return choices_.at(size_t(i)).text_bytes; }
  // Choice i's tool calls whose header the client got: the argument bytes it got of each.
  const std::vector<int64_t>& tool_call_bytes(int32_t i = 0) const { return choices_.at(size_t(i)).tool_args; }
  bool finished() const { return next_choice() < 0; }  // every choice got its finish_reason
  // Every choice finished but the stream did not close (no [DONE]; after a replay, or the replica died before
  // it): the usage chunk the client is owed, if any, and [DONE]. Marks done().
  std::string close();
  bool choice_finished(int32_t i) const { return choices_.at(size_t(i)).finished; }
  bool done() const { return done_; }                  // [DONE] sent to the client
  bool segment_done() const { return segment_done_; }  // the current replica's response ended with [DONE]
  int64_t n_chunks() const { return n_chunks_; }
  // Chunks that carried generated output (a choice's token ids, text past the echo, or its finish_reason): the
  // first one says the replica has computed the prompt.
  int64_t n_output_chunks() const { return n_output_chunks_; }

 private:
  struct Choice {
    int64_t echo_left = 0;         // echo bytes still to come in its text
    int64_t echo_lp_left = 0;      // echo logprobs entries still to come in its logprobs
    bool finished = false, role_sent = false;
    bool prompt_lp_sent = false;   // a chunk carried its prompt_logprobs
    std::vector<int32_t> tokens;
    int64_t text_bytes = 0;        // text bytes the client got, echo excluded
    int64_t ids_sent = 0;          // token ids the client got
    int64_t skip_bytes = 0;        // continuation text bytes the client already has
    int64_t skip_ids = 0;          // continuation ids the client already has
    int64_t lp_sent = 0;           // output logprobs entries the client got (echo's excluded)
    int64_t skip_lp = 0;           // continuation logprobs entries the client already has
    int64_t usage_completion = -1; // completion_tokens of its continuation's usage chunk; -1: none came
    std::vector<int64_t> tool_args;  // [k] for each tool call whose header the client has: its argument bytes sent
    std::vector<int64_t> tool_skip;  // after begin_replay: [k] argument bytes of the continuation's call k the
                                     // client has; its size: the calls whose header the client has
  };
  // Tracks and rewrites a chat delta's tool_calls; true when it carried some (the chunk is output).
  static bool on_tool_calls(Choice& ch, nlohmann::json& delta);
  // Takes a usage chunk `j` (choices []): passed on from the original response, kept from a continuation.
  StreamEvent on_usage(nlohmann::json& j);
  // Tracks and rewrites one choice object of a chunk; false: drop the chunk (a role chunk the client has).
  // `output`: set when it carried generated output (token ids, text past the echo, a finish_reason).
  bool on_choice(Choice& ch, nlohmann::json& c, bool& output);

  const bool chat_, keep_ids_;
  std::vector<Choice> choices_;
  bool done_ = false, segment_done_ = false;
  int32_t current_ = -1;           // the choice a continuation is of; -1: the original response
  int64_t n_chunks_ = 0;
  int64_t n_output_chunks_ = 0;
  const bool include_usage_, prompt_logprobs_;
  const int64_t n_prompt_tokens_;
  bool usage_sent_ = false;        // the client has a usage chunk
  bool several_prompts_ = false;
  int64_t usage_prompt_ = -1;      // prompt_tokens of a continuation's usage chunk; -1: none came
  // The original response's identity, taken from its first chunk.
  nlohmann::json id_, created_, model_;
};

}  // namespace tp
