// `tpserve convert`: GGUF -> unquantized GGUF or HF safetensors directory (see rank/convert.h).
#include <cstdio>

#include "common/error.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "rank/convert.h"

namespace tp {

const CommandSpec& convert_spec() {
  static const CommandSpec spec{
      "convert",
      "convert a model to an unquantized GGUF file or HF safetensors directory",
      {
          OptionSpec::required_value("in", "MODEL", "GGUF file or HF model directory to read"),
          OptionSpec::required_value("out", "PATH", "GGUF file or directory to write"),
          OptionSpec::required_value("to", "FORMAT", "gguf-f32, gguf-bf16, gguf-f16, hf-f32 or hf-bf16"),
      }};
  return spec;
}

int run_convert(const CliArgs& a) {
  const std::string in = a.required("in"), out = a.required("out"), to = a.required("to");
  static const std::pair<const char*, ConvertFormat> kFormats[] = {
      {"gguf-f32", ConvertFormat::GgufF32}, {"gguf-bf16", ConvertFormat::GgufBf16}, {"gguf-f16", ConvertFormat::GgufF16},
      {"hf-f32", ConvertFormat::HfF32},     {"hf-bf16", ConvertFormat::HfBf16}};
  for (const auto& [name, fmt] : kFormats) {
    if (to == name) {
      convert_model(in, out, fmt);
      std::printf("wrote %s (%s)\n", out.c_str(), name);
      return 0;
    }
  }
  throw UsageError("convert: --to '" + to + "' is not one of gguf-f32, gguf-bf16, gguf-f16, hf-f32, hf-bf16");
}

}  // namespace tp
