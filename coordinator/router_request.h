// What the router needs to know about one generation request, and the bodies it sends to replicas:
//   route_info   the prompt's token ids (rendered and tokenized exactly as a replica does, coordinator/
//                generation_job.h), its chained block hashes (the replicas' BlockManager hash, so they match the
//                KV events), and the load it puts on a replica (prompt + max_tokens).
//   forward_body the client's body as the replica gets it: on a stream that can resume, return_token_ids (the
//                router replays a broken stream from them) and a seed when the client gave none (the router picks
//                it, so a continuation samples as the unbroken run: the draw depends only on seed and absolute
//                position, rank/sampler.h); kv_transfer_params.fetch_from when told.
//   replay_body  the continuation of one choice of a broken stream: the forwarded body (same endpoint, same
//                fields, same seed) plus tpserve_continuation = the choice's tokens already output (router_stream.h
//                says which), which the replica takes as output already sent (openai_request.h): prompt + those
//                tokens re-prefilled, counted by max_tokens, the penalties and usage, only what follows streamed —
//                in the original response's shape, logprobs included; without prompt_logprobs (the client has
//                them from the choice's first chunk). Choice i of an n > 1 request continues as
//                an n = 1 request with seed + i: the engine samples choice i with seed + i (request.h), each
//                choice on its own (its own history, the draw at its own positions). With several prompts
//                (completions), choice j * n + i continues as prompt j alone (the client's own element of
//                "prompt"), n = 1, seed + i (every prompt's choice i samples with seed + i).
// A body the router cannot tokenize (a bad field, an unknown model) is still forwarded: the replica answers with
// its own error JSON, so clients see the same errors as from `tpserve serve`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator/chat_template.h"
#include "coordinator/tokenizer.h"

namespace tp {

struct RouteInfo {
  bool chat = false;
  bool stream = false;
  bool tokenized = false;              // false: the body did not parse here (forwarded as it is, not replayable mid-stream)
  bool replayable = false;             // a stream can resume (not a continuation itself)
  bool include_usage = false;          // stream_options.include_usage
  bool prompt_logprobs = false;        // prompt_logprobs asked for
  int32_t n_choices = 1;               // n (per prompt)
  int32_t n_prompts = 1;               // completions' prompts; prompt j's choice i has index j * n + i
  // [n_prompts] each prompt's token count, completions echo bytes and echo logprobs entries (as echo_bytes and
  // echo_logprobs below, which are prompt 0's).
  std::vector<int64_t> prompt_sizes, prompt_echo_bytes, prompt_echo_logprobs;
  // Why a stream of this request cannot resume on another replica, as the error its client gets names it
  // ("its own continuation", ...); "" when replayable.
  std::string not_replayable;
  bool client_wants_token_ids = false; // the client asked for return_token_ids itself
  std::vector<int32_t> prompt;         // token ids of the (first) prompt
  std::vector<uint64_t> chain;         // chained hashes of its full blocks, block 0 first
  int64_t max_tokens = -1;             // -1: not given
  int64_t load_tokens = 0;             // prompt + max_tokens (max_tokens absent: kDefaultLoadTokens)
  bool ignore_eos = false;
  int64_t echo_bytes = 0;              // completions echo: the prompt text leading the output
  int64_t echo_logprobs = 0;           // completions echo + logprobs: the prompt's entries leading the logprobs
  std::optional<uint64_t> seed;        // picked by the router (a resumable stream without a client seed)
};

inline constexpr int64_t kDefaultLoadTokens = 256;

// `body` is the parsed JSON of a completions (chat = false) or chat completions request.
RouteInfo route_info(const nlohmann::json& body, bool chat, const Tokenizer& tok, const ChatTemplate& tmpl,
                     int64_t max_context, int64_t block_size);

// The chained block hashes (BlockManager's default_block_hash from kRootHash) of the full blocks of `tokens`.
std::vector<uint64_t> block_chain(const std::vector<int32_t>& tokens, int64_t block_size);

// fetch_from: a base URL, or empty for none.
std::string forward_body(nlohmann::json body, const RouteInfo& info, const std::string& fetch_from);

// The resumption of choice `choice` (prompt choice / n's choice choice % n) of `original` after `output`, the generated tokens it continues after
// (route_info(original).replayable must hold; `output` may be empty: the client has the echo, if any, and
// nothing else). from_start: the client has nothing of the choice, not even its echo: no continuation.
std::string replay_body(const nlohmann::json& original, const RouteInfo& info, int32_t choice,
                        const std::vector<int32_t>& output, bool from_start = false);

}  // namespace tp
