// Command-line options of one subcommand, from one table: a CommandSpec lists every option with a one-line
// description and its default. The parser accepts exactly the options of the table (`--name VALUE`,
// `--name=VALUE`, `--flag`; `-h` / `--help` anywhere an option may stand), and usage_text() prints the same
// table as the command's --help. Every mistake is a UsageError naming the option and the reason.
//
// A default is either a literal value (OptionSpec::value: "64", used by the accessors when the option is
// absent) or described in words because the command computes it (OptionSpec::computed: "parallel.tp of
// --config"; the command passes the fallback to the accessor). Asking for an option that is not in the table,
// or passing a fallback for an option whose default is literal, is a bug: std::logic_error.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tp {

struct OptionSpec {
  std::string name;           // given as --name
  std::string placeholder;    // what its value is ("N", "PATH"); empty: a flag, which takes no value
  std::string default_value;  // the value used when absent, as it would be typed; empty: none
  std::string default_note;   // the default in words when the command computes it
  bool required = false;
  std::string help;           // one line

  // An option with a literal default ("" when it has none and is simply absent).
  static OptionSpec value(std::string name, std::string placeholder, std::string default_value, std::string help);
  // An option whose default the command computes; `note` says what it is.
  static OptionSpec computed(std::string name, std::string placeholder, std::string note, std::string help);
  static OptionSpec required_value(std::string name, std::string placeholder, std::string help);
  static OptionSpec flag(std::string name, std::string help);
};

struct CommandSpec {
  CommandSpec(std::string name_, std::string summary_, std::vector<OptionSpec> options_, std::string notes_ = "")
      : name(std::move(name_)), summary(std::move(summary_)), options(std::move(options_)), notes(std::move(notes_)) {}

  std::string name;                  // "generate"
  std::string summary;               // one line, for `tpserve --help`
  std::vector<OptionSpec> options;
  std::string notes;                 // optional lines printed after the options (units, syntax)

  const OptionSpec* find(const std::string& option) const;
};

// The --help text: usage line, summary, one line per option (description and default), notes.
std::string usage_text(const CommandSpec& spec);

class CliArgs {
 public:
  // args: what follows the subcommand.
  CliArgs(const CommandSpec& spec, const std::vector<std::string>& args);

  const CommandSpec& spec() const { return spec_; }
  // -h or --help was given: the command should print usage_text(spec()) and do nothing else.
  bool help() const { return help_; }
  // Given on the command line.
  bool has(const std::string& name) const;
  // The given value, else the literal default, else nullopt.
  std::optional<std::string> str(const std::string& name) const;
  std::string required(const std::string& name) const;
  // The given value or the literal default, parsed and checked against [lo, hi].
  int64_t integer(const std::string& name, int64_t lo, int64_t hi) const;
  double real(const std::string& name, double lo, double hi) const;
  // The given value, else `fallback` (for options whose default the command computes).
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double real(const std::string& name, double fallback, double lo, double hi) const;
  bool flag(const std::string& name) const;

 private:
  const OptionSpec& option(const std::string& name) const;
  int64_t parse_integer(const std::string& name, const std::string& text, int64_t lo, int64_t hi) const;
  double parse_real(const std::string& name, const std::string& text, double lo, double hi) const;

  CommandSpec spec_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

}  // namespace tp
