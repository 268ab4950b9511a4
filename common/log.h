// A small line logger for the server: one line per event, written whole (one write, then a flush) so lines from
// several threads never interleave, to stderr unless told otherwise. Two formats:
//   text: 2025-01-31T12:00:00.123Z INFO  <message> key=value key2="a value with spaces" list=[a,b]
//   json: {"time":"2025-01-31T12:00:00.123Z","level":"info","msg":"<message>","key":"value","n":5,"list":["a","b"]}
// Times are UTC wall-clock with milliseconds. Text values are quoted (with \" and \\ escaped) only when they
// contain a space, '"', '=' or are empty; doubles print with "%.6g"; in JSON, NaN and infinities print as null.
// A field may be JSON-only (text_too = false) when the text message already says it.
// Thread-safe. An instance is passed to whoever logs (no global logger).
#pragma once
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tp {

enum class LogLevel { Debug, Info, Warn, Error };
enum class LogFormat { Text, Json };

// "text" | "json"; anything else throws InputError naming `where` (e.g. "--log-format").
LogFormat parse_log_format(const std::string& s, const std::string& where);
// "debug" | "info" | "warn" | "error"; anything else throws InputError naming `where`.
LogLevel parse_log_level(const std::string& s, const std::string& where);
const char* log_level_name(LogLevel level);  // "debug", "info", "warn", "error"

struct LogField {
  using Value = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;
  LogField(std::string k, std::string v, bool text = true) : key(std::move(k)), value(std::move(v)), text_too(text) {}
  LogField(std::string k, const char* v, bool text = true) : key(std::move(k)), value(std::string(v)), text_too(text) {}
  LogField(std::string k, int64_t v, bool text = true) : key(std::move(k)), value(v), text_too(text) {}
  LogField(std::string k, int v, bool text = true) : key(std::move(k)), value(int64_t(v)), text_too(text) {}
  LogField(std::string k, double v, bool text = true) : key(std::move(k)), value(v), text_too(text) {}
  LogField(std::string k, bool v, bool text = true) : key(std::move(k)), value(v), text_too(text) {}
  LogField(std::string k, std::vector<std::string> v, bool text = true)
      : key(std::move(k)), value(std::move(v)), text_too(text) {}
  std::string key;
  Value value;
  bool text_too = true;  // false: the field appears in JSON lines only
};

class Logger {
 public:
  // out: where lines go (stderr by default); not owned, must outlive the logger.
  explicit Logger(LogFormat format = LogFormat::Text, LogLevel min_level = LogLevel::Info, FILE* out = stderr);

  LogFormat format() const { return format_; }
  bool enabled(LogLevel level) const { return level >= min_level_; }
  // Writes one line when `level` >= the minimum level.
  void log(LogLevel level, std::string_view message, const std::vector<LogField>& fields = {});
  void info(std::string_view message, const std::vector<LogField>& fields = {}) { log(LogLevel::Info, message, fields); }
  void warn(std::string_view message, const std::vector<LogField>& fields = {}) { log(LogLevel::Warn, message, fields); }
  void error(std::string_view message, const std::vector<LogField>& fields = {}) { log(LogLevel::Error, message, fields); }

  // The line log() would write at wall-clock time `unix_ms` (milliseconds since the epoch), without the
  // trailing newline; for tests.
  std::string format_line(int64_t unix_ms, LogLevel level, std::string_view message,
                          const std::vector<LogField>& fields) const;

 private:
  LogFormat format_;
  LogLevel min_level_;
  FILE* out_;
  std::mutex mu_;
};

// `s` as a JSON string literal, quotes included (control characters as \u00XX; other bytes as they are).
std::string json_quote(std::string_view s);

}  // namespace tp
