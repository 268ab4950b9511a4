// Per-step cost of structured output beside unconstrained decoding, measured side by side in one run on the
// real forward: B sequences decode greedily, one token each a step, through Worker::lead (forward + sampling),
//   unconstrained   the plain step
//   constrained     the same step with each sequence's grammar: ConstraintMatcher::fill_next_mask into
//                   SeqPlan::token_bitmask (the engine's fill_token_masks), the leader's apply_token_bitmasks
//                   inside lead, and ConstraintMatcher::accept of the sampled token (the engine's postprocess)
// Reported per step (mean over steps and repetitions): total ms of each mode, and of the constrained one the
// mask fill, accept and apply parts (apply timed on its own over the same rows); overhead = constrained /
// unconstrained - 1. Both modes of a repetition decode over the same positions (same context lengths), in
// alternating order. A sequence whose grammar completes starts a fresh matcher (the context keeps growing).
// Also the compile time of the schema (first compile, uncached) and of a cache hit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/structured_output.h"
#include "coordinator/tokenizer.h"
#include "launch/cli_args.h"
#include "launch/model_group.h"
#include "rank/token_bitmask.h"

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
              "required": ["city", "zip"]},
  "active": {"type": "boolean"}}, "required": ["name", "age", "tags", "address", "active"]})";

int run(int argc, char** argv) {
  using tp::OptionSpec;
  const tp::CommandSpec spec{
      "structured_output_bench",
      "per-step cost of structured output (mask fill + apply + accept) beside unconstrained decoding",
      {OptionSpec::required_value("model", "PATH", "GGUF file or HF model directory"),
       OptionSpec::value("batch", "B", "1", "sequences decoded per step"),
       OptionSpec::value("threads", "N", "1", "compute threads"),
       OptionSpec::value("steps", "G", "64", "decode steps per repetition and mode"),
       OptionSpec::value("reps", "R", "3", "repetitions of both modes after one warm-up")}};
  std::vector<std::string> args(argv + 1, argv + argc);
  const tp::CliArgs a(spec, args);
  if (a.help()) {
    std::fputs(tp::usage_text(spec).c_str(), stdout);
    return 0;
  }
  tp::Config cfg;
  cfg.model.path = a.required("model");
  const int64_t batch = a.integer("batch", 1, 256), steps = a.integer("steps", 1, 4096);
  const int reps = int(a.integer("reps", 1, 100));
  cfg.cache.memory_mb = 512;
  tp::ModelGroup g(&argc, &argv, cfg, int(a.integer("threads", 1, 1024)));
  const tp::Tokenizer tok(g.file->tokenizer());
  const int64_t vocab = g.model->config().vocab;

  auto t0 = clock_type::now();
  tp::StructuredOutputCompiler compiler(tok, vocab);
  const double tokenizer_info_ms = ms_since(t0);
  tp::OutputConstraint oc{tp::OutputConstraint::Kind::JsonSchema, kSchema, {}, "bench"};
  t0 = clock_type::now();
  const auto grammar = compiler.compile(oc);
  const double compile_ms = ms_since(t0);
  t0 = clock_type::now();
  compiler.compile(oc);
  const double cached_ms = ms_since(t0);

  // B sequences, each over its own blocks; prompt: one BOS-like token, then decode.
  const int64_t bs = g.pool->shape().block_size;
  const int64_t cap = 1 + int64_t(reps + 1) * steps;
  const int64_t blocks_per_seq = (cap + bs - 1) / bs;
  if (blocks_per_seq * batch > g.pool->shape().n_blocks) throw tp::InputError("the KV pool is too small: lower --steps");
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(int32_t(s * blocks_per_seq + b));
  std::vector<int32_t> last(static_cast<size_t>(batch), tok.encode("{", false, false).front());
  std::vector<int64_t> pos(static_cast<size_t>(batch), 0);
  std::vector<std::unique_ptr<tp::ConstraintMatcher>> matchers(static_cast<size_t>(batch));
  for (auto& m : matchers) m = std::make_unique<tp::ConstraintMatcher>(grammar);

  struct Totals {
    double step_ms = 0, fill_ms = 0, accept_ms = 0, apply_ms = 0;
    int64_t n_steps = 0, n_allowed = 0, n_completed = 0;
  };
  Totals plain, constrained;
  tp::StepResult result;
  
  std::vector<float> probe(static_cast<size_t>(vocab * batch));
  for (int r = -1; r < reps; ++r) {
    // Both modes decode over the same positions (the second overwrites the first's KV), so neither pays for a
    // longer context; the order alternates between repetitions.
    const std::vector<int64_t> pos0 = pos;
    const std::vector<int32_t> last0 = last;
    for (const bool masked : {r % 2 != 0, r % 2 == 0}) {
      pos = pos0;
      last = last0;
      Totals& t = masked ? constrained : plain;
      for (int64_t i = 0; i < steps; ++i) {
        const auto s0 = clock_type::now();
        tp::StepPlan plan;
        double fill = 0;
        for (int64_t s = 0; s < batch; ++s) {
          tp::SeqPlan& sp = plan.seqs.emplace_back();
          sp.seq_id = s;
          sp.tokens = {last[size_t(s)]};
          sp.start_pos = pos[size_t(s)];
          sp.block_table = tables[size_t(s)];
          sp.want_logits = true;
          sp.sampling.temperature = 0.0f;
          if (masked) {
            const auto f0 = clock_type::now();
            sp.token_bitmask.resize(size_t(matchers[size_t(s)]->n_mask_words()));
            matchers[size_t(s)]->fill_next_mask(sp.token_bitmask.data());
            fill += ms_since(f0);
          }
        }
        g.worker->lead(plan, result);
        double accept = 0;
        for (int64_t s = 0; s < batch; ++s) {
          last[size_t(s)] = result.tokens[size_t(s)];
          ++pos[size_t(s)];
          if (!masked) continue;
          const auto a0 = clock_type::now();
          if (!matchers[size_t(s)]->accept(last[size_t(s)])) throw tp::Error("the grammar refused a masked sample");
          const bool done = matchers[size_t(s)]->is_terminated();
          accept += ms_since(a0);
          if (done) {
            matchers[size_t(s)] = std::make_unique<tp::ConstraintMatcher>(grammar);
            ++t.n_completed;
          }
        }
        const double step = ms_since(s0);
        if (r < 0) continue;
        t.step_ms += step;
        t.fill_ms += fill;
        t.accept_ms += accept;
        ++t.n_steps;
        if (masked) {  // the apply part alone, over the same masks on a copy of rows
          std::vector<tp::MaskedRow> rows;
          for (int64_t s = 0; s < batch; ++s) rows.push_back({s, plan.seqs[size_t(s)].token_bitmask});
          const auto p0 = clock_type::now();
          tp::apply_token_bitmasks(probe.data(), vocab, rows);
          t.apply_ms += ms_since(p0);
          for (int64_t s = 0; s < batch; ++s) t.n_allowed += tp::count_allowed(plan.seqs[size_t(s)].token_bitmask, vocab);
        }
      }
    }
  }
  const double n = double(plain.n_steps), nc = double(constrained.n_steps);
  std::printf("model %s, vocab %lld, batch %lld, threads %lld, %lld steps x %d reps per mode\n", cfg.model.path.c_str(),
              (long long)vocab, (long long)batch, (long long)a.integer("threads", 1, 1024), (long long)steps, reps);
  std::printf("tokenizer info + compiler: %.1f ms; schema compile: %.1f ms; cache hit: %.4f ms\n", tokenizer_info_ms,
              compile_ms, cached_ms);
  std::printf("| mode | ms/step | mask fill ms/step | apply ms/step | accept ms/step | grammar share |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| unconstrained | %.3f | - | - | - | - |\n", plain.step_ms / n);
  const double over = (constrained.fill_ms + constrained.accept_ms) / nc;  // apply runs inside lead
  std::printf("| constrained | %.3f | %.3f | %.3f | %.3f | %.1f%% |\n", constrained.step_ms / nc,
              constrained.fill_ms / nc, constrained.apply_ms / nc, constrained.accept_ms / nc,
              100.0 * (over + constrained.apply_ms / nc) / (constrained.step_ms / nc));
  std::printf("overhead: constrained / unconstrained - 1 = %.1f%%; mean allowed tokens per mask %.0f of %lld; "
              "grammars completed %lld\n",
              100.0 * ((constrained.step_ms / nc) / (plain.step_ms / n) - 1.0),
              double(constrained.n_allowed) / (nc * double(batch)), (long long)vocab,
              (long long)constrained.n_completed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "structured_output_bench: %s\n", e.what());
    return 1;
  }
}
