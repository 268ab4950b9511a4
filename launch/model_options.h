// The options every command that runs a model takes — --config, --model, --dtype, --quantized, --kv-cache-dtype,
// --device, --threads, --tp — as one table and one reading of them into a Config, so `generate` and `serve` (and
// what comes next) agree.
#pragma once
#include <string>
#include <vector>

#include "common/config.h"
#include "launch/cli_args.h"

namespace tp {

// Their OptionSpec rows (defaults in words: the config's value, else the built-in one).
std::vector<OptionSpec> model_options();
// `first` followed by `more`: a command's table is model_options() and its own.
std::vector<OptionSpec> with(std::vector<OptionSpec> first, std::vector<OptionSpec> more);

// The config (--config, else the defaults) with --model, --dtype, --quantized, --kv-cache-dtype, --device and
// --tp applied; a bad value is a UsageError naming `command` and the option. threads (out): --threads, else
// parallel.threads (0: cores / ranks).
Config config_with_model_options(const CliArgs& a, const std::string& command, int* threads);

}  // namespace tp
