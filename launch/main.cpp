// tpserve entry point: dispatches subcommands and turns errors into one line + a non-zero exit.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/error.h"
#include "launch/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: tpserve <command> [options]\n"
    "commands:\n"
    "  generate  --model PATH --prompt TEXT [--max-tokens N --temperature T --top-p P --top-k K --seed S]\n"
    "            [--config FILE --dtype bf16|f32 --threads N --ignore-eos]\n"
    "  convert   --in MODEL --out PATH --to gguf-f32|gguf-bf16|gguf-f16|hf-f32|hf-bf16\n"
    "  synth     --out DIR --layers L --hidden H --heads A --kv-heads K --intermediate I --vocab V --seed S\n"
    "            [--dtype bf16|f32]\n"
    "  plan      --model PATH|NAME --gpu-mem SIZE [--gpus N --tp T --dp D --weights bf16|fp8|int8|int4|mxfp4|f32]\n"
    "            [--kv-dtype bf16|fp8|f16|f32 --context C --mean-len L --reserve SIZE --kv-mem SIZE --block-size B]\n"
    "            [--cards DIR --json]   capacity plan; SIZE: 80GB = 80e9 B, 80GiB = 80 x 2^30 B; NAME: configs/models/\n"
    "  config    [--config FILE]   validate a config and print its effective values\n"
    "  serve     [--config FILE --model PATH --host H --port N --tp N --threads N --api-key K]   OpenAI HTTP API\n"
    "Commands that run a model take --config FILE and --tp N and run under `mpirun -np N` (or launch/start).\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "generate") return tp::run_generate(args);
    if (cmd == "convert") return tp::run_convert(args);
    if (cmd == "synth") return tp::run_synth(args);
    if (cmd == "plan") return tp::run_plan(args);
    if (cmd == "config") return tp::run_config(args);
    if (cmd == "serve") return tp::run_serve(args);
    std::fprintf(stderr, "tpserve: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const tp::UsageError& e) {
    std::fprintf(stderr, "tpserve %s\n", e.what());
    return 2;
  } catch (const tp::InputError& e) {
    std::fprintf(stderr, "tpserve %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpserve %s: internal error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
