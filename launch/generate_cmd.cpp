// `tpserve generate`: one prompt, greedy or sampled, printed as it is produced; then prefill and decode tok/s.
#include <chrono>
#include <cstdio>

#include "common/config.h"
#include "common/error.h"
#include "coordinator/tokenizer.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_group.h"
#include "rank/sampler.h"
#include "rank/sequence_runner.h"

namespace tp {

int run_generate(const std::vector<std::string>& argv) {
  const CliArgs a("generate", argv,
                  {"model", "prompt", "max-tokens", "temperature", "top-p", "top-k", "min-p", "seed", "config",
                   "dtype", "threads", "tp"},
                  {"ignore-eos"});
  Config cfg;
  if (auto path = a.str("config")) cfg = load_config(*path);
  if (auto m = a.str("model")) cfg.model.path = *m;
  if (auto d = a.str("dtype")) cfg.model.dtype = *d;
  if (cfg.model.dtype != "bf16" && cfg.model.dtype != "f32")
    throw UsageError("generate: --dtype must be bf16 or f32, not '" + cfg.model.dtype + "'");
  cfg.parallel.tp = a.integer("tp", cfg.parallel.tp, 1, 4096);
  const std::string prompt = a.required("prompt");
  const int64_t max_tokens = a.integer("max-tokens", 64, 1, 1 << 20);
  SamplingParams sp;
  sp.temperature = float(a.real("temperature", 0.0, 0.0, 100.0));
  sp.top_p = float(a.real("top-p", 1.0, 1e-6, 1.0));
  sp.top_k = int32_t(a.integer("top-k", 0, 0, 1 << 24));
  sp.min_p = float(a.real("min-p", 0.0, 0.0, 1.0));
  sp.seed = uint64_t(a.integer("seed", 0, 0, INT64_MAX));
  const bool ignore_eos = a.flag("ignore-eos");
  const int threads = int(a.integer("threads", cfg.parallel.threads, 0, 1024));

  ModelGroup group(nullptr, nullptr, cfg, threads);
  std::fprintf(stderr, "%s\n", group.report().c_str());
  if (!group.is_leader()) {
    group.worker->serve();
    return 0;
  }
  const ModelFile& file = *group.file;
  const Tokenizer tok(file.tokenizer());
  const std::vector<int32_t> ids = tok.encode(prompt, tok.add_bos(), true);
  if (ids.empty()) throw InputError("the prompt encodes to no tokens");
  const int64_t ctx = cfg.cache.max_context > 0 ? cfg.cache.max_context : file.config().max_context;
  if (int64_t(ids.size()) + max_tokens > ctx)
    throw InputError("prompt (" + std::to_string(ids.size()) + " tokens) + max-tokens (" + std::to_string(max_tokens) +
                     ") exceeds the context of " + std::to_string(ctx) + " tokens");
  SequenceRunner seq(*group.worker, int64_t(ids.size()) + max_tokens);
  validate(sp);
  Sampler sampler;
  IncrementalDecoder out(tok);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const std::vector<float>* logits = &seq.feed(ids);
  const auto t1 = clock::now();
  int64_t n_gen = 0, n_steps = 0;  // tokens sampled; decode forward steps (one per token after the first)
  std::fputs(prompt.c_str(), stdout);
  for (;;) {
    const int32_t next = sampler.sample(logits->data(), file.config().vocab, sp, uint64_t(seq.n_past()));
    ++n_gen;
    if (!ignore_eos && tok.is_eog(next)) break;
    std::fputs(out.push(next).c_str(), stdout);
    std::fflush(stdout);
    if (n_gen >= max_tokens) break;
    logits = &seq.feed({next});
    ++n_steps;
  }
  std::fputs(out.flush().c_str(), stdout);
  const auto t2 = clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("\n\nprefill: %zu tokens in %.3f s (%.1f tok/s)\ndecode: %lld tokens in %.3f s (%.1f tok/s)\n",
              ids.size(), prefill_s, double(ids.size()) / prefill_s, (long long)n_steps, decode_s,
              n_steps > 0 ? double(n_steps) / decode_s : 0.0);
  return 0;
}

}  // namespace tp
