#include "launch/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "common/error.h"

namespace tp {
namespace {

std::string option_list(const CommandSpec& spec) {
  std::string s;
  for (const OptionSpec& o : spec.options) s += (s.empty() ? "--" : ", --") + o.name;
  return s + (s.empty() ? "--help" : ", --help");
}

std::string default_text(const OptionSpec& o) {
  if (o.required) return "required";
  if (o.placeholder.empty()) return "off";
  if (!o.default_value.empty()) return "default: " + o.default_value;
  if (!o.default_note.empty()) return "default: " + o.default_note;
  return "default: none";
}

}  // namespace

OptionSpec OptionSpec::value(std::string name, std::string placeholder, std::string default_value, std::string help) {
  return {std::move(name), std::move(placeholder), std::move(default_value), "", false, std::move(help)};
}

OptionSpec OptionSpec::computed(std::string name, std::string placeholder, std::string note, std::string help) {
  return {std::move(name), std::move(placeholder), "", std::move(note), false, std::move(help)};
}

OptionSpec OptionSpec::required_value(std::string name, std::string placeholder, std::string help) {
  return {std::move(name), std::move(placeholder), "", "", true, std::move(help)};
}

OptionSpec OptionSpec::flag(std::string name, std::string help) {
  return {std::move(name), "", "", "", false, std::move(help)};
}

const OptionSpec* CommandSpec::find(const std::string& option) const {
  for (const OptionSpec& o : options)
    if (o.name == option) return &o;
  return nullptr;
}

std::string usage_text(const CommandSpec& spec) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const OptionSpec& o : spec.options)
    rows.emplace_back("--" + o.name + (o.placeholder.empty() ? "" : " " + o.placeholder),
                      o.help + " (" + default_text(o) + ")");
  rows.emplace_back("-h, --help", "print this help and exit");
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  std::string s = "usage: tpserve " + spec.name + " [options]\n" + spec.summary + "\n\noptions:\n";
  for (const auto& [left, right] : rows) s += "  " + left + std::string(width - left.size() + 2, ' ') + right + "\n";
  if (!spec.notes.empty()) s += "\n" + spec.notes + (spec.notes.back() == '\n' ? "" : "\n");
  return s;
}

CliArgs::CliArgs(const CommandSpec& spec, const std::vector<std::string>& args) : spec_(spec) {
  const std::string& command = spec_.name;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return;
    }
    if (a.rfind("--", 0) != 0)
      throw UsageError(command + ": unexpected argument '" + a + "' (options: " + option_list(spec_) + ")");
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* o = spec_.find(name);
    if (!o) throw UsageError(command + ": unknown option --" + name + " (options: " + option_list(spec_) + ")");
    if (o->placeholder.empty()) {
      if (inline_value) throw UsageError(command + ": --" + name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError(command + ": --" + name + " needs a value (" + o->placeholder + ")");
      value = args[++i];
    }
    if (values_.count(name)) throw UsageError(command + ": --" + name + " given twice");
    values_[name] = value;
  }
}

const OptionSpec& CliArgs::option(const std::string& name) const {
  const OptionSpec* o = spec_.find(name);
  if (!o) throw std::logic_error(spec_.name + ": option --" + name + " is not in the command's table");
  return *o;
}

bool CliArgs::has(const std::string& name) const {
  option(name);
  return values_.count(name) != 0;
}

bool CliArgs::flag(const std::string& name) const {
  if (!option(name).placeholder.empty()) throw std::logic_error(spec_.name + ": --" + name + " is not a flag");
  return values_.count(name) != 0;
}

std::optional<std::string> CliArgs::str(const std::string& name) const {
  const OptionSpec& o = option(name);
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (!o.default_value.empty()) return o.default_value;
  return std::nullopt;
}

std::string CliArgs::required(const std::string& name) const {
  auto v = str(name);
  if (!v) throw UsageError(spec_.name + ": --" + name + " is required");
  return *v;
}

int64_t CliArgs::integer(const std::string& name, int64_t lo, int64_t hi) const {
  const auto v = str(name);
  if (!v) throw std::logic_error(spec_.name + ": --" + name + " has no literal default; pass a fallback");
  return parse_integer(name, *v, lo, hi);
}

int64_t CliArgs::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!option(name).default_value.empty())
    throw std::logic_error(spec_.name + ": --" + name + " has a literal default in its table; a fallback would shadow it");
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_integer(name, it->second, lo, hi);
}

double CliArgs::real(const std::string& name, double lo, double hi) const {
  const auto v = str(name);
  if (!v) throw std::logic_error(spec_.name + ": --" + name + " has no literal default; pass a fallback");
  return parse_real(name, *v, lo, hi);
}

double CliArgs::real(const std::string& name, double fallback, double lo, double hi) const {
  if (!option(name).default_value.empty())
    throw std::logic_error(spec_.name + ": --" + name + " has a literal default in its table; a fallback would shadow it");
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_real(name, it->second, lo, hi);
}

int64_t CliArgs::parse_integer(const std::string& name, const std::string& v, int64_t lo, int64_t hi) const {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(spec_.name + ": --" + name + ": expected an integer, got '" + v + "'");
  if (n < lo || n > hi)
    throw UsageError(spec_.name + ": --" + name + ": " + v + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return n;
}

double CliArgs::parse_real(const std::string& name, const std::string& v, double lo, double hi) const {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(spec_.name + ": --" + name + ": expected a number, got '" + v + "'");
  if (!(d >= lo && d <= hi))
    throw UsageError(spec_.name + ": --" + name + ": " + v + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return d;
}

}  // namespace tp
