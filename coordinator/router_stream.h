// The router's side of one streamed generation: it cuts the replica's SSE bytes into events, keeps what the
// client has been sent (the generated token ids, from return_token_ids; whether the choice finished; whether
// [DONE] came), and rewrites each event for the client: token_ids removed unless the client asked for them, and,
// after a replay, the continuation's /v1/completions chunks put back into the original response's shape (its
// id, object, created, model; chat: delta.content instead of text).
// One stream, one thread.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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
  StreamTracker(bool chat, bool client_wants_token_ids) : chat_(chat), keep_ids_(client_wants_token_ids) {}

  // One event's data from the replica. After begin_replay(), chunks are the continuation's and are rewritten.
  StreamEvent on_event(const std::string& data);
  // The next events come from a replay on another replica.
  void begin_replay() { replaying_ = true; }

  const std::vector<int32_t>& sent_tokens() const { return tokens_; }  // choice 0's generated ids so far
  bool finished() const { return finished_; }  // choice 0 got its finish_reason
  bool done() const { return done_; }          // [DONE] seen
  int64_t n_chunks() const { return n_chunks_; }

 private:
  const bool chat_, keep_ids_;
  bool replaying_ = false, finished_ = false, done_ = false;
  std::vector<int32_t> tokens_;
  int64_t n_chunks_ = 0;
  // The original response's identity, taken from its first chunk.
  nlohmann::json id_, created_, model_;
};

}  // namespace tp
