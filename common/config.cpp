#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/error.h"

namespace tp {
namespace {

// One section's keys: name -> reader of the YAML node into the struct field.
using KeyReader = std::function<void(const YAML::Node&, const std::string& key)>;

struct Reader {
  const std::string& source;

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
    if (!(v >= lo && v <= hi))
      throw ConfigError(source, key, n.Scalar() + " is out of range" + where(n));
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

  void section(const YAML::Node& root, const std::string& name, const std::map<std::string, KeyReader>& keys) const {
    const YAML::Node n = root[name];
    if (!n) return;
    if (n.IsNull()) return;
    if (!n.IsMap()) throw ConfigError(source, name, "expected a mapping of keys" + where(n));
    for (const auto& kv : n) {
      if (!kv.first.IsScalar())
        throw ConfigError(source, name, "a key must be a plain name, not a sequence or mapping" + where(kv.first));
      const std::string key = kv.first.as<std::string>();
      auto it = keys.find(key);
      if (it == keys.end()) {
        std::string valid;
        for (const auto& k : keys) valid += (valid.empty() ? "" : ", ") + k.first;
        throw ConfigError(source, name + "." + key, "unknown key (valid: " + valid + ")" + where(kv.first));
      }
      it->second(kv.second, name + "." + key);
    }
  }
};

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

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

  const Reader r{source};
  static const char* kSections[] = {"model", "parallel", "cache", "scheduler", "server"};
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw ConfigError(source, "<root>", "a section name must be a plain name, not a sequence or mapping" +
                                             r.where(kv.first));
    const std::string s = kv.first.as<std::string>();
    bool known = false;
    for (const char* k : kSections) known = known || s == k;
    if (!known)
      throw ConfigError(source, s, "unknown section (valid: model, parallel, cache, scheduler, server)" + r.where(kv.first));
  }

  r.section(root, "model",
            {{"path",
              [&](auto& n, auto& k) {
                c.model.path = r.string(n, k);
                if (c.model.path.empty()) throw ConfigError(source, k, "must not be empty" + r.where(n));
                namespace fs = std::filesystem;
                if (fs::path(c.model.path).is_relative() && !base_dir.empty())
                  c.model.path = (fs::path(base_dir) / c.model.path).lexically_normal().string();
              }},
             {"dtype", [&](auto& n, auto& k) { c.model.dtype = r.one_of(n, k, {"bf16", "f32"}); }},
             {"name", [&](auto& n, auto& k) { c.model.name = r.string(n, k); }},
             {"chat_template", [&](auto& n, auto& k) { c.model.chat_template = r.string(n, k); }}});
  r.section(root, "parallel",
            {{"tp", [&](auto& n, auto& k) { c.parallel.tp = r.integer(n, k, 1, 4096); }},
             {"dp", [&](auto& n, auto& k) { c.parallel.dp = r.integer(n, k, 1, 4096); }},
             {"threads", [&](auto& n, auto& k) { c.parallel.threads = r.integer(n, k, 0, 1024); }}});
  r.section(root, "cache",
            {{"block_size",
              [&](auto& n, auto& k) {
                c.cache.block_size = r.integer(n, k, 1, 1024);
                if (!is_power_of_two(c.cache.block_size))
                  throw ConfigError(source, k, std::to_string(c.cache.block_size) + " is not a power of two" + r.where(n));
              }},
             {"memory_mb", [&](auto& n, auto& k) { c.cache.memory_mb = r.integer(n, k, 1, int64_t(1) << 30); }},
             {"max_context", [&](auto& n, auto& k) { c.cache.max_context = r.integer(n, k, 0, int64_t(1) << 24); }},
             {"prefix_caching", [&](auto& n, auto& k) { c.cache.prefix_caching = r.boolean(n, k); }}});
  r.section(root, "scheduler",
            {{"max_num_seqs", [&](auto& n, auto& k) { c.scheduler.max_num_seqs = r.integer(n, k, 1, 1 << 20); }},
             {"max_num_batched_tokens",
              [&](auto& n, auto& k) { c.scheduler.max_num_batched_tokens = r.integer(n, k, 1, 1 << 24); }},
             {"max_queued_requests",
              [&](auto& n, auto& k) { c.scheduler.max_queued_requests = r.integer(n, k, 1, 1 << 24); }},
             {"kv_reservation",
              [&](auto& n, auto& k) { c.scheduler.kv_reservation = r.one_of(n, k, {"paged", "static"}); }}});
  r.section(root, "server",
            {{"host", [&](auto& n, auto& k) { c.server.host = r.string(n, k); }},
             {"port", [&](auto& n, auto& k) { c.server.port = r.integer(n, k, 0, 65535); }},
             {"api_key", [&](auto& n, auto& k) { c.server.api_key = r.string(n, k); }},
             {"max_body_bytes", [&](auto& n, auto& k) { c.server.max_body_bytes = r.integer(n, k, 1, int64_t(1) << 32); }},
             {"shutdown_deadline_s", [&](auto& n, auto& k) { c.server.shutdown_deadline_s = r.real(n, k, 0.0, 3600.0); }},
             {"max_connections", [&](auto& n, auto& k) { c.server.max_connections = r.integer(n, k, 1, 65536); }},
             {"request_timeout_s", [&](auto& n, auto& k) { c.server.request_timeout_s = r.real(n, k, 0.0, 86400.0); }},
             {"step_timeout_s", [&](auto& n, auto& k) { c.server.step_timeout_s = r.real(n, k, 0.0, 86400.0); }},
             {"keepalive_timeout_s", [&](auto& n, auto& k) { c.server.keepalive_timeout_s = r.real(n, k, 0.0, 86400.0); }},
             {"send_timeout_s", [&](auto& n, auto& k) { c.server.send_timeout_s = r.real(n, k, 0.0, 86400.0); }},
             {"log_format", [&](auto& n, auto& k) { c.server.log_format = r.one_of(n, k, {"text", "json"}); }},
             {"stats_interval_s", [&](auto& n, auto& k) { c.server.stats_interval_s = r.real(n, k, 0.0, 86400.0); }}});

  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, std::filesystem::absolute(path).parent_path().string());
}

}  // namespace tp
