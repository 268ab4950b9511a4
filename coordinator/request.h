// What a client hands the engine (Request) and what it gets back, token by token (RequestOutput).
// The HTTP server builds a Request from prompt token ids and sampling options, calls Engine::submit, and
// receives RequestOutputs through the request's callback (on the engine thread) — OutputQueue is a
// ready-made thread-safe sink for a consumer on another thread.
//
// Timing: every RequestOutput carries the request's RequestTimes (steady clock), from which
//   TTFT     = first_token - arrival
//   mean ITL = (last_token - first_token) / (n_generated - 1)      (n_generated >= 2)
//   e2e      = last_token - arrival
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/sampling_params.h"
#include "common/token_logprobs.h"

namespace tp {

class CompiledConstraint;
struct KvImport;

using SteadyTime = std::chrono::steady_clock::time_point;

// Why a request ended. Stop: an end-of-generation token (emitted as the last token). Length: max_tokens
// reached. Abort: Engine::abort. Error: the executor failed (a rank died); the message says why.
enum class FinishReason : uint8_t { None, Stop, Length, Abort, Error };
// "", "stop", "length", "abort", "error" (OpenAI's finish_reason values where they exist).
std::string_view finish_reason_name(FinishReason r);

struct RequestTimes {
  SteadyTime arrival{};      // submit() returned
  SteadyTime scheduled{};    // first admitted by the scheduler (preemptions do not move it); epoch until then
  SteadyTime first_token{};  // first generated token emitted; epoch until then
  SteadyTime last_token{};   // latest generated token emitted; epoch until then
};

// One delivery for one choice of a request: the tokens generated since the previous delivery (usually one),
// and, on the choice's last delivery, finished = true with the reason. Finished deliveries may carry no token
// (abort). A request with n choices gets n finished deliveries, one per index.
struct RequestOutput {
  int64_t request_id = -1;
  int32_t index = 0;            // the choice, in [0, n)
  std::vector<int32_t> new_tokens;
  std::vector<TokenLogprobs> logprobs;  // [new_tokens.size()] when sampling.logprobs >= 0, else empty
  // Request::prompt_logprobs >= 0: on each choice's first delivery, [n_prompt] logprobs of the prompt tokens
  // (entry 0, the first token, has none and is not meaningful); null otherwise.
  std::shared_ptr<const std::vector<TokenLogprobs>> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string error;            // finish_reason == Error: what failed
  int64_t n_prompt_tokens = 0;
  int64_t n_generated = 0;      // generated so far by this choice, new_tokens included
  RequestTimes times;
};

// Called on the engine thread, never while the engine holds a lock (it may call submit/abort). Must not
// block for long: the whole batch waits.
using OutputCallback = std::function<void(const RequestOutput&)>;

struct Request {
  std::vector<int32_t> prompt;     // token ids, non-empty, each >= 0 (and < vocab when the engine knows it)
  SamplingParams sampling;         // validated by validate_sampling
  // Choices sampled from the prompt, in [1, max_num_seqs]. Choice i samples with seed sampling.seed + i. The
  // choices share the prompt's KV blocks (Scheduler: prefill once, then fork).
  int32_t n = 1;
  // >= 0; prompt + max_tokens <= the engine's max context. 0: the prompt is only prefilled (for its prompt
  // logprobs); each choice finishes with "length" and no token.
  int64_t max_tokens = 16;
  // k >= 0: the logprob, rank and top k of every prompt token after the first, computed in the prefill (the
  // request's prompt is then not served from the prefix cache: it is recomputed). -1: none.
  int32_t prompt_logprobs = -1;
  std::vector<LogitBias> logit_bias;  // added to the logits before sampling; ids in the vocabulary
  bool ignore_eos = false;         // true: only max_tokens (or abort) ends it
  // In [0, prompt size]: the prompt's last n tokens are earlier output of this generation (a resumed stream):
  // the penalties count them as output (Sequence::n_resumed_output).
  int64_t n_resumed_output = 0;
  std::vector<int32_t> eos_ids;    // extra stop tokens, on top of the engine's is_eog
  // Structured output (coordinator/structured_output.h): each choice's tokens follow this grammar — a token
  // bitmask at sampling — and the choice finishes ("stop") once the grammar accepted an end-of-generation
  // token. Null: unconstrained.
  std::shared_ptr<const CompiledConstraint> grammar;
  OutputCallback on_output;        // may be empty (the request runs; nothing is delivered)
  // KV blocks another replica holds for the prompt (coordinator/kv_import.h): fetched, or recomputed when the
  // cost says so or the fetch fails. Null: none.
  std::shared_ptr<const KvImport> kv_import;
};

// submit() when max_queued_requests are already waiting (HTTP 429). Not an InputError: the request is
// fine, the server is busy.
struct QueueFullError : Error {
  using Error::Error;
};

// Throws FieldError naming the first out-of-range field (check_sampling: the rules StepPlan deserialization
// applies too).
void validate_sampling(const SamplingParams& p);

// A thread-safe FIFO of outputs: the engine pushes (as a request's callback), another thread pops.
class OutputQueue {
 public:
  void push(const RequestOutput& out);
  // Waits up to `timeout` for an output; nullopt on timeout.
  std::optional<RequestOutput> pop(std::chrono::milliseconds timeout);
  std::optional<RequestOutput> try_pop();
  // A callback that pushes into this queue (the queue must outlive the request).
  OutputCallback sink() {
    return [this](const RequestOutput& o) { push(o); };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> q_;
};

}  // namespace tp
