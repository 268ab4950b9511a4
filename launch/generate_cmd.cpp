// `tpserve generate`: one prompt through the engine (scheduler, paged KV, the TP group's workers), greedy or
// sampled, printed as it is produced; then prefill and decode tok/s. Prints the engine's start-up report
// (KV capacity) and each rank's weights on stderr.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dtype.h"
#include "common/error.h"
#include "coordinator/engine.h"
#include "coordinator/tokenizer.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_group.h"
#include "launch/model_options.h"
#include "launch/worker_executor.h"

namespace tp {

const CommandSpec& generate_spec() {
  static const CommandSpec spec{
      "generate",
      "run one prompt through the engine and print the text as it is produced, then prefill and decode tok/s",
      with(model_options(), {
          OptionSpec::required_value("prompt", "TEXT", "the prompt text"),
          OptionSpec::value("max-tokens", "N", "64", "tokens to generate at most"),
          OptionSpec::value("temperature", "T", "0", "sampling temperature in [0, 100]; 0: greedy"),
          OptionSpec::value("top-p", "P", "1", "nucleus sampling: keep the smallest set of tokens with mass >= P"),
          OptionSpec::value("top-k", "K", "0", "keep the K most likely tokens; 0: all"),
          OptionSpec::value("min-p", "P", "0", "drop tokens less likely than P x the most likely one"),
          OptionSpec::value("seed", "S", "0", "sampling seed"),
          OptionSpec::flag("ignore-eos", "keep generating past end-of-sequence tokens"),
          OptionSpec::flag("show-ids", "also print the prompt's and the output's token ids (for reference checks)"),
      })};
  return spec;
}

int run_generate(const CliArgs& a) {
  int threads = 0;
  const Config cfg = config_with_model_options(a, "generate", &threads);
  const std::string prompt = a.required("prompt");
  Request req;
  req.max_tokens = a.integer("max-tokens", 1, 1 << 20);
  req.sampling.temperature = float(a.real("temperature", 0.0, 100.0));
  req.sampling.top_p = float(a.real("top-p", 1e-6, 1.0));
  req.sampling.top_k = int32_t(a.integer("top-k", 0, 1 << 24));
  req.sampling.min_p = float(a.real("min-p", 0.0, 1.0));
  req.sampling.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
  req.ignore_eos = a.flag("ignore-eos");

  ModelGroup group(nullptr, nullptr, cfg, threads);
  std::fprintf(stderr, "%s\n", group.report().c_str());
  if (!group.is_leader()) {
    group.worker->serve();
    return 0;
  }
  const Tokenizer tok(group.file->tokenizer());
  EngineConfig ec = group.engine_config(cfg);
  ec.is_eog = [&tok](int32_t id) { return tok.is_eog(id); };
  WorkerExecutor executor(*group.worker);
  Engine engine(ec, executor);
  std::fprintf(stderr, "%s", engine.startup_report().c_str());

  req.prompt = tok.encode(prompt, tok.add_bos(), true);
  if (req.prompt.empty()) throw InputError("the prompt encodes to no tokens");
  IncrementalDecoder out(tok);
  RequestOutput last;
  const std::vector<int32_t> prompt_ids = req.prompt;
  std::vector<int32_t> output_ids;
  req.on_output = [&](const RequestOutput& o) {
    output_ids.insert(output_ids.end(), o.new_tokens.begin(), o.new_tokens.end());
    for (int32_t t : o.new_tokens)
      if (req.ignore_eos || !tok.is_eog(t)) std::fputs(out.push(t).c_str(), stdout);
    std::fflush(stdout);
    last = o;
  };
  std::fputs(prompt.c_str(), stdout);
  const int64_t n_prompt = int64_t(req.prompt.size());
  engine.submit(std::move(req));
  engine.run_until_idle();
  engine.shutdown();
  std::fputs(out.flush().c_str(), stdout);
  if (last.finish_reason == FinishReason::Error) throw Error(last.error);

  using secs = std::chrono::duration<double>;
  const double ttft = secs(last.times.first_token - last.times.arrival).count();
  const double decode_s = secs(last.times.last_token - last.times.first_token).count();
  const int64_t n_steps = last.n_generated - 1;  // decode forwards: one per token after the first
  std::printf("\n\nprefill: %lld tokens in %.3f s (%.1f tok/s)\ndecode: %lld tokens in %.3f s (%.1f tok/s)\n",
              (long long)n_prompt, ttft, double(n_prompt) / ttft, (long long)n_steps, decode_s,
              n_steps > 0 ? double(n_steps) / decode_s : 0.0);
  if (a.flag("show-ids")) {
    const auto list = [](const std::vector<int32_t>& v) {
      std::string s;
      for (int32_t t : v) s += (s.empty() ? "" : " ") + std::to_string(t);
      return s;
    };
    std::printf("prompt ids: %s\noutput ids: %s\n", list(prompt_ids).c_str(), list(output_ids).c_str());
  }
  return 0;
}

}  // namespace tp
