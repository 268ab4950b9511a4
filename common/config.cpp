#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/kv_dtype.h"

namespace tp {
namespace {

namespace fs = std::filesystem;

std::string line_text(const YAML::Mark& m) { return m.line >= 0 ? "line " + std::to_string(m.line + 1) : "?"; }

// Where two occurrences of one name stand: lines, and columns too when they share a line (flow style).
std::string both_places(const YAML::Mark& a, const YAML::Mark& b) {
  if (a.line != b.line) return "at " + line_text(a) + " and again at " + line_text(b);
  return "at " + line_text(a) + ", column " + std::to_string(a.column + 1) + " and again at column " +
         std::to_string(b.column + 1);
}

struct Reader {
  const std::string& source;
  const std::string& base_dir;

  std::string where(const YAML::Node& n) const {
    const auto m = n.Mark();
    return m.line >= 0 ? " (line " + std::to_string(m.line + 1) + ")" : "";
  }

  void require_scalar(const YAML::Node& n, const std::string& key, const char* what) const {
    if (!n.IsScalar()) throw ConfigError(source, key, std::string("expected ") + what + where(n));
  }

  int64_t integer(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) const {
    require_scalar(n, key, "an integer");
    int64_t v = 0;
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      throw ConfigError(source, key, "expected an integer, got '" + n.Scalar() + "'" + where(n));
    }
    if (v < lo || v > hi)
      throw ConfigError(source, key,
                        std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "]" + where(n));
    return v;
  }

  double real(const YAML::Node& n, const std::string& key, double lo, double hi) const {
    require_scalar(n, key, "a number");
    double v = 0;
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      throw ConfigError(source, key, "expected a number, got '" + n.Scalar() + "'" + where(n));
    }
    if (!(v >= lo && v <= hi)) throw ConfigError(source, key, n.Scalar() + " is out of range" + where(n));
    return v;
  }

  bool boolean(const YAML::Node& n, const std::string& key) const {
    require_scalar(n, key, "true or false");
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      throw ConfigError(source, key, "expected true or false, got '" + n.Scalar() + "'" + where(n));
    }
  }

  std::string string(const YAML::Node& n, const std::string& key) const {
    require_scalar(n, key, "a string");
    return n.Scalar();
  }

  std::string one_of(const YAML::Node& n, const std::string& key, std::initializer_list<const char*> choices) const {
    std::string v = string(n, key);
    std::string list;
    for (const char* c : choices) {
      if (v == c) return v;
      list += (list.empty() ? "" : ", ") + std::string(c);
    }
    throw ConfigError(source, key, "'" + v + "' is not one of: " + list + where(n));
  }
};

// ---- the settings: one row per YAML key, the single source of what is read and what is printed ----

using ReadFn = std::function<void(const Reader&, const YAML::Node&, const std::string& key, Config&)>;
using PrintFn = std::function<void(const Config&, YAML::Emitter&)>;

struct Setting {
  const char* section;
  const char* key;
  ReadFn read;
  PrintFn print;
};

void emit(YAML::Emitter& out, int64_t v) { out << v; }
void emit(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }
void emit(YAML::Emitter& out, const std::string& v) { out << YAML::DoubleQuoted << v; }
void emit(YAML::Emitter& out, const std::vector<std::string>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& x : v) out << YAML::DoubleQuoted << x;
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, double v) {  // shortest text that reads back to the same double
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out << std::string(buf, r.ptr);
}

// A row for field `field` of section `sec` of Config, read by `read` (which applies the key's checks).
template <class S, class T>
Setting row(const char* section, const char* key, S Config::*sec, T S::*field,
            std::function<T(const Reader&, const YAML::Node&, const std::string&)> read) {
  return {section, key,
          [sec, field, read](const Reader& r, const YAML::Node& n, const std::string& k, Config& c) {
            (c.*sec).*field = read(r, n, k);
          },
          [sec, field](const Config& c, YAML::Emitter& out) { emit(out, (c.*sec).*field); }};
}

template <class S>
Setting integer(const char* section, const char* key, S Config::*sec, int64_t S::*field, int64_t lo, int64_t hi) {
  return row<S, int64_t>(section, key, sec, field,
                         [lo, hi](const Reader& r, const YAML::Node& n, const std::string& k) {
                           return r.integer(n, k, lo, hi);
                         });
}

template <class S>
Setting real(const char* section, const char* key, S Config::*sec, double S::*field, double lo, double hi) {
  return row<S, double>(section, key, sec, field,
                        [lo, hi](const Reader& r, const YAML::Node& n, const std::string& k) { return r.real(n, k, lo, hi); });
}

template <class S>
Setting text(const char* section, const char* key, S Config::*sec, std::string S::*field) {
  return row<S, std::string>(section, key, sec, field,
                             [](const Reader& r, const YAML::Node& n, const std::string& k) { return r.string(n, k); });
}

template <class S>
Setting choice(const char* section, const char* key, S Config::*sec, std::string S::*field,
               std::initializer_list<const char*> choices) {
  const std::vector<const char*> list(choices);
  return row<S, std::string>(section, key, sec, field, [list](const Reader& r, const YAML::Node& n, const std::string& k) {
    const std::string v = r.string(n, k);
    if (std::find_if(list.begin(), list.end(), [&](const char* c) { return v == c; }) != list.end()) return v;
    std::string names;
    for (const char* c : list) names += (names.empty() ? "" : ", ") + std::string(c);
    throw ConfigError(r.source, k, "'" + v + "' is not one of: " + names + r.where(n));
  });
}

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

const std::vector<Setting>& settings() {
  using C = Config;
  static const std::vector<Setting> kSettings = {
      row<ModelSection, std::string>("model", "path", &C::model, &ModelSection::path,
                                     [](const Reader& r, const YAML::Node& n, const std::string& k) {
                                       std::string path = r.string(n, k);
                                       if (path.empty()) throw ConfigError(r.source, k, "must not be empty" + r.where(n));
                                       if (fs::path(path).is_relative() && !r.base_dir.empty())
                                         path = (fs::path(r.base_dir) / path).lexically_normal().string();
                                       return path;
                                     }),
      choice("model", "dtype", &C::model, &ModelSection::dtype, {kRuntimeDTypeNames[0], kRuntimeDTypeNames[1]}),
      choice("model", "quantized", &C::model, &ModelSection::quantized, {"keep", "dequantize"}),
      text("model", "name", &C::model, &ModelSection::name),
      text("model", "chat_template", &C::model, &ModelSection::chat_template),
      choice("model", "device", &C::model, &ModelSection::device, {"cpu", "cuda"}),
      integer("parallel", "tp", &C::parallel, &ParallelSection::tp, 1, 4096),
      integer("parallel", "dp", &C::parallel, &ParallelSection::dp, 1, 4096),
      integer("parallel", "threads", &C::parallel, &ParallelSection::threads, 0, 1024),
      text("parallel", "rank_memory", &C::parallel, &ParallelSection::rank_memory),
      row<CacheSection, int64_t>("cache", "block_size", &C::cache, &CacheSection::block_size,
                                 [](const Reader& r, const YAML::Node& n, const std::string& k) {
                                   const int64_t v = r.integer(n, k, 1, 1024);
                                   if (!is_power_of_two(v))
                                     throw ConfigError(r.source, k, std::to_string(v) + " is not a power of two" + r.where(n));
                                   return v;
                                 }),
      integer("cache", "memory_mb", &C::cache, &CacheSection::memory_mb, 1, int64_t(1) << 30),
      choice("cache", "dtype", &C::cache, &CacheSection::dtype,
             {kKvDTypeNames[0], kKvDTypeNames[1], kKvDTypeNames[2], kKvDTypeNames[3]}),
      integer("cache", "max_context", &C::cache, &CacheSection::max_context, 0, int64_t(1) << 24),
      row<CacheSection, bool>("cache", "prefix_caching", &C::cache, &CacheSection::prefix_caching,
                              [](const Reader& r, const YAML::Node& n, const std::string& k) { return r.boolean(n, k); }),
      row<CacheSection, double>("cache", "gpu_memory_utilization", &C::cache, &CacheSection::gpu_memory_utilization,
                                [](const Reader& r, const YAML::Node& n, const std::string& k) {
                                  const double v = r.real(n, k, 0.0, 1.0);
                                  if (v <= 0.0) throw ConfigError(r.source, k, n.Scalar() + " is out of range (0, 1]" + r.where(n));
                                  return v;
                                }),
      integer("scheduler", "max_num_seqs", &C::scheduler, &SchedulerSection::max_num_seqs, 1, 1 << 20),
      integer("scheduler", "max_num_batched_tokens", &C::scheduler, &SchedulerSection::max_num_batched_tokens, 1, 1 << 24),
      integer("scheduler", "max_queued_requests", &C::scheduler, &SchedulerSection::max_queued_requests, 1, 1 << 24),
      choice("scheduler", "kv_reservation", &C::scheduler, &SchedulerSection::kv_reservation, {"paged", "static"}),
      text("server", "host", &C::server, &ServerSection::host),
      integer("server", "port", &C::server, &ServerSection::port, 0, 65535),
      text("server", "api_key", &C::server, &ServerSection::api_key),
      integer("server", "max_body_bytes", &C::server, &ServerSection::max_body_bytes, 1, int64_t(1) << 32),
      integer("server", "max_connections", &C::server, &ServerSection::max_connections, 1, 65536),
      real("server", "shutdown_deadline_s", &C::server, &ServerSection::shutdown_deadline_s, 0.0, 3600.0),
      real("server", "request_timeout_s", &C::server, &ServerSection::request_timeout_s, 0.0, 86400.0),
      real("server", "step_timeout_s", &C::server, &ServerSection::step_timeout_s, 0.0, 86400.0),
      choice("server", "metrics_prefix", &C::server, &ServerSection::metrics_prefix, {"vllm", "tpserve"}),
      real("server", "keepalive_timeout_s", &C::server, &ServerSection::keepalive_timeout_s, 0.0, 86400.0),
      real("server", "send_timeout_s", &C::server, &ServerSection::send_timeout_s, 0.0, 86400.0),
      choice("server", "log_format", &C::server, &ServerSection::log_format, {"text", "json"}),
      real("server", "stats_interval_s", &C::server, &ServerSection::stats_interval_s, 0.0, 86400.0),
      row<KvEventsSection, bool>("kv_events", "enable", &C::kv_events, &KvEventsSection::enable,
                                 [](const Reader& r, const YAML::Node& n, const std::string& k) { return r.boolean(n, k); }),
      row<KvEventsSection, std::string>("kv_events", "endpoint", &C::kv_events, &KvEventsSection::endpoint,
                                        [](const Reader& r, const YAML::Node& n, const std::string& k) {
                                          std::string v = r.string(n, k);
                                          if (v.rfind("tcp://", 0) != 0 && v.rfind("ipc://", 0) != 0 &&
                                              v.rfind("inproc://", 0) != 0)
                                            throw ConfigError(r.source, k, "'" + v + "' is not a ZeroMQ endpoint "
                                                              "(tcp://host:port, tcp://host:*, ipc://path)" + r.where(n));
                                          return v;
                                        }),
      text("kv_events", "topic", &C::kv_events, &KvEventsSection::topic),
      row<RouterSection, std::vector<std::string>>(
          "router", "replicas", &C::router, &RouterSection::replicas,
          [](const Reader& r, const YAML::Node& n, const std::string& k) {
            if (!n.IsSequence()) throw ConfigError(r.source, k, "expected a list of URLs" + r.where(n));
            std::vector<std::string> urls;
            for (size_t i = 0; i < n.size(); ++i) {
              const std::string ki = k + "[" + std::to_string(i) + "]";
              std::string u = r.string(n[i], ki);
              if (u.rfind("http://", 0) != 0)
                throw ConfigError(r.source, ki, "'" + u + "' is not an http:// URL" + r.where(n[i]));
              urls.push_back(u);
            }
            return urls;
          }),
      choice("router", "policy", &C::router, &RouterSection::policy, {"prefix_aware", "least_load", "round_robin"}),
      real("router", "health_interval_s", &C::router, &RouterSection::health_interval_s, 0.05, 3600.0),
      real("router", "health_timeout_s", &C::router, &RouterSection::health_timeout_s, 0.05, 3600.0),
      integer("router", "unhealthy_after", &C::router, &RouterSection::unhealthy_after, 1, 1000),
      real("router", "kv_usage_tokens", &C::router, &RouterSection::kv_usage_tokens, 0.0, 1e12),
      row<RouterSection, bool>("router", "kv_fetch", &C::router, &RouterSection::kv_fetch,
                               [](const Reader& r, const YAML::Node& n, const std::string& k) { return r.boolean(n, k); }),
      integer("router", "max_replays", &C::router, &RouterSection::max_replays, 0, 100),
  };
  return kSettings;
}

// The sections in order of first appearance in the settings.
std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const Setting& s : settings())
    if (std::find(names.begin(), names.end(), s.section) == names.end()) names.push_back(s.section);
  return names;
}

std::string joined(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Refuses a name that a mapping holds twice (yaml-cpp keeps both; lookups would see only the first).
void refuse_duplicates(const YAML::Node& map, const std::string& source, const std::string& prefix, const char* what) {
  std::vector<std::pair<std::string, YAML::Mark>> seen;
  for (const auto& kv : map) {
    const std::string name = kv.first.as<std::string>();
    for (const auto& [other, mark] : seen)
      if (other == name)
        throw ConfigError(source, prefix + name,
                          std::string(what) + " given twice: " + both_places(mark, kv.first.Mark()) +
                              " (keep one; the later one would be ignored)");
    seen.emplace_back(name, kv.first.Mark());
  }
}

}  // namespace

std::string Config::line_of(const std::string& key) const {
  const auto it = lines.find(key);
  return it == lines.end() ? "" : " (line " + std::to_string(it->second) + ")";
}

Config parse_config(const std::string& yaml_text, const std::string& source, const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source, "<yaml>", "not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  Config c;
  c.source = source;
  if (!root || root.IsNull()) return c;
  if (!root.IsMap()) throw ConfigError(source, "<root>", "expected a mapping of sections");

  const Reader r{source, base_dir};
  const std::vector<std::string> sections = section_names();
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw ConfigError(source, "<root>", "a section name must be a plain name, not a sequence or mapping" +
                                             r.where(kv.first));
    const std::string s = kv.first.as<std::string>();
    if (std::find(sections.begin(), sections.end(), s) == sections.end())
      throw ConfigError(source, s, "unknown section (valid: " + joined(sections) + ")" + r.where(kv.first));
  }
  refuse_duplicates(root, source, "", "section");

  for (const std::string& name : sections) {
    const YAML::Node n = root[name];
    if (!n || n.IsNull()) continue;
    if (!n.IsMap()) throw ConfigError(source, name, "expected a mapping of keys" + r.where(n));
    std::vector<std::string> valid;
    for (const Setting& s : settings())
      if (name == s.section) valid.push_back(s.key);
    for (const auto& kv : n) {
      if (!kv.first.IsScalar())
        throw ConfigError(source, name, "a key must be a plain name, not a sequence or mapping" + r.where(kv.first));
      const std::string key = kv.first.as<std::string>();
      if (std::find(valid.begin(), valid.end(), key) == valid.end())
        throw ConfigError(source, name + "." + key, "unknown key (valid: " + joined(valid) + ")" + r.where(kv.first));
    }
    refuse_duplicates(n, source, name + ".", "key");
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      for (const Setting& s : settings())
        if (name == s.section && key == s.key) s.read(r, kv.second, name + "." + key, c);
      if (kv.first.Mark().line >= 0) c.lines[name + "." + key] = kv.first.Mark().line + 1;
    }
  }
  return c;
}

Config load_config(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(path + ": is a directory, expected a YAML file");
  std::ifstream in(path);
  if (!in) throw InputError("cannot read config '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError("cannot read config '" + path + "': " + std::strerror(errno));
  return parse_config(ss.str(), path, fs::absolute(path).parent_path().string());
}

std::string format_config(const Config& c) {
  // A relative model path (a default, or set from the command line) is relative to the working directory.
  Config printed = c;
  std::error_code ec;
  if (fs::path(c.model.path).is_relative())
    if (const fs::path abs = fs::absolute(c.model.path, ec); !ec) printed.model.path = abs.lexically_normal().string();
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const std::string& name : section_names()) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    for (const Setting& s : settings()) {
      if (name != s.section) continue;
      out << YAML::Key << s.key << YAML::Value;
      s.print(printed, out);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void check_config_for_model(const Config& c, int64_t model_max_context, const std::string& model_path) {
  if (model_max_context > 0 && c.cache.max_context > model_max_context)
    throw ConfigError(c.source, "cache.max_context",
                      std::to_string(c.cache.max_context) + " exceeds the trained context of the model (" +
                          std::to_string(model_max_context) + " tokens in " + model_path + ")" +
                          c.line_of("cache.max_context") + "; use at most " + std::to_string(model_max_context) +
                          ", or 0 for the model's");
}

}  // namespace tp
