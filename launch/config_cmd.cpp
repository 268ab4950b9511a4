// `tpserve config [--config FILE]`: validates a config and prints every effective setting as YAML that
// `--config` reads back to the same values (common/config.h's format_config). launch/start reads
// parallel.tp, parallel.dp and parallel.threads from it to size an mpirun.
#include <cstdio>

#include "common/config.h"
#include "launch/cli_args.h"
#include "launch/commands.h"

namespace tp {

const CommandSpec& config_spec() {
  static const CommandSpec spec{
      "config",
      "validate a config and print every effective setting as YAML (defaults filled in, paths resolved)",
      {
          OptionSpec::computed("config", "FILE", "built-in defaults", "YAML config to validate"),
      }};
  return spec;
}

int run_config(const CliArgs& a) {
  Config c;
  if (auto path = a.str("config")) c = load_config(*path);
  std::printf("# tpserve config: the effective settings of %s\n%s", c.source.c_str(), format_config(c).c_str());
  return 0;
}

}  // namespace tp
