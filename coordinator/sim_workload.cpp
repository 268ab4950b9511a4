#include "coordinator/sim_workload.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/error.h"

namespace tp {
namespace {

double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }  // [0, 1)

int64_t draw(const LengthDist& d, std::mt19937_64& rng) {
  switch (d.kind) {
    case LengthDist::Kind::Fixed: return d.value;
    case LengthDist::Kind::Uniform:
      return d.min + int64_t(uniform01(rng) * double(d.max - d.min + 1));
    case LengthDist::Kind::Exponential: {
      const int64_t v = int64_t(std::llround(-d.mean * std::log1p(-uniform01(rng))));
      return std::clamp(v, d.min, d.max);
    }
  }
  return d.value;
}

int64_t whole(const YAML::Node& n, const std::string& file, const std::string& field) {
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    throw ConfigError(file, field, "not a number");
  }
  if (!std::isfinite(v) || v != std::floor(v) || v < 1 || v > 1e9)
    throw ConfigError(file, field, "must be a whole number in [1, 1e9]");
  return int64_t(v);
}

LengthDist parse_dist(const YAML::Node& n, const std::string& file, const std::string& field) {
  if (!n) throw ConfigError(file, field, "missing");
  LengthDist d;
  if (n.IsScalar()) {
    d.value = whole(n, file, field);
    return d;
  }
  if (!n.IsMap() || !n["dist"]) throw ConfigError(file, field + ".dist", "missing (fixed, uniform or exponential)");
  const std::string kind = n["dist"].as<std::string>("");
  auto req = [&](const char* key) {
    if (!n[key]) throw ConfigError(file, field + "." + key, "missing");
    return whole(n[key], file, field + "." + key);
  };
  if (kind == "fixed") {
    d.value = req("value");
  } else if (kind == "uniform") {
    d.kind = LengthDist::Kind::Uniform;
    d.min = req("min");
    d.max = req("max");
    if (d.max < d.min) throw ConfigError(file, field + ".max", "must be >= min");
  } else if (kind == "exponential") {
    d.kind = LengthDist::Kind::Exponential;
    d.mean = double(req("mean"));
    d.min = n["min"] ? req("min") : 1;
    d.max = n["max"] ? req("max") : int64_t(1e9);
    if (d.max < d.min) throw ConfigError(file, field + ".max", "must be >= min");
  } else {
    throw ConfigError(file, field + ".dist", "unknown '" + kind + "' (fixed, uniform or exponential)");
  }
  return d;
}

Workload load_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("workload " + path + ": cannot read the file");
  Workload w;
  w.trace = true;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = "line " + std::to_string(no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(path, at, std::string("not JSON: ") + e.what());
    }
    auto field = [&](const char* key) -> double {
      if (!j.is_object() || !j.contains(key) || !j[key].is_number()) throw ConfigError(path, at + ": " + key, "missing or not a number");
      return j[key].get<double>();
    };
    SimRequest r;
    r.id = int64_t(w.requests.size());
    r.arrival_s = field("arrival_s");
    if (!std::isfinite(r.arrival_s) || r.arrival_s < 0) throw ConfigError(path, at + ": arrival_s", "must be >= 0");
    const double p = field("prompt_len"), o = field("output_len");
    if (p < 1 || p != std::floor(p) || p > 1e9) throw ConfigError(path, at + ": prompt_len", "must be a whole number >= 1");
    if (o < 1 || o != std::floor(o) || o > 1e9) throw ConfigError(path, at + ": output_len", "must be a whole number >= 1");
    r.prompt_len = int64_t(p);
    r.output_len = int64_t(o);
    w.requests.push_back(std::move(r));
  }
  if (w.requests.empty()) throw ConfigError(path, "<jsonl>", "no requests");
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const SimRequest& a, const SimRequest& b) { return a.arrival_s < b.arrival_s; });
  w.n_requests = int64_t(w.requests.size());
  std::mt19937_64 rng(0);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    SimRequest& r = w.requests[i];
    r.id = int64_t(i);
    r.prompt.resize(size_t(r.prompt_len));
    for (int32_t& t : r.prompt) t = int32_t(2 + rng() % 30000);
  }
  return w;
}

}  // namespace

void draw_requests(Workload& w) {
  std::mt19937_64 rng(w.seed);
  std::vector<int32_t> prefix(size_t(w.prefix_len));
  for (int32_t& t : prefix) t = int32_t(2 + rng() % 30000);
  w.requests.clear();
  double t = 0;
  for (int64_t i = 0; i < w.n_requests; ++i) {
    SimRequest r;
    r.id = i;
    if (w.rate > 0) {
      t += -std::log1p(-uniform01(rng)) / w.rate;
      r.arrival_s = t;
    }
    r.prompt_len = std::max(draw(w.prompt_len, rng), w.prefix_len + 1);
    r.output_len = draw(w.output_len, rng);
    r.prompt = prefix;
    while (int64_t(r.prompt.size()) < r.prompt_len) r.prompt.push_back(int32_t(2 + rng() % 30000));
    w.requests.push_back(std::move(r));
  }
}

Workload load_workload(const std::string& path) {
  if (path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl") return load_jsonl(path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError("workload " + path + ": cannot read the file");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, "<yaml>", "not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (!root.IsMap()) throw ConfigError(path, "<yaml>", "expected a mapping of fields");
  Workload w;
  if (root["seed"]) {
    try {
      w.seed = root["seed"].as<uint64_t>();
    } catch (const YAML::Exception&) {
      throw ConfigError(path, "seed", "not a non-negative integer");
    }
  }
  if (!root["requests"]) throw ConfigError(path, "requests", "missing");
  w.n_requests = whole(root["requests"], path, "requests");
  const YAML::Node a = root["arrival"];
  if (!a || !a.IsMap()) throw ConfigError(path, "arrival", "missing (rate: R or concurrency: C)");
  if (bool(a["rate"]) == bool(a["concurrency"]))
    throw ConfigError(path, "arrival", "give exactly one of rate and concurrency");
  if (a["rate"]) {
    try {
      w.rate = a["rate"].as<double>();
    } catch (const YAML::Exception&) {
      throw ConfigError(path, "arrival.rate", "not a number");
    }
    if (!std::isfinite(w.rate) || w.rate <= 0) throw ConfigError(path, "arrival.rate", "must be > 0");
  } else {
    w.concurrency = whole(a["concurrency"], path, "arrival.concurrency");
  }
  w.prompt_len = parse_dist(root["prompt_len"], path, "prompt_len");
  w.output_len = parse_dist(root["output_len"], path, "output_len");
  if (root["prefix_len"]) {
    const double p = root["prefix_len"].as<double>(-1);
    if (p < 0 || p != std::floor(p)) throw ConfigError(path, "prefix_len", "must be a whole number >= 0");
    w.prefix_len = int64_t(p);
  }
  draw_requests(w);
  return w;
}

}  // namespace tp
