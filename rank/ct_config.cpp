// compressed-tensors' quantization_config and module schemes (see ct_config.h).
#include "rank/ct_config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tp {
namespace {

using json = nlohmann::json;

std::string num(int64_t v) { return std::to_string(v); }

struct Fields {
  const std::string& file;
  std::string path;  // "quantization_config.config_groups.group_0.weights"
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw FormatError(file, path + (key.empty() ? "" : "." + key), why);
  }
  // Refuses keys outside `known` (a checkpoint from a newer tool says something we would silently ignore).
  void only(const json& j, std::initializer_list<const char*> known) const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool ok = false;
      for (const char* k : known) ok = ok || it.key() == k;
      if (!ok) fail(it.key(), "unknown field (value " + it.value().dump() + "); this loader knows: " + list(known));
    }
  }
  static std::string list(std::initializer_list<const char*> v) {
    std::string s;
    for (const char* k : v) s += (s.empty() ? "" : ", ") + std::string(k);
    return s;
  }
};

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& j, const Fields& f, const char* key, const std::string& fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_string()) f.fail(key, "expected a string, found " + v->dump());
  return v->get<std::string>();
}

bool get_bool(const json& j, const Fields& f, const char* key, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) f.fail(key, "expected true or false, found " + v->dump());
  return v->get<bool>();
}

std::optional<int64_t> get_int(const json& j, const Fields& f, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) f.fail(key, "expected an integer, found " + v->dump());
  return v->get<int64_t>();
}

std::vector<std::string> get_strings(const json& j, const Fields& f, const char* key) {
  const json* v = field(j, key);
  std::vector<std::string> out;
  if (!v) return out;
  if (!v->is_array()) f.fail(key, "expected a list of strings, found " + v->dump());
  for (const json& e : *v) {
    if (!e.is_string()) f.fail(key, "expected a list of strings, found " + e.dump() + " in it");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// Why the "re:" pattern `p` is refused, or "" when it is accepted. std::regex (as Python's re, which
// compressed-tensors uses) compiles by recursion and matches by backtracking: a pattern nested thousands of groups
// deep overflows the stack, and one with a group repeated (*, +, {}) that itself repeats or alternates — "(.*)*x",
// "(a|a)*b" — takes exponential time on a 40-character module name (a hang at load). Targets in real checkpoints
// are short and flat ("re:.*mlp.down_proj$", "re:.*self_attn.(q|k|v)_proj$"), so these limits refuse none of them.
std::string regex_target_problem(const std::string& p) {
  constexpr size_t kMaxChars = 512;
  constexpr int kMaxDepth = 16, kMaxCount = 256;
  if (p.size() > kMaxChars) return num(int64_t(p.size())) + " characters (at most " + num(kMaxChars) + ")";
  std::vector<bool> inner;  // per open group: whether it holds a quantifier or an alternation
  auto repeats_at = [&](size_t i) { return i < p.size() && (p[i] == '*' || p[i] == '+' || p[i] == '{'); };
  auto quantifier_at = [&](size_t i) { return repeats_at(i) || (i < p.size() && p[i] == '?'); };
  auto mark = [&] {
    if (!inner.empty()) inner.back() = true;
  };
  bool after_quantifier = false;  // the previous token repeats or is optional: ".*+" repeats a repetition
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    const bool follows_quantifier = after_quantifier;
    after_quantifier = false;
    if ((c == '*' || c == '+' || c == '{') && follows_quantifier)
      return "a repetition of a repetition (at character " + num(int64_t(i)) + "): its matching can take exponential time";
    if (c == '\\') {
      ++i;  // an escaped character (or class, \d): one atom
    } else if (c == '[') {  // a bracket expression: one atom, up to its closing ']' (a leading ']' or '^]' is literal)
      size_t k = i + 1;
      if (k < p.size() && p[k] == '^') ++k;
      if (k < p.size() && p[k] == ']') ++k;
      while (k < p.size() && p[k] != ']') k += p[k] == '\\' ? 2 : 1;
      i = k;
    } else if (c == '(') {
      inner.push_back(false);
      if (int(inner.size()) > kMaxDepth) return "groups nested more than " + num(kMaxDepth) + " deep";
      if (i + 1 < p.size() && p[i + 1] == '?') ++i;  // (?:, (?=, (?!: the '?' is not a quantifier
    } else if (c == ')') {
      if (inner.empty()) continue;  // unbalanced: std::regex reports it
      const bool held = inner.back();
      inner.pop_back();
      if (repeats_at(i + 1) && held)  // an optional group, "(layers\.\d+\.)?", stays linear
        return "a repeated group that itself repeats or alternates (at character " + num(int64_t(i)) +
               "): its matching can take exponential time";
      if (held || quantifier_at(i + 1)) mark();
    } else if (c == '|') {
      mark();
    } else if (c == '*' || c == '+' || c == '?') {
      mark();
      after_quantifier = !(c == '?' && follows_quantifier);  // "*?": lazy, not a further quantifier
    } else if (c == '{') {
      mark();
      int64_t n = 0, most = 0;  // {m}, {m,}, {m,n}: the largest count
      size_t k = i + 1;
      for (; k < p.size() && (std::isdigit(static_cast<unsigned char>(p[k])) || p[k] == ','); ++k) {
        n = p[k] == ',' ? 0 : std::min<int64_t>(n * 10 + (p[k] - '0'), 1 << 20);
        most = std::max(most, n);
      }
      if (most > kMaxCount) return "a repetition count over " + num(kMaxCount);
      if (k < p.size() && p[k] == '}') i = k, after_quantifier = true;
    }
  }
  return "";
}

// Each "re:" entry of `v` (field `key`): within regex_target_problem's limits and compiling as std::regex.
void check_regexes(const std::vector<std::string>& v, const Fields& f, const char* key) {
  for (const std::string& t : v) {
    if (t.rfind("re:", 0) != 0) continue;
    if (const std::string why = regex_target_problem(t.substr(3)); !why.empty())
      f.fail(key, "regular expression '" + t.substr(0, 80) + (t.size() > 80 ? "...'" : "'") + " is refused: " + why);
    try {
      std::regex re(t.substr(3));
    } catch (const std::regex_error& e) {
      f.fail(key, "regular expression '" + t + "' does not compile: " + e.what());
    }
  }
}

CtFormat parse_format(const std::string& s, const Fields& f, const char* key, bool* mixed) {
  static const std::pair<const char*, CtFormat> kFormats[] = {
      {"dense", CtFormat::Dense},
      {"pack-quantized", CtFormat::PackQuantized},
      {"int-quantized", CtFormat::IntQuantized},
      {"float-quantized", CtFormat::FloatQuantized},
      {"naive-quantized", CtFormat::NaiveQuantized},
      {"nvfp4-pack-quantized", CtFormat::Nvfp4Pack},
      {"mxfp4-pack-quantized", CtFormat::Mxfp4Pack},
  };
  if (mixed && s == "mixed-precision") {
    *mixed = true;
    return CtFormat::Dense;
  }
  for (const auto& [name, fmt] : kFormats)
    if (s == name) return fmt;
  f.fail(key, "unsupported format '" + s +
                  "' (supported: dense, pack-quantized, int-quantized, float-quantized, naive-quantized, "
                  "nvfp4-pack-quantized, mxfp4-pack-quantized" +
                  (mixed ? ", mixed-precision)" : ")"));
}

// A torch dtype name in scale_dtype / zp_dtype ("torch.float8_e4m3fn", "torch.uint8", ...): informational
// (the tensors carry their own dtype), but an unknown one is refused.
void check_torch_dtype(const json& j, const Fields& f, const char* key) {
  const json* v = field(j, key);
  if (!v) return;
  if (!v->is_string()) f.fail(key, "expected a torch dtype name, found " + v->dump());
  std::string s = v->get<std::string>();
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  static const char* kKnown[] = {"float32", "float16", "bfloat16", "float8_e4m3fn", "uint8", "int8", "int32"};
  for (const char* k : kKnown)
    if (s == k) return;
  f.fail(key, "unsupported dtype '" + v->get<std::string>() +
                  "' (supported: float32, float16, bfloat16, float8_e4m3fn, uint8, int8, int32)");
}

CtQuantArgs parse_args(const json& j, const Fields& f) {
  if (!j.is_object()) f.fail("", "expected an object, found " + j.dump());
  f.only(j, {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic", "actorder",
             "observer", "observer_kwargs", "scale_dtype", "zp_dtype"});
  CtQuantArgs a;
  a.num_bits = int(get_int(j, f, "num_bits").value_or(8));
  const std::string type = get_string(j, f, "type", "int");
  if (type == "int") a.type = CtType::Int;
  else if (type == "float") a.type = CtType::Float;
  else f.fail("type", "unsupported type '" + type + "' (supported: int, float)");
  a.symmetric = get_bool(j, f, "symmetric", true);
  const std::optional<int64_t> gs = get_int(j, f, "group_size");
  std::string strategy = get_string(j, f, "strategy", "");
  if (strategy.empty()) strategy = !gs ? "tensor" : *gs == -1 ? "channel" : "group";  // compressed-tensors' inference
  static const std::pair<const char*, CtStrategy> kStrategies[] = {
      {"tensor", CtStrategy::Tensor}, {"channel", CtStrategy::Channel}, {"group", CtStrategy::Group},
      {"block", CtStrategy::Block},   {"token", CtStrategy::Token},     {"tensor_group", CtStrategy::TensorGroup},
  };
  bool known = false;
  for (const auto& [name, st] : kStrategies)
    if (strategy == name) {
      a.strategy = st;
      known = true;
    }
  if (!known)
    f.fail("strategy", "unsupported strategy '" + strategy + "' (supported: tensor, channel, group, block, token, tensor_group)");
  if (a.strategy == CtStrategy::Group || a.strategy == CtStrategy::TensorGroup) {
    if (!gs || *gs <= 0) f.fail("group_size", "strategy " + strategy + " needs a positive group_size");
    a.group_size = *gs;
  } else if (gs && *gs > 0) {
    f.fail("group_size", "group_size " + num(*gs) + " with strategy " + strategy + " (only group / tensor_group take one)");
  }
  if (const json* b = field(j, "block_structure")) {
    if (a.strategy != CtStrategy::Block) f.fail("block_structure", "block_structure with strategy " + strategy);
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
        (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0)
      f.fail("block_structure", "expected [rows, cols] of two positive integers, found " + b->dump());
    a.block_rows = (*b)[0].get<int64_t>();
    a.block_cols = (*b)[1].get<int64_t>();
  } else if (a.strategy == CtStrategy::Block) {
    f.fail("block_structure", "strategy block needs block_structure [rows, cols]");
  }
  if (const json* d = field(j, "dynamic")) {
    if (d->is_boolean()) a.dynamic = d->get<bool>() ? CtDynamic::Dynamic : CtDynamic::Static;
    else if (d->is_string() && d->get<std::string>() == "local") a.dynamic = CtDynamic::Local;
    else f.fail("dynamic", "unsupported value " + d->dump() + " (supported: true, false, \"local\")");
  }
  if (const json* o = field(j, "actorder")) {
    if (o->is_boolean()) a.actorder = o->get<bool>() ? CtActOrder::Group : CtActOrder::None;
    else if (o->is_string() && (o->get<std::string>() == "group" || o->get<std::string>() == "dynamic")) a.actorder = CtActOrder::Group;
    else if (o->is_string() && (o->get<std::string>() == "weight" || o->get<std::string>() == "static")) a.actorder = CtActOrder::Weight;
    else f.fail("actorder", "unsupported value " + o->dump() + " (supported: null, false, true, group, weight, dynamic, static)");
  }
  if (field(j, "observer") && !field(j, "observer")->is_string()) f.fail("observer", "expected a string");
  check_torch_dtype(j, f, "scale_dtype");
  check_torch_dtype(j, f, "zp_dtype");
  return a;
}

// The format compressed-tensors infers for a scheme (compressors/format.py), for mixed-precision groups
// that do not name theirs.
CtFormat infer_format(const CtScheme& s) {
  const CtQuantArgs& w = *s.weights;
  if (w.num_bits == 4 && w.type == CtType::Float) return w.group_size == 32 ? CtFormat::Mxfp4Pack : CtFormat::Nvfp4Pack;
  if (!s.input_activations)
    return (w.num_bits == 4 || w.num_bits == 8) && w.type == CtType::Int ? CtFormat::PackQuantized : CtFormat::NaiveQuantized;
  if (w.type == CtType::Float && w.num_bits == 8) return CtFormat::FloatQuantized;
  return w.type == CtType::Int ? CtFormat::IntQuantized : CtFormat::NaiveQuantized;
}

// What tpserve runs: refuses, naming the field, a scheme whose weights or activations it has no path for.
void check_scheme(const CtScheme& s, const Fields& f) {
  if (!s.weights) return;
  const CtQuantArgs& w = *s.weights;
  const Fields fw{f.file, f.path + ".weights"};
  if (w.dynamic != CtDynamic::Static) fw.fail("dynamic", "dynamic weight quantization is not a stored format");
  switch (s.format) {
    case CtFormat::PackQuantized:
      if (w.type != CtType::Int || (w.num_bits != 3 && w.num_bits != 4 && w.num_bits != 8))
        fw.fail("num_bits", "pack-quantized weights of " + num(w.num_bits) + "-bit " +
                                (w.type == CtType::Int ? "int" : "float") + " (supported: 3-, 4- and 8-bit int)");
      break;
    case CtFormat::IntQuantized:  // int8 tensors; 4-bit values (W4A8) are repacked two a byte
      if (w.type != CtType::Int || (w.num_bits != 8 && w.num_bits != 4))
        fw.fail("num_bits", "int-quantized weights of " + num(w.num_bits) + " bits (supported: 4- and 8-bit int)");
      break;
    case CtFormat::FloatQuantized:
    case CtFormat::NaiveQuantized:
      if (w.num_bits != 8)
        fw.fail("num_bits", std::string(ct_format_name(s.format)) + " weights of " + num(w.num_bits) +
                                " bits (supported: 8-bit int or fp8)");
      break;
    case CtFormat::Nvfp4Pack:
      if (w.type != CtType::Float || w.num_bits != 4 || w.group_size != 16 || w.strategy != CtStrategy::TensorGroup)
        fw.fail("strategy", "nvfp4-pack-quantized needs 4-bit float weights, strategy tensor_group, group_size 16");
      break;
    case CtFormat::Mxfp4Pack:
      if (w.type != CtType::Float || w.num_bits != 4 || w.group_size != 32 || w.strategy != CtStrategy::Group)
        fw.fail("strategy", "mxfp4-pack-quantized needs 4-bit float weights, strategy group, group_size 32");
      break;
    case CtFormat::Dense:
      f.fail("format", "format dense for a group with quantized weights");
  }
  if (w.type == CtType::Int) {
    if (w.strategy != CtStrategy::Tensor && w.strategy != CtStrategy::Channel && w.strategy != CtStrategy::Group)
      fw.fail("strategy", "int weights with this strategy (supported: tensor, channel, group)");
  } else if (w.num_bits == 8) {
    if (w.strategy != CtStrategy::Tensor && w.strategy != CtStrategy::Channel && w.strategy != CtStrategy::Block &&
        w.strategy != CtStrategy::Group)
      fw.fail("strategy", "fp8 weights with this strategy (supported: tensor, channel, block, group)");
    if (!w.symmetric) fw.fail("symmetric", "asymmetric fp8 weights");
  }
  if (w.type == CtType::Float && !w.symmetric) fw.fail("symmetric", "asymmetric float weights");
  if (s.input_activations) {
    const CtQuantArgs& a = *s.input_activations;
    const Fields fa{f.file, f.path + ".input_activations"};
    if (a.num_bits != 8)
      fa.fail("num_bits", num(a.num_bits) + "-bit " + (a.type == CtType::Int ? "int" : "float") +
                              " activations (supported: 8-bit int or fp8; FP4 activations (W4A4) are not)");
    if (!a.symmetric) fa.fail("symmetric", "asymmetric activations (input zero points) are not supported");
    const bool ok = (a.strategy == CtStrategy::Token && a.dynamic == CtDynamic::Dynamic) ||
                    (a.strategy == CtStrategy::Tensor && a.dynamic == CtDynamic::Static) ||
                    (a.strategy == CtStrategy::Group && a.dynamic == CtDynamic::Dynamic);
    if (!ok)
      fa.fail("strategy", "activation quantization by this strategy / dynamic pair (supported: token + dynamic, "
                          "tensor + static, group + dynamic; a per-batch dynamic tensor scale is not)");
    if (w.num_bits == 4 && w.type == CtType::Float) fa.fail("", "activation quantization with FP4 weights");
  }
}

CtScheme parse_scheme(const std::string& name, const json& j, const Fields& f, const CtConfig& c) {
  if (!j.is_object()) f.fail("", "expected an object (a scheme), found " + j.dump());
  f.only(j, {"targets", "weights", "input_activations", "output_activations", "format"});
  CtScheme s;
  s.name = name;
  s.targets = get_strings(j, f, "targets");
  if (s.targets.empty()) f.fail("targets", "missing or empty");
  check_regexes(s.targets, f, "targets");
  if (const json* w = field(j, "weights")) s.weights = parse_args(*w, {f.file, f.path + ".weights"});
  if (const json* a = field(j, "input_activations")) s.input_activations = parse_args(*a, {f.file, f.path + ".input_activations"});
  if (field(j, "output_activations")) f.fail("output_activations", "output activation quantization is not supported");
  if (s.input_activations && !s.weights) f.fail("weights", "activation quantization without weight quantization");
  const std::string fmt = get_string(j, f, "format", "");
  if (!fmt.empty()) s.format = parse_format(fmt, f, "format", nullptr);
  else if (!c.mixed_precision) s.format = c.format;
  else if (s.weights) s.format = infer_format(s);
  if (s.weights && s.format == CtFormat::Dense && c.format != CtFormat::Dense) s.format = c.format;
  check_scheme(s, f);
  return s;
}

// compressed-tensors' _match_name: "re:" + Python re.match (anchored at the start only), else equality.
bool match_name(const std::string& name, const std::string& target) {
  if (target.rfind("re:", 0) == 0) {
    std::smatch m;
    return std::regex_search(name, m, std::regex(target.substr(3)), std::regex_constants::match_continuous);
  }
  return name == target;
}

bool matches(const std::string& module, const std::string& class_name, const std::string& target) {
  return match_name(module, target) || target == class_name;
}

}  // namespace

std::string_view ct_format_name(CtFormat f) {
  switch (f) {
    case CtFormat::Dense: return "dense";
    case CtFormat::PackQuantized: return "pack-quantized";
    case CtFormat::IntQuantized: return "int-quantized";
    case CtFormat::FloatQuantized: return "float-quantized";
    case CtFormat::NaiveQuantized: return "naive-quantized";
    case CtFormat::Nvfp4Pack: return "nvfp4-pack-quantized";
    case CtFormat::Mxfp4Pack: return "mxfp4-pack-quantized";
  }
  return "?";
}

CtConfig parse_ct_config(const std::string& json_text, const std::string& file) {
  json j = json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw FormatError(file, "quantization_config", "not a JSON object");
  const Fields f{file, "quantization_config"};
  const std::string method = get_string(j, f, "quant_method", "");
  if (method != "compressed-tensors")
    f.fail("quant_method", "unsupported quantization method '" + method +
                               "' (supported: compressed-tensors, as llm-compressor writes it)");
  f.only(j, {"quant_method", "format", "config_groups", "ignore", "kv_cache_scheme", "quantization_status",
             "global_compression_ratio", "sparsity_config", "transform_config", "version", "run_compressed"});
  CtConfig c;
  c.file = file;
  c.format = parse_format(get_string(j, f, "format", "dense"), f, "format", &c.mixed_precision);
  const std::string status = get_string(j, f, "quantization_status", "compressed");
  if (status != "compressed")
    f.fail("quantization_status", "'" + status + "': only compressed checkpoints hold quantized weights (\"compressed\")");
  if (const json* sp = field(j, "sparsity_config"); sp && !(sp->is_object() && sp->empty()))
    f.fail("sparsity_config", "sparse checkpoints are not supported (found " + sp->dump() + ")");
  if (const json* tr = field(j, "transform_config"); tr && !(tr->is_object() && (tr->empty() || (tr->contains("config_groups") && (*tr)["config_groups"].empty()))))
    f.fail("transform_config", "transforms (rotations) are not supported (found " + tr->dump() + ")");
  c.ignore = get_strings(j, f, "ignore");
  check_regexes(c.ignore, f, "ignore");
  const json* groups = field(j, "config_groups");
  if (!groups || !groups->is_object()) f.fail("config_groups", "missing or not an object");
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const Fields fg{file, "quantization_config.config_groups." + it.key()};
    if (it.value().is_array())
      fg.fail("", "a preset scheme name with a target list is not supported; give the scheme's fields");
    c.schemes.push_back(parse_scheme(it.key(), it.value(), fg, c));
  }
  if (const json* kv = field(j, "kv_cache_scheme")) {
    const Fields fk{file, "quantization_config.kv_cache_scheme"};
    c.kv_cache_scheme = parse_args(*kv, fk);
    if (c.kv_cache_scheme->num_bits != 8) fk.fail("num_bits", num(c.kv_cache_scheme->num_bits) + "-bit KV cache (supported: 8)");
    if (!c.kv_cache_scheme->symmetric) fk.fail("symmetric", "asymmetric KV cache quantization is not supported");
  }
  return c;
}

std::optional<CtConfig> read_ct_config(const std::string& dir) {
  const std::string file = dir + "/config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;  // read_hf_config reports it
  auto q = j.find("quantization_config");
  if (q == j.end() || q->is_null()) return std::nullopt;
  return parse_ct_config(q->dump(), file);
}

const CtScheme* ct_scheme_for(const CtConfig& c, const std::string& module, const std::string& class_name) {
  for (const std::string& ig : c.ignore)
    if (matches(module, class_name, ig)) return nullptr;
  // compressed-tensors: the target map keeps the last group naming a target; of the targets that match, exact
  // names (sorted) first, then regexes (sorted), then class names.
  std::map<std::string, const CtScheme*> by_target;
  for (const CtScheme& s : c.schemes)
    for (const std::string& t : s.targets) by_target[t] = &s;
  const CtScheme* best = nullptr;
  int best_rank = 3;
  for (const auto& [t, s] : by_target) {  // std::map: sorted, as Python's sorted() over the names
    int rank = 3;
    if (t.rfind("re:", 0) != 0 && t == module) rank = 0;
    else if (t.rfind("re:", 0) == 0 && match_name(module, t)) rank = 1;
    else if (t == class_name) rank = 2;
    if (rank < best_rank) {
      best_rank = rank;
      best = s;
    }
  }
  return best && best->weights ? best : nullptr;
}

}  // namespace tp
