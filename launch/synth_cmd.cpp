// `tpserve synth`: writes a synthetic Llama model as an HF safetensors directory (see rank/synth.h).
#include <cstdio>

#include "common/error.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "rank/synth.h"

namespace tp {

int run_synth(const std::vector<std::string>& argv) {
  const CliArgs a("synth", argv, {"out", "layers", "hidden", "heads", "kv-heads", "intermediate", "vocab", "seed", "dtype"}, {});
  SynthSpec s;
  const std::string out = a.required("out");
  s.n_layers = a.integer("layers", s.n_layers, 1, 1024);
  s.hidden = a.integer("hidden", s.hidden, 2, 1 << 16);
  s.n_heads = a.integer("heads", s.n_heads, 1, 1024);
  s.n_kv_heads = a.integer("kv-heads", s.n_kv_heads, 1, 1024);
  s.intermediate = a.integer("intermediate", s.intermediate, 1, 1 << 18);
  s.vocab = a.integer("vocab", s.vocab, 257, 1 << 20);
  s.seed = uint64_t(a.integer("seed", 0, 0, INT64_MAX));
  const std::string dtype = a.str("dtype").value_or("bf16");
  if (dtype != "bf16" && dtype != "f32") throw UsageError("synth: --dtype must be bf16 or f32, not '" + dtype + "'");
  s.dtype = dtype == "f32" ? DType::F32 : DType::BF16;
  write_synthetic_model(out, s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace tp
