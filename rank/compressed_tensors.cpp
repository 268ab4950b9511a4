// compressed-tensors: the config, the schemes, and one rank's slices (see compressed_tensors.h).
#include "rank/compressed_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "rank/hf_dir.h"

namespace tp {
namespace {

using json = nlohmann::json;

std::string num(int64_t v) { return std::to_string(v); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ------------------------------------------------------------------------------------------------ config
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
  for (const std::string& t : s.targets) {
    if (t.rfind("re:", 0) == 0) {
      try {
        std::regex re(t.substr(3));
      } catch (const std::regex_error& e) {
        f.fail("targets", "regular expression '" + t + "' does not compile: " + e.what());
      }
    }
  }
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

// ------------------------------------------------------------------------------------------------ tensors
// The module prefix of a canonical weight name: "blk.0.attn_q.weight" -> "blk.0.attn_q".
std::string prefix_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + num(s[k]);
  return r + "]";
}

std::string type_text(const TensorView& t) {
  return t.raw != RawType::None ? std::string(raw_type_name(t.raw)) : std::string(dtype_name(t.dtype));
}

// The tensor `name`, of one of the raw types `raw` (or, with floats = true, F32 / F16 / BF16) and shape
// `shape` (an empty expected shape with one element also accepts [1] and []).
const TensorView& need(const ModelFile& f, const std::string& name, std::initializer_list<RawType> raw, bool floats,
                       const std::vector<int64_t>& shape) {
  const TensorView* t = f.find(name);
  if (!t) throw FormatError(f.path(), canonical_to_hf_name(name), "missing tensor (needed by its quantization scheme)");
  bool ok = floats && t->raw == RawType::None && !is_quantized(t->dtype);
  for (RawType r : raw) ok = ok || t->raw == r;
  if (!ok) {
    std::string want = floats ? "F32, F16, BF16" : "";
    for (RawType r : raw) want += (want.empty() ? "" : ", ") + std::string(raw_type_name(r));
    throw FormatError(f.path(), canonical_to_hf_name(name), "dtype " + type_text(*t) + ", expected " + want);
  }
  const bool scalar_ok = shape.size() == 1 && shape[0] == 1 && t->n_elems() == 1 && t->shape.size() <= 1;
  if (t->shape != shape && !scalar_ok)
    throw FormatError(f.path(), canonical_to_hf_name(name), "shape " + shape_text(t->shape) + ", expected " + shape_text(shape));
  return *t;
}

// Element i of a float-valued tensor (F32 / F16 / BF16 / F8_E4M3).
float float_at(const TensorView& t, int64_t i) {
  if (t.raw == RawType::F8E4M3) return fp8_e4m3_to_f32(t.data[i]);
  float v = 0;
  dequantize_row(t.dtype, t.data + i * dtype_block_bytes(t.dtype), &v, 1);
  return v;
}

int64_t int_at(const TensorView& t, int64_t i) {
  switch (t.raw) {
    case RawType::I8: return int8_t(t.data[i]);
    case RawType::U8: return t.data[i];
    case RawType::I32: {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      return v;
    }
    case RawType::I64: {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      return v;
    }
    default: return 0;
  }
}

// A scale must be finite and not negative (zero: an all-zero group).
float checked_scale(const ModelFile& f, const TensorView& t, int64_t i) {
  const float v = float_at(t, i);
  if (!std::isfinite(v) || v < 0)
    throw FormatError(f.path(), canonical_to_hf_name(t.name),
                      "holds " + std::to_string(v) + " at element " + num(i) + ": every scale must be finite and >= 0");
  return v;
}

// One static scale ([1] or []): input_scale, weight_global_scale.
std::optional<float> scalar(const ModelFile& f, const std::string& name, bool required, bool positive) {
  if (!required && !f.find(name)) return std::nullopt;
  const TensorView& t = need(f, name, {}, true, {1});
  const float v = checked_scale(f, t, 0);
  if (positive && !(v > 0))
    throw FormatError(f.path(), canonical_to_hf_name(name), "holds " + std::to_string(v) + ": it must be > 0");
  return v;
}

// Valid tp degrees for a column cut aligned to `align` of n_in columns (shown when a cut is refused).
std::string valid_tp(int64_t n_in, int64_t align) {
  std::string s;
  for (int64_t tp = 1; tp <= 64; ++tp)
    if (n_in % tp == 0 && (n_in / tp) % align == 0) s += (s.empty() ? "" : ", ") + num(tp);
  return s.empty() ? "1" : s;
}

void check_cut(const ModelFile& f, const std::string& name, int64_t n_in, Range cols, int64_t align, const char* what) {
  if (align <= 1) return;
  const bool ok = cols.begin % align == 0 && (cols.end % align == 0 || cols.end == n_in);
  if (!ok)
    throw FormatError(f.path(), canonical_to_hf_name(name),
                      "column slice [" + num(cols.begin) + ", " + num(cols.end) + ") of " + num(n_in) +
                          " does not fall on the " + num(align) + "-column " + what +
                          ": this weight splits by input columns only at tp " + valid_tp(n_in, align));
}

// The activation quantization of a scheme, with the static scale of module prefix `p`.
void set_activations(const ModelFile& f, const CtScheme& s, const std::string& p, PackedWeight* w) {
  if (!s.input_activations) return;
  const CtQuantArgs& a = *s.input_activations;
  const bool fp8 = a.type == CtType::Float;
  if (a.dynamic == CtDynamic::Dynamic) {
    w->act = fp8 ? ActQuant::Fp8Dynamic : ActQuant::Int8Dynamic;
    w->act_group = a.strategy == CtStrategy::Group ? a.group_size : 0;
  } else {
    w->act = fp8 ? ActQuant::Fp8Static : ActQuant::Int8Static;
    w->act_scale = *scalar(f, p + ".input_scale", true, true);
  }
}

struct Geometry {
  int64_t n_out = 0, n_in = 0;
};

// --- int (pack-quantized 4/8-bit, int-quantized 8-bit) -----------------------------------------------------
struct IntModule {
  const TensorView* data = nullptr;   // I32 words (packed) or I8 values
  const TensorView* scale = nullptr;  // [n_out, n_groups] / [n_out, 1] / [1]
  const TensorView* zero = nullptr;   // packed I32 [ceil(n_out * bits / 32), n_groups] or I8 like scale
  const TensorView* g_idx = nullptr;  // I32 [n_in]
  int64_t n_groups = 1, group = 0;    // scale groups of a whole row; columns a group
  bool packed = false;
  bool dense = true;       // packed: value i at bit bits · i of the row (or column) bit stream; else per = 32 / bits
  bool zero_dense = true;  // the same for the row-packed zero points
  int bits = 8;
};

// Words of `n` packed values of `bits` bits: compressed-tensors' pack_to_int32 is dense (value i at bit
// bits · i of the stream, values split across words; ceil(n · bits / 32) words), older releases put
// per = 32 / bits values a word (3 bits: ten, the top 2 bits unused). The two agree for 1, 2, 4 and 8 bits.
int64_t dense_words(int64_t n, int bits) { return ceil_div(n * bits, 32); }
int64_t legacy_words(int64_t n, int bits) { return ceil_div(n, 32 / bits); }

// The packed I32 tensor `name` of shape {lead, words} (packed along its last dimension, n values) or, for
// zero points, {words, lead} (packed along rows): either layout, told apart by its word count (dense when both
// fit: the current writer's). *dense says which.
const TensorView& need_packed(const ModelFile& f, const std::string& name, int64_t lead, int64_t n, int bits,
                              bool along_rows, bool* dense) {
  const TensorView* t = f.find(name);
  const int64_t dw = dense_words(n, bits), lw = legacy_words(n, bits);
  auto shape = [&](int64_t words) {
    return along_rows ? std::vector<int64_t>{words, lead} : std::vector<int64_t>{lead, words};
  };
  *dense = !(t && dw != lw && t->shape == shape(lw));
  return need(f, name, {RawType::I32}, false, shape(*dense ? dw : lw));
}

// The stream bit where packed value i starts (dense, or per = 32 / bits values a word).
int64_t packed_bit(int64_t i, int bits, bool dense) {
  return dense ? i * bits : (i / (32 / bits)) * 32 + (i % (32 / bits)) * bits;
}

// Packed value i (unsigned, bits wide) of a stream of little-endian I32 words at `words` (n_words of them).
uint32_t packed_value(const uint8_t* words, int64_t n_words, int64_t i, int bits, bool dense) {
  const int64_t bit = packed_bit(i, bits, dense);
  uint64_t two = 0;
  std::memcpy(&two, words + (bit / 32) * 4, bit / 32 + 1 < n_words ? 8 : 4);
  return uint32_t(two >> (bit % 32)) & ((1u << bits) - 1);
}

IntModule int_module(const ModelFile& f, const CtScheme& s, const std::string& p, Geometry g) {
  const CtQuantArgs& w = *s.weights;
  IntModule m;
  m.bits = w.num_bits;
  m.packed = s.format == CtFormat::PackQuantized;
  if (m.packed) {
    m.data = &need_packed(f, p + ".weight_packed", g.n_out, g.n_in, w.num_bits, false, &m.dense);
    if (const TensorView* shp = f.find(p + ".weight_shape")) {
      need(f, p + ".weight_shape", {RawType::I32, RawType::I64}, false, {2});
      if (int_at(*shp, 0) != g.n_out || int_at(*shp, 1) != g.n_in)
        throw FormatError(f.path(), canonical_to_hf_name(p + ".weight_shape"),
                          "says [" + num(int_at(*shp, 0)) + ", " + num(int_at(*shp, 1)) + "], expected [" + num(g.n_out) +
                              ", " + num(g.n_in) + "]");
    }
  } else {
    m.data = &need(f, p + ".weight", {RawType::I8}, false, {g.n_out, g.n_in});
  }
  const bool per_row = w.strategy != CtStrategy::Tensor;
  m.n_groups = w.strategy == CtStrategy::Group ? ceil_div(g.n_in, w.group_size) : 1;
  m.group = w.strategy == CtStrategy::Group ? w.group_size : g.n_in;
  const std::vector<int64_t> sshape = per_row ? std::vector<int64_t>{g.n_out, m.n_groups} : std::vector<int64_t>{1};
  m.scale = &need(f, p + ".weight_scale", {}, true, sshape);
  if (!w.symmetric) {
    if (m.packed && per_row)
      m.zero = &need_packed(f, p + ".weight_zero_point", m.n_groups, g.n_out, w.num_bits, true, &m.zero_dense);
    else
      m.zero = &need(f, p + ".weight_zero_point", {RawType::I8}, false, sshape);
  }
  if (const TensorView* gi = f.find(p + ".weight_g_idx")) {
    need(f, p + ".weight_g_idx", {RawType::I32, RawType::I64}, false, {g.n_in});
    bool all_unset = true;  // compressed-tensors: -1 everywhere means column order
    for (int64_t c = 0; c < g.n_in && all_unset; ++c) all_unset = int_at(*gi, c) == -1;
    if (!all_unset) {
      if (w.strategy != CtStrategy::Group)
        throw FormatError(f.path(), canonical_to_hf_name(gi->name), "g_idx on weights without groups");
      for (int64_t c = 0; c < g.n_in; ++c) {
        const int64_t v = int_at(*gi, c);
        if (v < 0 || v >= m.n_groups)
          throw FormatError(f.path(), canonical_to_hf_name(gi->name),
                            "g_idx[" + num(c) + "] = " + num(v) + " is not a group in [0, " + num(m.n_groups) + ")");
      }
      m.g_idx = gi;
    }
  } else if (w.actorder == CtActOrder::Group) {
    throw FormatError(f.path(), canonical_to_hf_name(p + ".weight_g_idx"), "missing tensor (actorder group needs it)");
  }
  return m;
}

// q of element (r, c) in [-2^(bits-1), 2^(bits-1)). Packed: u = q + 2^(bits-1), value c of a row at bit
// bits · c of the row's little-endian I32 words (dense), or in word c / per at bit bits · (c % per) (older).
int q_at(const IntModule& m, int64_t n_in, int64_t r, int64_t c) {
  if (!m.packed) return int8_t(m.data->data[r * n_in + c]);
  const int64_t words = m.data->shape[1];
  const uint8_t* row = m.data->data + r * words * 4;
  if (m.bits == 8) return int(row[c]) - 128;
  if (m.bits == 4) return int((row[c / 2] >> (4 * (c % 2))) & 15) - 8;
  return int(packed_value(row, words, c, m.bits, m.dense)) - (1 << (m.bits - 1));
}

int zero_at(const IntModule& m, int64_t n_out, int64_t r, int64_t g) {
  if (!m.zero) return 0;
  if (m.zero->raw == RawType::I8) return int(int_at(*m.zero, m.zero->n_elems() == 1 ? 0 : r * m.n_groups + g));
  (void)n_out;
  // Packed along rows: column g of the [words, n_groups] words holds the stream of rows.
  const int64_t words = m.zero->shape[0];
  const int64_t bit = packed_bit(r, m.bits, m.zero_dense);
  uint64_t two = uint32_t(int_at(*m.zero, (bit / 32) * m.n_groups + g));
  if (bit / 32 + 1 < words) two |= uint64_t(uint32_t(int_at(*m.zero, (bit / 32 + 1) * m.n_groups + g))) << 32;
  return int(uint32_t(two >> (bit % 32)) & ((1u << m.bits) - 1)) - (1 << (m.bits - 1));
}

// --- loading -------------------------------------------------------------------------------------------------
struct PartInfo {
  std::string prefix;
  Geometry g;
  Range rows;
};

PackedWeight load_int(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  const CtQuantArgs& wa = *s.weights;
  PackedWeight w;
  w.format = wa.num_bits <= 4 ? WeightFormat::Int4 : WeightFormat::Int8;  // 3-bit values run as Int4
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  std::vector<IntModule> mods;
  for (const PartInfo& p : parts) mods.push_back(int_module(f, s, p.prefix, p.g));
  const bool act_order = mods[0].g_idx != nullptr;
  for (const IntModule& m : mods)
    if ((m.g_idx != nullptr) != act_order)
      throw FormatError(f.path(), canonical_to_hf_name(parts[0].prefix), "fused parts differ in having a g_idx");
  const int64_t n_in_total = parts[0].g.n_in;
  // The slice's scale groups: g_idx — the groups its columns use (per part: they may differ), renumbered;
  // else whole groups [cols.begin / group, ...).
  std::vector<std::vector<int64_t>> used(parts.size());  // part -> slice group -> the part's group
  if (act_order) {
    // One numbering for every part: the union of the groups used; each part's g_idx must agree on the slice
    // (fused parts of one act-order checkpoint share g_idx only when they share their input: check).
    std::vector<int32_t> gid(size_t(w.n_in));
    for (int64_t c = 0; c < w.n_in; ++c) gid[size_t(c)] = int32_t(int_at(*mods[0].g_idx, cols.begin + c));
    for (size_t i = 1; i < mods.size(); ++i)
      for (int64_t c = 0; c < w.n_in; ++c)
        if (int_at(*mods[i].g_idx, cols.begin + c) != gid[size_t(c)])
          throw FormatError(f.path(), canonical_to_hf_name(parts[i].prefix + ".weight_g_idx"),
                            "differs from " + canonical_to_hf_name(parts[0].prefix + ".weight_g_idx") +
                                " at column " + num(cols.begin + c) + ": fused parts must share g_idx");
    std::vector<int64_t> remap(size_t(mods[0].n_groups), -1);
    std::vector<int64_t> order;
    for (int32_t g : gid) remap[size_t(g)] = 0;
    for (int64_t g = 0; g < mods[0].n_groups; ++g)
      if (remap[size_t(g)] == 0) {
        remap[size_t(g)] = int64_t(order.size());
        order.push_back(g);
      }
    w.g_idx.resize(size_t(w.n_in));
    for (int64_t c = 0; c < w.n_in; ++c) w.g_idx[size_t(c)] = int32_t(remap[size_t(gid[size_t(c)])]);
    w.g_idx_groups = int64_t(order.size());
    w.group_size = wa.group_size;
    for (auto& u : used) u = order;
  } else {
    const int64_t group = wa.strategy == CtStrategy::Group ? mods[0].group : 1;  // channel / tensor: any cut
    check_cut(f, parts[0].prefix + ".weight", n_in_total, cols, group, "quantization groups");
    w.group_size = group == 1 ? w.n_in : std::min(group, w.n_in);
    const int64_t g0 = wa.strategy == CtStrategy::Group ? cols.begin / group : 0;
    const int64_t n = wa.strategy == CtStrategy::Group ? ceil_div(w.n_in, group) : 1;
    for (auto& u : used)
      for (int64_t g = 0; g < n; ++g) u.push_back(g0 + g);
  }
  const int64_t n_groups = int64_t(used[0].size());
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  w.scales.resize(size_t(w.n_out * n_groups));
  if (!wa.symmetric) w.zeros.resize(size_t(w.n_out * n_groups));
  int64_t r_out = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const IntModule& m = mods[i];
    const PartInfo& p = parts[i];
    const bool per_row = m.scale->n_elems() > 1 || wa.strategy != CtStrategy::Tensor;
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      uint8_t* dst = w.data.data() + r_out * w.row_bytes();
      if (w.format == WeightFormat::Int8) {
        for (int64_t c = 0; c < w.n_in; ++c) dst[c] = uint8_t(int8_t(q_at(m, p.g.n_in, r, cols.begin + c)));
      } else if (m.packed && m.bits == 4 && cols.begin % 2 == 0 && w.n_in % 2 == 0) {  // nibble pairs as stored
        std::memcpy(dst, m.data->data + r * ceil_div(p.g.n_in * 4, 32) * 4 + cols.begin / 2, size_t(w.n_in / 2));
      } else {
        for (int64_t c = 0; c < w.n_in; ++c) {
          const int q = q_at(m, p.g.n_in, r, cols.begin + c);
          if (q < -8 || q > 7)  // 4-bit values stored one a byte (int-quantized)
            throw FormatError(f.path(), canonical_to_hf_name(m.data->name),
                              "holds " + num(q) + " at [" + num(r) + ", " + num(cols.begin + c) + "]: not a 4-bit value");
          dst[c / 2] |= uint8_t((q + 8) << (4 * (c % 2)));
        }
      }
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t src_g = used[i][size_t(g)];
        w.scales[size_t(r_out * n_groups + g)] = checked_scale(f, *m.scale, per_row ? r * m.n_groups + src_g : 0);
        if (!wa.symmetric) {
          const int z = zero_at(m, p.g.n_out, per_row ? r : 0, per_row ? src_g : 0);
          if (z < -(1 << (m.bits - 1)) || z >= (1 << (m.bits - 1)))
            throw FormatError(f.path(), canonical_to_hf_name(m.zero->name), "zero point " + num(z) + " out of range");
          w.zeros[size_t(r_out * n_groups + g)] = int8_t(z);
        }
      }
    }
  }
  set_activations(f, s, parts[0].prefix, &w);
  return w;
}

PackedWeight load_fp8(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  const CtQuantArgs& wa = *s.weights;
  PackedWeight w;
  w.format = WeightFormat::Fp8E4M3;
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  const int64_t n_in_total = parts[0].g.n_in;
  int64_t bcols = 0, brows = 0;  // block / group scales
  if (wa.strategy == CtStrategy::Block) {
    brows = wa.block_rows;
    bcols = wa.block_cols;
  } else if (wa.strategy == CtStrategy::Group) {
    brows = 1;
    bcols = wa.group_size;
  }
  if (bcols > 0) check_cut(f, parts[0].prefix + ".weight", n_in_total, cols, bcols, "scale blocks");
  // Block rows stay blocks for one part whose slice starts on a block; otherwise each row gets its own copy
  // of its block's scales (block_out = 1).
  const bool keep_blocks = bcols > 0 && parts.size() == 1 && parts[0].rows.begin % brows == 0;
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  const int64_t n_cb = bcols > 0 ? ceil_div(w.n_in, bcols) : 0;
  if (bcols > 0) {
    w.group_size = bcols;
    w.block_out = keep_blocks ? brows : 1;
  }
  int64_t r_out = 0;
  for (const PartInfo& p : parts) {
    const TensorView& t = need(f, p.prefix + ".weight", {RawType::F8E4M3}, false, {p.g.n_out, p.g.n_in});
    std::vector<int64_t> sshape{1};
    if (wa.strategy == CtStrategy::Channel) sshape = {p.g.n_out, 1};
    if (bcols > 0) sshape = {ceil_div(p.g.n_out, brows), ceil_div(p.g.n_in, bcols)};
    const TensorView& sc = need(f, p.prefix + ".weight_scale", {}, true, sshape);
    const int64_t cb0 = bcols > 0 ? cols.begin / bcols : 0;
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      const uint8_t* src = t.data + r * p.g.n_in + cols.begin;
      for (int64_t c = 0; c < w.n_in; ++c)
        if ((src[c] & 0x7f) == 0x7f)  // S.1111.111: E4M3's NaN
          throw FormatError(f.path(), canonical_to_hf_name(t.name),
                            "holds NaN at [" + num(r) + ", " + num(cols.begin + c) + "]: every weight must be finite");
      std::memcpy(w.data.data() + r_out * w.n_in, src, size_t(w.n_in));
      if (bcols == 0) {
        w.scales.push_back(checked_scale(f, sc, sc.n_elems() == 1 ? 0 : r));
      } else if (!keep_blocks || (r - p.rows.begin) % brows == 0) {
        for (int64_t cb = 0; cb < n_cb; ++cb) w.scales.push_back(checked_scale(f, sc, (r / brows) * sshape[1] + cb0 + cb));
      }
    }
  }
  set_activations(f, s, parts[0].prefix, &w);
  return w;
}

PackedWeight load_fp4(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  PackedWeight w;
  const bool nv = s.format == CtFormat::Nvfp4Pack;
  w.format = nv ? WeightFormat::Nvfp4 : WeightFormat::Mxfp4;
  const int64_t blk = nv ? 16 : 32;
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  check_cut(f, parts[0].prefix + ".weight", parts[0].g.n_in, cols, blk, "scale blocks");
  if (w.n_in % blk != 0)
    throw FormatError(f.path(), canonical_to_hf_name(parts[0].prefix + ".weight_packed"),
                      "a slice of " + num(w.n_in) + " columns is not whole " + num(blk) + "-column blocks");
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  if (nv) w.global_scale = 1.0f / *scalar(f, parts[0].prefix + ".weight_global_scale", true, true);
  int64_t r_out = 0;
  for (const PartInfo& p : parts) {
    if (p.g.n_in % blk != 0)
      throw FormatError(f.path(), canonical_to_hf_name(p.prefix + ".weight_packed"),
                        "n_in " + num(p.g.n_in) + " is not a multiple of the " + num(blk) + "-column block");
    const TensorView& t = need(f, p.prefix + ".weight_packed", {RawType::U8}, false, {p.g.n_out, p.g.n_in / 2});
    const TensorView& sc = need(f, p.prefix + ".weight_scale", {nv ? RawType::F8E4M3 : RawType::U8}, false,
                                {p.g.n_out, p.g.n_in / blk});
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      std::memcpy(w.data.data() + r_out * w.row_bytes(), t.data + r * (p.g.n_in / 2) + cols.begin / 2, size_t(w.n_in / 2));
      for (int64_t b = 0; b < w.n_in / blk; ++b) {
        const uint8_t v = sc.data[r * (p.g.n_in / blk) + cols.begin / blk + b];
        const float fv = nv ? fp8_e4m3_to_f32(v) : e8m0_to_f32(v);
        if (!std::isfinite(fv) || fv < 0)
          throw FormatError(f.path(), canonical_to_hf_name(sc.name), "block scale " + std::to_string(fv) + " at row " + num(r));
        w.scale_bytes.push_back(v);
      }
    }
  }
  return w;
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

std::string ct_module_name(const std::string& canonical_weight) {
  return prefix_of(canonical_to_hf_name(canonical_weight));
}

const CtScheme* ct_quantized_scheme(const ModelFile& f, const CtConfig& c, const std::string& name) {
  const std::string module = ct_module_name(name);
  const CtScheme* s = ct_scheme_for(c, module, module == "model.embed_tokens" ? "Embedding" : "Linear");
  if (!s) return nullptr;
  return f.find(prefix_of(name) + ".weight_scale") ? s : nullptr;
}

bool ct_can_stack(const ModelFile& f, const std::string& a, const std::string& b) {
  // Act-order parts share one weight only with the same g_idx (GPTQ gives q|k|v the same one: one input).
  const TensorView* ga = f.find(prefix_of(a) + ".weight_g_idx");
  const TensorView* gb = f.find(prefix_of(b) + ".weight_g_idx");
  if ((ga != nullptr) != (gb != nullptr)) return false;
  if (ga && (ga->n_bytes != gb->n_bytes || ga->raw != gb->raw || std::memcmp(ga->data, gb->data, size_t(ga->n_bytes)) != 0))
    return false;
  for (const char* t : {".input_scale", ".weight_global_scale"}) {
    const TensorView* ta = f.find(prefix_of(a) + t);
    const TensorView* tb = f.find(prefix_of(b) + t);
    if (!ta && !tb) continue;
    if (!ta || !tb || ta->n_elems() != 1 || tb->n_elems() != 1 || float_at(*ta, 0) != float_at(*tb, 0)) return false;
  }
  return true;
}

PackedWeight ct_load_slice(const ModelFile& f, const CtScheme& s, int64_t n_in, Range cols,
                           const std::vector<RowSlice>& parts) {
  if (parts.empty()) throw Error("ct_load_slice: no parts");
  if (cols.begin < 0 || cols.end > n_in || cols.begin >= cols.end)
    throw Error("ct_load_slice: column range [" + num(cols.begin) + ", " + num(cols.end) + ") of " + num(n_in));
  std::vector<PartInfo> info;
  for (const RowSlice& p : parts) info.push_back({prefix_of(p.name), {p.total_rows, n_in}, p.rows});
  PackedWeight w;
  switch (s.format) {
    case CtFormat::PackQuantized:
    case CtFormat::IntQuantized: w = load_int(f, s, cols, info); break;
    case CtFormat::FloatQuantized:
    case CtFormat::NaiveQuantized:
      w = s.weights->type == CtType::Float ? load_fp8(f, s, cols, info) : load_int(f, s, cols, info);
      break;
    case CtFormat::Nvfp4Pack:
    case CtFormat::Mxfp4Pack: w = load_fp4(f, s, cols, info); break;
    case CtFormat::Dense: throw Error("ct_load_slice: scheme " + s.name + " is dense");
  }
  try {
    check_packed_weight(w);
  } catch (const Error& e) {
    throw FormatError(f.path(), canonical_to_hf_name(parts[0].name), e.what());
  }
  return w;
}

std::optional<KvScales> kv_cache_scales(const ModelFile& f, int64_t layer) {
  const std::string b = "blk." + num(layer) + ".";
  for (const auto& [k, v] : {std::pair<std::string, std::string>{b + "attn_k_scale", b + "attn_v_scale"},
                             {b + "attn_k.output_scale", b + "attn_v.output_scale"}}) {
    if (!f.find(k) && !f.find(v)) continue;
    KvScales s;
    s.k_scale = *scalar(f, k, true, true);
    s.v_scale = *scalar(f, v, true, true);
    return s;
  }
  return std::nullopt;
}

std::optional<std::pair<std::vector<float>, std::vector<float>>> kv_cache_scales_all(const ModelFile& f,
                                                                                     int64_t n_layers) {
  std::vector<float> k, v;
  int64_t first_with = -1, first_without = -1;
  for (int64_t i = 0; i < n_layers; ++i) {
    if (const auto s = kv_cache_scales(f, i)) {
      if (first_with < 0) first_with = i;
      k.push_back(s->k_scale);
      v.push_back(s->v_scale);
    } else if (first_without < 0) {
      first_without = i;
    }
  }
  if (first_with < 0) return std::nullopt;
  if (first_without >= 0)
    throw FormatError(f.path(), "model.layers." + num(first_without) + ".self_attn.k_scale",
                      "KV cache scales are given for layer " + num(first_with) + " but not for layer " +
                          num(first_without) + " (every layer needs its k_scale and v_scale)");
  return std::make_pair(std::move(k), std::move(v));
}

}  // namespace tp
