// StepPlan: the one message the scheduler sends to every rank of a TP group per engine step (DESIGN §3), and
// StepResult: what TP rank 0 sends back. Plain values; serialized into one flat byte buffer and sent with two
// broadcasts (the size, then the bytes).
//
// Wire format (host byte order; the build requires a little-endian host), every integer fixed-width:
//   PlanHeader   magic "TPSP", version, kind, step_id, n_seqs, n_block_copies, total_bytes, checksum
//   SeqHeader    x n_seqs: seq_id, start_pos, n_tokens, n_blocks, n_history, n_history_prompt, sampling
//                params (penalties and logprobs included), want_logits, prompt_logprobs, n_prompt_targets,
//                n_logit_bias, n_token_bitmask, reserved
//   per seq      int32 tokens[n_tokens], int32 block_table[n_blocks], int32 history[n_history],
//                int32 prompt_targets[n_prompt_targets], {int32 token, float bias} logit_bias[n_logit_bias],
//                int32 token_bitmask[n_token_bitmask]
//   BlockCopy    x n_block_copies: int32 src, int32 dst
// checksum = FNV-1a 32 over every byte of the buffer except the checksum field itself, so any single
// corrupted byte is detected. deserialize validates every count against the buffer before reading, rejects
// trailing bytes and out-of-range values, and throws tp::Error on any malformed buffer — it never reads
// outside [data, data + size).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/block_copy.h"
#include "common/sampling_params.h"
#include "common/token_logprobs.h"

namespace tp {

class Communicator;

enum class StepKind : uint16_t {
  Run = 0,       // run the forward for `seqs` (after applying `block_copies`)
  Shutdown = 1,  // leave the worker loop; `seqs` is empty
  FetchKv = 2,   // `seqs` is empty; a KvFetchOrder (parallel/kv_fetch_order.h) follows in its own broadcast
};

// Values are validated on deserialize: sampling params by check_sampling (common/sampling_params.h); history
// and logit_bias only with want_logits, n_history_prompt <= the history size; prompt_logprobs in
// [-1, kMaxLogprobs], prompt_targets only with prompt_logprobs >= 0 and at most tokens.size() of them
// (tokens.size() - 1 with want_logits: the last row is the sampling row).

struct SeqPlan {
  int64_t seq_id = 0;                // >= 0, unique within the plan
  std::vector<int32_t> tokens;       // token ids (>= 0) scheduled this step, at positions start_pos + i
  int64_t start_pos = 0;             // >= 0; the position of tokens[0]
  std::vector<int32_t> block_table;  // physical KV block id (>= 0) of logical block i of the sequence
  bool want_logits = false;          // compute logits for the last token and sample it
  SamplingParams sampling;
  // Penalties need what the sequence holds so far: with want_logits and sampling.has_penalties(), the
  // scheduler sends every token of the sequence before the one being sampled (prompt, then output), and
  // how many of them are prompt. Empty otherwise. Only the sampling rank (TP rank 0) reads it:
  // Worker::lead keeps it out of the broadcast to the other ranks.
  std::vector<int32_t> history;
  int64_t n_history_prompt = 0;      // in [0, history.size()]
  // OpenAI logit_bias, added to the logits before penalties; only with want_logits (the leader keeps it).
  std::vector<LogitBias> logit_bias;
  // Structured output: the tokens the sequence's grammar allows next, [ceil(vocab / 32)] words, token t allowed
  // iff bit t % 32 of word t / 32 is set (ids past 32 x size are not allowed); empty: every token allowed.
  // Only with want_logits; applied before logit_bias and everything else (rank/token_bitmask.h). The leader
  // keeps it, like history.
  std::vector<int32_t> token_bitmask;
  // Prompt logprobs (echo + logprobs, vLLM's prompt_logprobs): with k = prompt_logprobs >= 0, row i of this
  // chunk (position start_pos + i) also yields the logprob, rank and top k of prompt_targets[i], the prompt
  // token at position start_pos + i + 1. The scheduler sends them while the prompt's logprobs are incomplete.
  int32_t prompt_logprobs = -1;
  std::vector<int32_t> prompt_targets;  // [m], m <= tokens.size() (m < tokens.size() with want_logits)
  // Rows of logits this sequence produces, in order: its m prompt rows, then the sampling row.
  int64_t n_logit_rows() const { return int64_t(prompt_targets.size()) + (want_logits ? 1 : 0); }
  bool operator==(const SeqPlan&) const = default;
};


struct StepPlan {
  uint64_t step_id = 0;
  StepKind kind = StepKind::Run;
  std::vector<SeqPlan> seqs;
  std::vector<BlockCopy> block_copies;

  // Sum of tokens over sequences.
  int64_t n_tokens() const;
  bool operator==(const StepPlan&) const = default;
};

inline constexpr uint32_t kStepPlanMagic = 0x50535054;  // "TPSP" in a little-endian dump
inline constexpr uint16_t kStepPlanVersion = 4;
// Refused by deserialize / broadcast_plan before allocating: a plan is KBs to a few MBs.
inline constexpr uint64_t kMaxStepPlanBytes = uint64_t(1) << 30;

std::vector<uint8_t> serialize(const StepPlan& plan);
// Throws tp::Error naming the field on a malformed buffer.
StepPlan deserialize_step_plan(std::span<const uint8_t> bytes);

// Collective over `comm`: on `root`, sends `plan`; on every other rank, replaces `plan` with root's.
// Two broadcasts: the byte size (uint64), then the bytes. Throws tp::Error (malformed or oversized buffer,
// or a failed collective).
void broadcast_plan(Communicator& comm, StepPlan& plan, int root);

// The prompt logprobs one sequence's chunk yielded: entries[i] is for the prompt token at first_position + i.
struct PromptLogprobs {
  int64_t seq_id = 0;
  int64_t first_position = 1;           // >= 1 (position 0 has no logprob)
  std::vector<TokenLogprobs> entries;   // [the chunk's prompt_targets.size()]
  bool operator==(const PromptLogprobs&) const = default;
};

// What TP rank 0 reports for one step: one sampled token per sequence that wanted logits, in plan order.
struct StepResult {
  uint64_t step_id = 0;
  std::vector<int64_t> seq_ids;  // [n] the sequences that sampled
  std::vector<int32_t> tokens;   // [n] token id sampled for seq_ids[i]
  // [n] for sequences whose sampling.logprobs >= 0: the sampled token's logprob and the top k; nullopt for
  // the others. Empty (size 0) when no sequence of the step asked.
  std::vector<std::optional<TokenLogprobs>> logprobs;
  // One entry per sequence of the plan that sent prompt_targets, in plan order.
  std::vector<PromptLogprobs> prompt_logprobs;
  bool operator==(const StepResult&) const = default;
};

inline constexpr uint32_t kStepResultMagic = 0x52535054;  // "TPSR"

// Same framing as the plan: magic, version, has_logprobs (0/1), step_id, n, total_bytes, checksum, reserved,
// n_prompt_logprobs, then int64 seq_ids[n], int32 tokens[n], then (has_logprobs == 1, i.e. logprobs non-empty) per
// entry: int32 k (-1: nullopt, nothing else follows) and a logprobs record; then n_prompt_logprobs times:
// int64 seq_id, int64 first_position, uint32 n_entries, n_entries logprobs records, each: int32 k, float
// logprob, int32 rank, int32 top_ids[k], float top_logprobs[k].
// Validated both ways: logprobs.size() is 0 or n, k in [0, kMaxLogprobs], top_ids >= 0, top_ids.size() ==
// top_logprobs.size(), every logprob -inf or finite and <= 1e-6 (the sampler clamps to <= 0), rank >= 1.
std::vector<uint8_t> serialize(const StepResult& result);
StepResult deserialize_step_result(std::span<const uint8_t> bytes);

}  // namespace tp
