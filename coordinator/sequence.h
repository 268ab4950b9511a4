// The scheduler's state of one request: its tokens (prompt, then generated), stop rules, and bookkeeping.
// Owned by the Scheduler while waiting or running; handed back to the Engine when it finishes.
//
// Token accounting (positions are indices into `tokens`):
//   tokens      = prompt [n_prompt] ++ generated [n_generated()]
//   computed    = positions whose K/V is in the cache (BlockManager::n_computed while running; 0 waiting)
//   remaining   = tokens.size() - computed; a decode has remaining == 1 (its last sampled token)
// The newest generated token is never computed before the next step samples from it, so a running
// sequence always has remaining >= 1. After preemption (recompute) computed drops to 0 — or to the
// prefix-cache hit on readmission — and the whole of `tokens` is computed again; tokens already
// delivered are never delivered again.
//
// Choices (n > 1). A request with n choices enters as one sequence (choice 0) holding the ids of the n - 1
// others in `pending_forks`. While forks are pending, the scheduler computes only tokens[0, n_prompt - 1):
// once they are computed, each pending choice is forked from it (BlockManager::fork: the prompt's blocks are
// shared), and every choice computes the last prompt token on its own (copy-on-write) last block and samples
// its own first token. After the fork the choices are independent sequences.
//
// Prompt logprobs (prompt_logprobs >= 0): the sequence that prefills the prompt collects them in prompt_lp,
// filled in position order ([1, prompt_lp_end)); while incomplete the scheduler asks the ranks for them
// (SeqPlan::prompt_targets) and does not serve the prompt from the prefix cache. Forked choices share the
// finished vector. Each choice delivers it once, with its first output.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/kv_import.h"
#include "coordinator/request.h"
#include "coordinator/structured_output.h"

namespace tp {

struct PendingFork {
  int64_t seq_id = -1;
  int32_t index = 0;
};

struct Sequence {
  int64_t id = -1;               // sequence id (the scheduler's and the StepPlan's), unique
  int64_t request_id = -1;       // the Engine request it belongs to
  int32_t index = 0;             // its choice in the request, in [0, n)
  std::vector<PendingFork> pending_forks;
  std::vector<int32_t> tokens;   // [n_prompt + n_generated]
  int64_t n_prompt = 0;
  int64_t n_resumed_output = 0;  // the prompt's last n tokens are earlier output (a resumed stream): the
                                 // penalties count them as output, everything else counts them as prompt
  SamplingParams sampling;
  int64_t max_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  std::vector<LogitBias> logit_bias;
  std::shared_ptr<const CompiledConstraint> grammar;  // null: unconstrained
  std::shared_ptr<ConstraintMatcher> matcher;         // with grammar: this choice's state (own per choice)
  OutputCallback on_output;
  RequestTimes times;
  std::shared_ptr<const KvImport> kv_import;  // blocks another replica offers for the prompt (kv_import.h); null: none

  int32_t prompt_logprobs = -1;                           // k, or -1: none wanted (or not this sequence's job)
  std::shared_ptr<std::vector<TokenLogprobs>> prompt_lp;  // [n_prompt] when the request wants them
  int64_t prompt_lp_end = 1;                              // positions [1, prompt_lp_end) are filled
  bool prompt_lp_sent = false;                            // delivered with this choice's first output

  int64_t admit_order = -1;      // increases with every (re)admission; the preemption victim has the largest
  int64_t n_preemptions = 0;     // times this sequence was preempted
  bool ever_admitted = false;

  int64_t n_generated() const { return int64_t(tokens.size()) - n_prompt; }
  // Tokens the scheduler may compute before the next fork or sample: all of them, or while forks are pending,
  // all but the last prompt token.
  int64_t n_schedulable() const { return int64_t(tokens.size()) - (pending_forks.empty() ? 0 : 1); }
  // Must the next prefill chunks yield prompt logprobs?
  bool needs_prompt_logprobs() const { return prompt_logprobs >= 0 && prompt_lp_end < n_prompt; }
};

}  // namespace tp
