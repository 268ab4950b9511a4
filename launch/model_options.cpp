#include "launch/model_options.h"

#include "common/dtype.h"
#include "common/error.h"
#include "common/kv_dtype.h"

#include <iterator>

namespace tp {

std::vector<OptionSpec> model_options() {
  const Config d;  // the defaults without a config
  return {
      OptionSpec::computed("config", "FILE", "built-in defaults", "YAML config (see `tpserve config`)"),
      OptionSpec::computed("model", "PATH", "model.path of the config, else " + d.model.path,
                           "GGUF file or HF model directory"),
      OptionSpec::computed("dtype", "bf16|f32", "model.dtype of the config, else " + d.model.dtype, "runtime weight dtype"),
      OptionSpec::computed("quantized", "keep|dequantize", "model.quantized of the config, else " + d.model.quantized,
                           "GGUF block-quantized weights: run them as they are, or dequantize to the dtype"),
      OptionSpec::computed("kv-cache-dtype", "bf16|f32|fp8_e4m3|int8", "cache.dtype of the config, else " + d.cache.dtype,
                           "KV cache dtype (vLLM's --kv-cache-dtype); fp8_e4m3 / int8 use the checkpoint's per-layer "
                           "k_scale / v_scale when it has them"),
      OptionSpec::computed("device", "cpu|cuda", "model.device of the config, else " + d.model.device,
                           "where the forward runs (cuda: a CUDA build on a GPU host)"),
      OptionSpec::computed("threads", "N",
                           "parallel.threads of the config, else " + std::to_string(d.parallel.threads) +
                               "; 0: cores / ranks on the node",
                           "compute threads per rank"),
      OptionSpec::computed("tp", "N", "parallel.tp of the config, else " + std::to_string(d.parallel.tp),
                           "tensor-parallel degree; run under `mpirun -np N` (or launch/start)"),
  };
}

std::vector<OptionSpec> with(std::vector<OptionSpec> first, std::vector<OptionSpec> more) {
  first.insert(first.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return first;
}

Config config_with_model_options(const CliArgs& a, const std::string& command, int* threads) {
  Config cfg;
  if (auto path = a.str("config")) cfg = load_config(*path);
  if (auto m = a.str("model")) cfg.model.path = *m;
  if (auto d = a.str("dtype")) cfg.model.dtype = *d;
  if (const std::string e = runtime_dtype_error(cfg.model.dtype, command + ": --dtype"); !e.empty()) throw UsageError(e);
  if (auto q = a.str("quantized")) {
    if (*q != "keep" && *q != "dequantize")
      throw UsageError(command + ": --quantized must be keep or dequantize, not '" + *q + "'");
    cfg.model.quantized = *q;
  }
  if (auto k = a.str("kv-cache-dtype")) {
    try {
      parse_kv_dtype(*k, command + ": --kv-cache-dtype");
    } catch (const InputError& e) {
      throw UsageError(e.what());
    }
    cfg.cache.dtype = *k;
  }
  if (auto d = a.str("device")) {
    if (*d != "cpu" && *d != "cuda") throw UsageError(command + ": --device must be cpu or cuda, not '" + *d + "'");
    cfg.model.device = *d;
  }
  cfg.parallel.tp = a.integer("tp", cfg.parallel.tp, 1, 4096);
  *threads = int(a.integer("threads", cfg.parallel.threads, 0, 1024));
  return cfg;
}

}  // namespace tp
