// Structured output through the Engine: each constrained choice gets its next-token bitmask in its SeqPlan,
// its matcher advances with every sampled token, and it finishes "stop" once the grammar accepted the
// end-of-generation token (also with ignore_eos); n > 1 forks get their own matchers; an executor that ignores
// the mask ends the choice with an error naming the grammar; max_tokens still cuts an incomplete output.
// The executor samples among the tokens the mask allows (a different one per sequence and position), over a
// byte vocabulary (ids 0..255 the bytes, 256 the end-of-text control token).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/unicode_bytes.h"
#include "coordinator/engine.h"
#include "coordinator/structured_output.h"
#include "coordinator/tokenizer.h"

namespace tp {
namespace {

constexpr int32_t kEos = 256;

TokenizerData byte_vocab() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) d.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
  d.tokens.emplace_back("<|endoftext|>");
  d.token_types.assign(d.tokens.size(), TokenType::Normal);
  d.token_types[kEos] = TokenType::Control;
  d.eos_id = kEos;
  return d;
}

// Samples the ((seq_id * 7 + position) % n)-th allowed token of the mask; 'z' when there is no mask (or always,
// with ignore_mask).
class MaskExecutor final : public StepExecutor {
 public:
  void execute(StepPlan& plan, StepResult& result) override {
    result = {};
    for (const SeqPlan& sp : plan.seqs) {
      if (!sp.want_logits) continue;
      int32_t token = 'z';
      if (!sp.token_bitmask.empty()) {
        ++n_masks;
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < int32_t(sp.token_bitmask.size()) * 32; ++t)
          if ((uint32_t(sp.token_bitmask[size_t(t / 32)]) >> (t % 32)) & 1u) allowed.push_back(t);
        if (!ignore_mask && !allowed.empty())
          token = allowed[size_t((sp.seq_id * 7 + sp.start_pos + int64_t(sp.tokens.size())) % int64_t(allowed.size()))];
      }
      result.seq_ids.push_back(sp.seq_id);
      result.tokens.push_back(token);
    }
  }
  void shutdown() override {}
  bool ignore_mask = false;
  int64_t n_masks = 0;
};

EngineConfig config() {
  EngineConfig e;
  e.scheduler.n_blocks = 64;
  e.scheduler.block_size = 4;
  e.scheduler.max_context = 64;
  e.scheduler.max_num_seqs = 8;
  e.scheduler.max_num_batched_tokens = 64;
  e.max_queued_requests = 8;
  e.vocab = 257;
  e.is_eog = [](int32_t t) { return t == kEos; };
  return e;
}

struct Choice {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::None;
  std::string error;
};

// Runs one request to the end; choices by index.
std::map<int32_t, Choice> run(MaskExecutor& ex, Request r) {
  Engine engine(config(), ex);
  std::map<int32_t, Choice> out;
  r.on_output = [&out](const RequestOutput& o) {
    Choice& c = out[o.index];
    c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    if (o.finished) {
      c.reason = o.finish_reason;
      c.error = o.error;
    }
  };
  engine.submit(std::move(r));
  engine.run_until_idle();
  return out;
}

std::string text_of(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens)
    if (t < 256) s += char(t);
  return s;
}

class EngineStructuredOutput : public ::testing::Test {
 protected:
  Tokenizer tok{byte_vocab()};
  StructuredOutputCompiler compiler{tok, 257};
  Request request(std::vector<std::string> choices, int32_t n, int64_t max_tokens) {
    Request r;
    r.prompt = {'q', ':'};
    r.n = n;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::Choice;
    c.choices = std::move(choices);
    c.param = "guided_choice";
    r.grammar = compiler.compile(c);
    return r;
  }
};

TEST_F(EngineStructuredOutput, EveryChoiceFollowsTheGrammarAndStopsAtItsEnd) {
  MaskExecutor ex;
  const std::vector<std::string> words = {"alpha", "beta", "gamma", "delta"};
  const auto out = run(ex, request(words, 4, 40));
  ASSERT_EQ(out.size(), 4u);
  std::set<std::string> seen;
  for (const auto& [index, c] : out) {
    EXPECT_EQ(c.reason, FinishReason::Stop) << index;
    ASSERT_FALSE(c.tokens.empty());
    EXPECT_EQ(c.tokens.back(), kEos) << index;
    const std::string text = text_of(c.tokens);
    EXPECT_NE(std::find(words.begin(), words.end(), text), words.end()) << text;
    seen.insert(text);
  }
  EXPECT_GT(seen.size(), 1u);  // the forks' own matchers: the choices differ
  EXPECT_GT(ex.n_masks, 4 * 4);
}

TEST_F(EngineStructuredOutput, TheGrammarEndsTheOutputEvenWithIgnoreEos) {
  MaskExecutor ex;
  Request r = request({"yes", "no"}, 1, 40);
  r.ignore_eos = true;
  const auto out = run(ex, std::move(r));
  EXPECT_EQ(out.at(0).reason, FinishReason::Stop);
  const std::string text = text_of(out.at(0).tokens);
  EXPECT_TRUE(text == "yes" || text == "no") << text;
}

TEST_F(EngineStructuredOutput, MaxTokensCutsAnIncompleteOutput) {
  MaskExecutor ex;
  const auto out = run(ex, request({"abcdefgh"}, 1, 3));
  EXPECT_EQ(out.at(0).reason, FinishReason::Length);
  EXPECT_EQ(text_of(out.at(0).tokens), "abc");
}

TEST_F(EngineStructuredOutput, ATokenTheGrammarRefusesEndsTheChoiceWithAnError) {
  MaskExecutor ex;
  ex.ignore_mask = true;  // always samples 'z'
  const auto out = run(ex, request({"yes", "no"}, 2, 10));
  for (const auto& [index, c] : out) {
    EXPECT_EQ(c.reason, FinishReason::Error) << index;
    EXPECT_NE(c.error.find("grammar does not allow"), std::string::npos) << c.error;
  }
}

TEST_F(EngineStructuredOutput, UnconstrainedRequestsGetNoMask) {
  MaskExecutor ex;
  Request r = request({"x"}, 1, 5);
  r.grammar = nullptr;
  const auto out = run(ex, std::move(r));
  EXPECT_EQ(ex.n_masks, 0);
  EXPECT_EQ(text_of(out.at(0).tokens), "zzzzz");
}

}  // namespace
}  // namespace tp
