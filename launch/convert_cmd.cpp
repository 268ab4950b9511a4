// `tpserve convert`: a model -> GGUF (unquantized, or quantized as llama-quantize does) or an HF safetensors
// directory (see rank/convert.h).
#include <cstdio>

#include "common/error.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "rank/convert.h"

namespace tp {

const CommandSpec& convert_spec() {
  static const CommandSpec spec{
      "convert",
      "convert a model to a GGUF file (unquantized, or quantized as llama-quantize does) or HF safetensors directory",
      {
          OptionSpec::required_value("in", "MODEL", "GGUF file or HF model directory to read"),
          OptionSpec::required_value("out", "PATH", "GGUF file or directory to write"),
          OptionSpec::required_value("to", "FORMAT",
                                     "gguf-f32, gguf-bf16, gguf-f16, hf-f32, hf-bf16, or quantized: gguf-q8_0, "
                                     "gguf-q4_0, gguf-q4_1, gguf-q4_k, gguf-q6_k, gguf-q4_k_m"),
      }};
  return spec;
}

int run_convert(const CliArgs& a) {
  const std::string in = a.required("in"), out = a.required("out"), to = a.required("to");
  ConvertFormat fmt;
  try {
    fmt = parse_convert_format(to);
  } catch (const UsageError&) {
    throw UsageError("convert: --to '" + to +
                     "' is not one of gguf-f32, gguf-bf16, gguf-f16, hf-f32, hf-bf16, gguf-q8_0, gguf-q4_0, gguf-q4_1, "
                     "gguf-q4_k, gguf-q6_k, gguf-q4_k_m");
  }
  convert_model(in, out, fmt);
  std::printf("wrote %s (%s)\n", out.c_str(), to.c_str());
  return 0;
}

}  // namespace tp
