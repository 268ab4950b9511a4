// The `tpserve` subcommands. Each takes the arguments after its name, returns the process exit code,
// and throws tp::InputError (and subclasses) for bad input, which main() prints as one line.
#pragma once
#include <string>
#include <vector>

namespace tp {

int run_generate(const std::vector<std::string>& args);
int run_convert(const std::vector<std::string>& args);
int run_synth(const std::vector<std::string>& args);
int run_plan(const std::vector<std::string>& args);
int run_config(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);

}  // namespace tp
