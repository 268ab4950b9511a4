#include "launch/cli_args.h"

#include <cerrno>
#include <cstdlib>

#include "common/error.h"

namespace tp {
namespace {

std::string join(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> all(a);
  all.insert(b.begin(), b.end());
  std::string s;
  for (const auto& n : all) s += (s.empty() ? "--" : ", --") + n;
  return s;
}

}  // namespace

CliArgs::CliArgs(const std::string& command, const std::vector<std::string>& args,
                 const std::set<std::string>& value_opts, const std::set<std::string>& flag_opts)
    : command_(command) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0)
      throw UsageError(command + ": unexpected argument '" + a + "' (options: " + join(value_opts, flag_opts) + ")");
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flag_opts.count(name)) {
      if (inline_value) throw UsageError(command + ": --" + name + " takes no value");
    } else if (value_opts.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw UsageError(command + ": --" + name + " needs a value");
        value = args[++i];
      }
    } else {
      throw UsageError(command + ": unknown option --" + name + " (options: " + join(value_opts, flag_opts) + ")");
    }
    if (values_.count(name)) throw UsageError(command + ": --" + name + " given twice");
    values_[name] = value;
  }
}

std::optional<std::string> CliArgs::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string CliArgs::required(const std::string& name) const {
  auto v = str(name);
  if (!v) throw UsageError(command_ + ": --" + name + " is required");
  return *v;
}

int64_t CliArgs::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto v = str(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(command_ + ": --" + name + ": expected an integer, got '" + *v + "'");
  if (n < lo || n > hi)
    throw UsageError(command_ + ": --" + name + ": " + *v + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return n;
}

double CliArgs::real(const std::string& name, double fallback, double lo, double hi) const {
  auto v = str(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(command_ + ": --" + name + ": expected a number, got '" + *v + "'");
  if (!(d >= lo && d <= hi))
    throw UsageError(command_ + ": --" + name + ": " + *v + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return d;
}

}  // namespace tp
