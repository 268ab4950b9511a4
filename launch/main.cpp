// tpserve entry point: dispatches subcommands (each parses its own table of options, launch/cli_args.h),
// answers --help / --version, and turns errors into one line + a non-zero exit:
//   0 done (help and version on stdout), 1 bad input (file, config, model), 2 bad command line, 3 internal error.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/version.h"
#include "launch/commands.h"

namespace {

struct Command {
  const tp::CommandSpec& (*spec)();
  int (*run)(const tp::CliArgs&);
};

const Command kCommands[] = {
    {tp::generate_spec, tp::run_generate}, {tp::serve_spec, tp::run_serve}, {tp::plan_spec, tp::run_plan},
    {tp::config_spec, tp::run_config},     {tp::convert_spec, tp::run_convert}, {tp::synth_spec, tp::run_synth},
    {tp::eval_spec, tp::run_eval},
    {tp::quantize_spec, tp::run_quantize},
    {tp::simulate_spec, tp::run_simulate},
    {tp::router_spec, tp::run_router},
};

std::string usage() {
  std::string s = "usage: tpserve <command> [options]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    const tp::CommandSpec& spec = c.spec();
    s += "  " + spec.name + std::string(10 - spec.name.size(), ' ') + spec.summary + "\n";
  }
  s += "  version   print the version and how this build was made (also --version)\n"
       "\nRun `tpserve <command> --help` for a command's options. Commands that run a model take --config FILE and\n"
       "--tp N and run under `mpirun -np N` (or launch/start).\n";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(usage().c_str(), stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("%s\n", tp::version_line().c_str());
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    for (const Command& c : kCommands) {
      if (c.spec().name != cmd) continue;
      const tp::CliArgs parsed(c.spec(), args);
      if (parsed.help()) {
        std::fputs(tp::usage_text(c.spec()).c_str(), stdout);
        return 0;
      }
      return c.run(parsed);
    }
    std::fprintf(stderr, "tpserve: unknown command '%s'\n%s", cmd.c_str(), usage().c_str());
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
