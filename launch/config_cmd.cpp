// `tpserve config [--config FILE]`: validates a config and prints the effective values, one `section.key: value`
// a line (what launch/start reads to size an mpirun).
#include <cstdio>

#include "common/config.h"
#include "launch/cli_args.h"
#include "launch/commands.h"

namespace tp {

const CommandSpec& config_spec() {
  static const CommandSpec spec{
      "config",
      "validate a config and print its effective values",
      {
          OptionSpec::computed("config", "FILE", "built-in defaults", "YAML config to validate"),
      }};
  return spec;
}

int run_config(const CliArgs& a) {
  Config c;
  if (auto path = a.str("config")) c = load_config(*path);
  std::printf("model.path: %s\nmodel.dtype: %s\nparallel.tp: %lld\nparallel.dp: %lld\nparallel.threads: %lld\n"
              "cache.block_size: %lld\ncache.memory_mb: %lld\ncache.max_context: %lld\ncache.prefix_caching: %s\n"
              "scheduler.max_num_seqs: %lld\nscheduler.max_num_batched_tokens: %lld\n"
              "scheduler.max_queued_requests: %lld\nscheduler.kv_reservation: %s\nserver.host: %s\nserver.port: %lld\n",
              c.model.path.c_str(), c.model.dtype.c_str(), (long long)c.parallel.tp, (long long)c.parallel.dp,
              (long long)c.parallel.threads, (long long)c.cache.block_size, (long long)c.cache.memory_mb,
              (long long)c.cache.max_context, c.cache.prefix_caching ? "true" : "false",
              (long long)c.scheduler.max_num_seqs, (long long)c.scheduler.max_num_batched_tokens,
              (long long)c.scheduler.max_queued_requests, c.scheduler.kv_reservation.c_str(), c.server.host.c_str(), (long long)c.server.port);
  return 0;
}

}  // namespace tp
