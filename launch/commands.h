// The `tpserve` subcommands. Each has a table of its options (its CommandSpec: the parser's input and its
// --help text) and a runner that takes the parsed options, returns the process exit code, and throws
// tp::InputError (and subclasses) for bad input, which main() prints as one line.
#pragma once
#include "launch/cli_args.h"

namespace tp {

const CommandSpec& generate_spec();
const CommandSpec& convert_spec();
const CommandSpec& synth_spec();
const CommandSpec& plan_spec();
const CommandSpec& config_spec();
const CommandSpec& serve_spec();
const CommandSpec& eval_spec();
const CommandSpec& quantize_spec();
const CommandSpec& simulate_spec();
const CommandSpec& router_spec();

int run_generate(const CliArgs& args);
int run_convert(const CliArgs& args);
int run_synth(const CliArgs& args);
int run_plan(const CliArgs& args);
int run_config(const CliArgs& args);
int run_serve(const CliArgs& args);
int run_eval(const CliArgs& args);
int run_quantize(const CliArgs& args);
int run_simulate(const CliArgs& args);
int run_router(const CliArgs& args);

}  // namespace tp
