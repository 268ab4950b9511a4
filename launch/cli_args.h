// Command-line options of one subcommand: `--name VALUE`, `--name=VALUE`, and `--flag` for booleans.
// Every mistake is a UsageError naming the option and the reason.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tp {

class CliArgs {
 public:
  // args: what follows the subcommand. value_opts take a value; flag_opts don't.
  CliArgs(const std::string& command, const std::vector<std::string>& args, const std::set<std::string>& value_opts,
          const std::set<std::string>& flag_opts);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> str(const std::string& name) const;
  std::string required(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double real(const std::string& name, double fallback, double lo, double hi) const;
  bool flag(const std::string& name) const { return has(name); }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
};

}  // namespace tp
