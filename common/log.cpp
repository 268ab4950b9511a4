#include "common/log.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <type_traits>

#include "common/error.h"

namespace tp {
namespace {

std::string utc_time(int64_t unix_ms) {
  const std::time_t secs = std::time_t(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(unix_ms % 1000));
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A text value: bare when it is a plain word, else quoted with " and \ escaped.
std::string text_value(std::string_view s) {
  bool plain = !s.empty();
  for (char c : s) plain = plain && c != ' ' && c != '"' && c != '=' && c != '\\' && c != '\n' && c != '\t';
  if (plain) return std::string(s);
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r + "\"";
}

}  // namespace

LogFormat parse_log_format(const std::string& s, const std::string& where) {
  if (s == "text") return LogFormat::Text;
  if (s == "json") return LogFormat::Json;
  throw InputError(where + ": '" + s + "' is not a log format (text or json)");
}

LogLevel parse_log_level(const std::string& s, const std::string& where) {
  if (s == "debug") return LogLevel::Debug;
  if (s == "info") return LogLevel::Info;
  if (s == "warn") return LogLevel::Warn;
  if (s == "error") return LogLevel::Error;
  throw InputError(where + ": '" + s + "' is not a log level (debug, info, warn or error)");
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "info";
}

std::string json_quote(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\r': r += "\\r"; break;
      case '\t': r += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
          r += buf;
        } else {
          r += c;
        }
    }
  }
  return r + "\"";
}

Logger::Logger(LogFormat format, LogLevel min_level, FILE* out) : format_(format), min_level_(min_level), out_(out) {}

std::string Logger::format_line(int64_t unix_ms, LogLevel level, std::string_view message,
                                const std::vector<LogField>& fields) const {
  std::string line;
  if (format_ == LogFormat::Json) {
    line = "{\"time\":\"" + utc_time(unix_ms) + "\",\"level\":\"" + log_level_name(level) +
           "\",\"msg\":" + json_quote(message);
    for (const LogField& f : fields) {
      line += "," + json_quote(f.key) + ":";
      std::visit(
          [&line](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::string>) {
              line += json_quote(v);
            } else if constexpr (std::is_same_v<T, int64_t>) {
              line += std::to_string(v);
            } else if constexpr (std::is_same_v<T, double>) {
              line += std::isfinite(v) ? number(v) : "null";
            } else if constexpr (std::is_same_v<T, bool>) {
              line += v ? "true" : "false";
            } else {
              line += "[";
              for (size_t i = 0; i < v.size(); ++i) line += (i ? "," : "") + json_quote(v[i]);
              line += "]";
            }
          },
          f.value);
    }
    return line + "}";
  }
  std::string level_name = log_level_name(level);
  for (char& c : level_name) c = char(c - 'a' + 'A');
  level_name.resize(5, ' ');
  line = utc_time(unix_ms) + " " + level_name + " " + std::string(message);
  for (const LogField& f : fields) {
    if (!f.text_too) continue;
    line += " " + f.key + "=";
    std::visit(
        [&line](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            line += text_value(v);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            line += std::to_string(v);
          } else if constexpr (std::is_same_v<T, double>) {
            line += number(v);
          } else if constexpr (std::is_same_v<T, bool>) {
            line += v ? "true" : "false";
          } else {
            std::string joined;
            for (size_t i = 0; i < v.size(); ++i) joined += (i ? "," : "") + v[i];
            line += "[" + joined + "]";
          }
        },
        f.value);
  }
  return line;
}

void Logger::log(LogLevel level, std::string_view message, const std::vector<LogField>& fields) {
  if (!enabled(level)) return;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string line = format_line(now_ms, level, message, fields) + "\n";
  std::lock_guard lk(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace tp
