// `tpserve quantize`: an unquantized model -> a compressed-tensors HF directory (rank/quantize.h), by RTN,
// GPTQ, AWQ or SmoothQuant+GPTQ. The calibration text is tokenized here (the tokenizer lives in coordinator/,
// which rank/ may not include) and its first --calib-tokens tokens are used; a text with fewer is refused.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <algorithm>

#include "common/error.h"
#include "coordinator/tokenizer.h"
#include "kernels/cpu/linear.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "rank/model_file.h"
#include "rank/quantize.h"

namespace tp {

const CommandSpec& quantize_spec() {
  static const CommandSpec spec{
      "quantize",
      "quantize a model (RTN, GPTQ, AWQ, SmoothQuant) into a compressed-tensors directory",
      {
          OptionSpec::required_value("in", "MODEL", "GGUF file or HF model directory (unquantized) to read"),
          OptionSpec::required_value("out", "DIR", "directory to write (config.json, model.safetensors, tokenizer)"),
          OptionSpec::required_value("scheme", "SCHEME", std::string("one of ") + kQuantSchemeNames),
          OptionSpec::value("method", "METHOD", "rtn", "rtn, gptq, awq or smoothquant+gptq (w8a8-int8 / fp8-dynamic)"),
          OptionSpec::computed("group-size", "N", "128 for w4a16 / w4a16-asym",
                               "columns a scale for integer 4-bit schemes (0: per channel); must divide every "
                               "linear's input"),
          OptionSpec::flag("act-order",
                           "GPTQ visits columns by decreasing Hessian diagonal; groups stay contiguous, their "
                           "scales static (compressed-tensors actorder \"weight\", llm-compressor's default); the "
                           "default for gptq / smoothquant+gptq"),
          OptionSpec::flag("act-order-group",
                           "GPTQ visits columns by decreasing Hessian diagonal and makes its groups of the columns in "
                           "that order (compressed-tensors actorder \"group\", AutoGPTQ's desc_act): each weight "
                           "gets a g_idx; served at the speed of contiguous groups (kernels hold the columns sorted)"),
          OptionSpec::flag("no-act-order", "GPTQ visits columns in order (no activation ordering)"),
          OptionSpec::value("gptq-groups", "static|dynamic", "dynamic",
                            "GPTQ group scales from the original weights up front (static, as llm-compressor) or "
                            "from the error-corrected weights at each group's first column (dynamic)"),
          OptionSpec::value("calib", "FILE", "/usr/share/common-licenses/GPL-3",
                            "calibration text (not the text you evaluate on)"),
          OptionSpec::value("calib-tokens", "N", "512", "calibration tokens taken from the start of --calib"),
          OptionSpec::value("calib-seq-len", "N", "512", "tokens a calibration sequence"),
          OptionSpec::value("ignore", "LIST", "lm_head",
                            "comma-separated modules left unquantized ('': none, the lm_head quantized too)"),
          OptionSpec::value("dtype", "DTYPE", "bf16", "dtype of the dense tensors and scales: bf16 or f32"),
          OptionSpec::value("smoothquant-alpha", "A", "0.5", "SmoothQuant migration strength in [0, 1]"),
          OptionSpec::value("threads", "N", "0", "compute threads of the calibration forward and GPTQ (0: every core)"),
          OptionSpec::value("percdamp", "F", "0.1",
                            "GPTQ damping, a fraction of the Hessian's mean diagonal (llm-compressor: 0.01)"),
      }};
  return spec;
}

int run_quantize(const CliArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeOptions o;
  o.scheme = parse_quant_scheme(a.required("scheme"));
  o.method = parse_quant_method(*a.str("method"));
  o.group_size = a.integer("group-size", -1, 0, 1 << 20);
  // Act-order "weight" by default for GPTQ: on SmolLM2 w4a16 g64 it took GPTQ from perplexity 29.05 (in order,
  // dynamic group scales) to 25.47, below RTN's 26.73 and llm-compressor's GPTQ's 25.88
  // (bench/results/quality-llmcompressor-*.md); on the float schemes (10 x 512 windows) nvfp4 21.60 -> 20.98 and
  // mxfp4 25.24 -> 23.04, past llm-compressor's 21.31 / 23.89 (bench/results/quality-20261202-1727.md, addendum 7).
  if (int(a.flag("act-order")) + int(a.flag("act-order-group")) + int(a.flag("no-act-order")) > 1)
    throw UsageError("--act-order, --act-order-group and --no-act-order exclude each other");
  const bool gptq = o.method == QuantMethod::Gptq || o.method == QuantMethod::SmoothQuantGptq;
  o.act_order = a.flag("act-order-group")                                  ? ActOrder::Group
                : a.flag("act-order") || (gptq && !a.flag("no-act-order")) ? ActOrder::Weight
                                                                           : ActOrder::None;
  const std::string groups = *a.str("gptq-groups");
  if (groups != "static" && groups != "dynamic")
    throw UsageError("--gptq-groups must be static or dynamic, not '" + groups + "'");
  o.static_groups = groups == "static";
  o.seq_len = a.integer("calib-seq-len", 1, 1 << 20);
  o.percdamp = a.real("percdamp", 0.0, 10.0);
  o.sq_alpha = float(a.real("smoothquant-alpha", 0.0, 1.0));
  const int64_t threads = a.integer("threads", 0, 1024);
  cpu::set_num_threads(threads > 0 ? int(threads) : int(std::max(1u, std::thread::hardware_concurrency())));
  const std::string dt = *a.str("dtype");
  if (dt != "bf16" && dt != "f32") throw UsageError("--dtype must be bf16 or f32, not '" + dt + "'");
  o.dtype = dt == "f32" ? DType::F32 : DType::BF16;
  o.ignore.clear();
  std::stringstream ig(*a.str("ignore"));
  for (std::string item; std::getline(ig, item, ',');)
    if (!item.empty()) o.ignore.push_back(item);
  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const std::string in = a.required("in"), out = a.required("out");
  std::unique_ptr<ModelFile> m = open_model(in);
  if (o.method != QuantMethod::Rtn) {
    const std::string calib = *a.str("calib");
    const int64_t want = a.integer("calib-tokens", 1, 1 << 24);
    std::ifstream f(calib, std::ios::binary);
    if (!f) throw InputError("cannot read calibration file '" + calib + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    const Tokenizer tok(m->tokenizer());
    std::vector<int32_t> ids = tok.encode(ss.str(), false, false);
    if (int64_t(ids.size()) < want)
      throw InputError("calibration file '" + calib + "' has " + std::to_string(ids.size()) +
                       " tokens, fewer than --calib-tokens " + std::to_string(want));
    ids.resize(size_t(want));
    o.calib_tokens = std::move(ids);
    std::printf("calibration: %lld tokens of %s\n", (long long)want, calib.c_str());
  }
  quantize_model(*m, out, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%s, %s) in %.1f s\n", out.c_str(), a.required("scheme").c_str(), a.str("method")->c_str(), s);
  return 0;
}

}  // namespace tp
