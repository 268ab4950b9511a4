// `tpserve synth`: writes a synthetic Llama model as an HF safetensors directory (see rank/synth.h).
#include <cstdio>

#include "common/dtype.h"
#include "common/error.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "rank/synth.h"

namespace tp {

const CommandSpec& synth_spec() {
  static const SynthSpec d;  // the defaults
  static const CommandSpec spec{
      "synth",
      "write a synthetic Llama model (random weights, byte-level tokenizer) as an HF safetensors directory",
      {
          OptionSpec::required_value("out", "DIR", "directory to write (created if missing)"),
          OptionSpec::value("layers", "L", std::to_string(d.n_layers), "transformer layers"),
          OptionSpec::value("hidden", "H", std::to_string(d.hidden), "hidden size"),
          OptionSpec::value("heads", "A", std::to_string(d.n_heads), "attention heads"),
          OptionSpec::value("kv-heads", "K", std::to_string(d.n_kv_heads), "KV heads (divides --heads)"),
          OptionSpec::value("intermediate", "I", std::to_string(d.intermediate), "feed-forward size"),
          OptionSpec::value("vocab", "V", std::to_string(d.vocab), "vocabulary size, >= 257 (256 bytes + eos)"),
          OptionSpec::value("seed", "S", std::to_string(d.seed), "seed of the weights"),
          OptionSpec::value("dtype", "bf16|f32", "bf16", "dtype of the linear weights"),
          OptionSpec::flag("tied", "the lm_head is the token embedding (tie_word_embeddings, as SmolLM2)"),
      }};
  return spec;
}

int run_synth(const CliArgs& a) {
  SynthSpec s;
  const std::string out = a.required("out");
  s.n_layers = a.integer("layers", 1, 1024);
  s.hidden = a.integer("hidden", 2, 1 << 16);
  s.n_heads = a.integer("heads", 1, 1024);
  s.n_kv_heads = a.integer("kv-heads", 1, 1024);
  s.intermediate = a.integer("intermediate", 1, 1 << 18);
  s.vocab = a.integer("vocab", 257, 1 << 20);
  s.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
  const std::string dtype = *a.str("dtype");
  if (const std::string e = runtime_dtype_error(dtype, "synth: --dtype"); !e.empty()) throw UsageError(e);
  s.dtype = parse_dtype(dtype);
  s.tied = a.flag("tied");
  write_synthetic_model(out, s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace tp
