#include "rank/hf_dir.h"

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "rank/ct_config.h"

namespace tp {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct NamePair {
  const char* hf;
  const char* canon;
};
// Modules of a layer, after "model.layers.N." / "blk.N."; any parameter of theirs keeps its name
// ("self_attn.q_proj.weight_scale" <-> "attn_q.weight_scale").
constexpr NamePair kLayerModules[] = {
    {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},     {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"}, {"mlp.gate_proj", "ffn_gate"},  {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},    {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"},
};
// Whole names within a layer: the KV cache scales of a compressed-tensors checkpoint.
constexpr NamePair kLayerNames[] = {
    {"self_attn.q_scale", "attn_q_scale"}, {"self_attn.k_scale", "attn_k_scale"}, {"self_attn.v_scale", "attn_v_scale"},
};
constexpr NamePair kGlobalModules[] = {
    {"model.embed_tokens", "token_embd"},
    {"model.norm", "output_norm"},
    {"lm_head", "output"},
};

// "module.param" with param one identifier -> (module, param); false when there is no '.'.
bool split_param(const std::string& s, std::string* module, std::string* param) {
  const size_t dot = s.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size()) return false;
  *module = s.substr(0, dot);
  *param = s.substr(dot + 1);
  return true;
}

std::string map_name(const std::string& name, bool to_canon) {
  std::string module, param;
  if (split_param(name, &module, &param))
    for (const auto& p : kGlobalModules)
      if (module == (to_canon ? p.hf : p.canon)) return (to_canon ? p.canon : p.hf) + std::string(".") + param;
  const std::string prefix = to_canon ? "model.layers." : "blk.";
  if (name.rfind(prefix, 0) != 0) return name;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j >= name.size() || name[j] != '.') return name;
  const std::string layer = name.substr(i, j - i), rest = name.substr(j + 1);
  const std::string out_prefix = (to_canon ? "blk." : "model.layers.") + layer + ".";
  for (const auto& p : kLayerNames)
    if (rest == (to_canon ? p.hf : p.canon)) return out_prefix + (to_canon ? p.canon : p.hf);
  if (split_param(rest, &module, &param))
    for (const auto& p : kLayerModules)
      if (module == (to_canon ? p.hf : p.canon)) return out_prefix + (to_canon ? p.canon : p.hf) + "." + param;
  return name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) {
  json j = json::parse(read_text(path), nullptr, false);
  if (j.is_discarded()) throw FormatError(path, "(root)", "invalid JSON");
  if (!j.is_object()) throw FormatError(path, "(root)", "not a JSON object");
  return j;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
  out << text;
  if (!out.flush()) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
}

int64_t get_int(const json& j, const std::string& file, const std::string& key, std::optional<int64_t> fallback = {}) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw FormatError(file, key, "missing key");
  }
  if (!it->is_number_integer()) throw FormatError(file, key, "expected an integer, found " + std::string(it->type_name()));
  return it->get<int64_t>();
}
int64_t get_positive(const json& j, const std::string& file, const std::string& key, std::optional<int64_t> fallback = {}) {
  int64_t v = get_int(j, file, key, fallback);
  if (v <= 0 || v > (int64_t(1) << 40)) throw FormatError(file, key, "value " + std::to_string(v) + " out of range");
  return v;
}
double get_number(const json& j, const std::string& file, const std::string& key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw FormatError(file, key, "expected a number, found " + std::string(it->type_name()));
  return it->get<double>();
}
bool get_bool(const json& j, const std::string& file, const std::string& key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw FormatError(file, key, "expected a bool, found " + std::string(it->type_name()));
  return it->get<bool>();
}

// "<tok>" or {"content": "<tok>", ...}; empty when absent or null.
std::string special_token_text(const json& j, const std::string& file, const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw FormatError(file, key, "expected a string or {\"content\": string}");
}

// j[key] when j is an object holding a string there, else "" (json::value would throw a type_error for a key of
// another type: found by tests/fuzz/hf_config_fuzz.cpp).
std::string string_at(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string pre_from_json(const json& p) {
  auto is_type = [](const json& x, const char* t) { return string_at(x, "type") == t; };
  if (is_type(p, "ByteLevel")) return "gpt2";
  if (is_type(p, "Sequence") && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    const json& s = p["pretokenizers"];
    auto digits_one_by_one = [](const json& d) {
      auto it = d.find("individual_digits");
      return it != d.end() && it->is_boolean() && it->get<bool>();
    };
    if (s.size() == 2 && is_type(s[0], "Digits") && digits_one_by_one(s[0]) && is_type(s[1], "ByteLevel"))
      return "smollm";
  }
  return "default";
}

ojson pre_to_json(const std::string& pre) {
  ojson byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  if (pre == "gpt2") return byte_level;
  if (pre == "smollm")
    return {{"type", "Sequence"},
            {"pretokenizers", ojson::array({ojson{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  return nullptr;
}

}  // namespace

std::string hf_to_canonical_name(const std::string& hf_name) { return map_name(hf_name, true); }
std::string canonical_to_hf_name(const std::string& name) { return map_name(name, false); }

ModelConfig read_hf_config(const std::string& dir) {
  const std::string file = dir + "/config.json";
  json j = read_json(file);
  auto archs = j.find("architectures");
  bool llama = false;
  std::string first = "(none)";
  if (archs != j.end() && archs->is_array()) {
    for (const auto& a : *archs) {
      if (!a.is_string()) continue;
      if (first == "(none)") first = a.get<std::string>();
      if (a.get<std::string>() == "LlamaForCausalLM") llama = true;
    }
  }
  if (!llama) throw FormatError(file, "architectures", "unsupported architecture '" + first + "' (need LlamaForCausalLM)");
  ModelConfig c;
  c.architecture = "llama";
  c.name = fs::path(dir).lexically_normal().filename().string();
  if (c.name.empty()) c.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  c.n_layers = get_positive(j, file, "num_hidden_layers");
  c.hidden = get_positive(j, file, "hidden_size");
  c.n_heads = get_positive(j, file, "num_attention_heads");
  c.n_kv_heads = get_positive(j, file, "num_key_value_heads", c.n_heads);
  c.intermediate = get_positive(j, file, "intermediate_size");
  c.vocab = get_positive(j, file, "vocab_size");
  c.max_context = get_positive(j, file, "max_position_embeddings", 2048);
  c.head_dim = get_positive(j, file, "head_dim", std::max<int64_t>(c.hidden / c.n_heads, 0));
  c.rms_eps = float(get_number(j, file, "rms_norm_eps", 1e-6));
  c.rope_theta = float(get_number(j, file, "rope_theta", 10000.0));
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object() && !j.contains("rope_theta")) {
    // transformers >= 5 keeps rope_theta under rope_parameters; only the default rope is supported.
    if (rp->contains("rope_type") && !(*rp)["rope_type"].is_string())
      throw FormatError(file, "rope_parameters.rope_type", "expected a string, found " + (*rp)["rope_type"].dump());
    const std::string type = rp->contains("rope_type") ? (*rp)["rope_type"].get<std::string>() : "default";
    if (type != "default") throw FormatError(file, "rope_parameters.rope_type", "unsupported rope type '" + type + "' (need default)");
    c.rope_theta = float(get_number(*rp, file, "rope_theta", 10000.0));
  }
  c.tied_embeddings = get_bool(j, file, "tie_word_embeddings", false);
  c.rope_style = RopeStyle::Neox;
  if (c.n_heads % c.n_kv_heads != 0)
    throw FormatError(file, "num_key_value_heads",
                      std::to_string(c.n_kv_heads) + " does not divide num_attention_heads " + std::to_string(c.n_heads));
  return c;
}

TokenizerData read_hf_tokenizer(const std::string& dir) {
  TokenizerData t;
  const std::string file = dir + "/tokenizer.json";
  if (!fs::exists(file)) return t;
  json j = read_json(file);
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) throw FormatError(file, "model", "missing or not an object");
  if (model->contains("type") && (*model)["type"] != "BPE")
    throw FormatError(file, "model.type", "unsupported tokenizer model " + (*model)["type"].dump() + " (need BPE)");
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) throw FormatError(file, "model.vocab", "missing or not an object");
  json added = j.value("added_tokens", json::array());
  if (!added.is_array()) throw FormatError(file, "added_tokens", "not an array");
  const int64_t limit = int64_t(vocab->size() + added.size());

  std::vector<bool> have;
  auto place = [&](int64_t id, const std::string& text, TokenType type, const std::string& field) {
    if (id < 0 || id >= limit)
      throw FormatError(file, field, "token id " + std::to_string(id) + " out of range [0, " + std::to_string(limit) + ")");
    if (id >= int64_t(t.tokens.size())) {
      t.tokens.resize(size_t(id + 1));
      t.token_types.resize(size_t(id + 1), TokenType::Normal);
      have.resize(size_t(id + 1), false);
    }
    t.tokens[size_t(id)] = text;
    t.token_types[size_t(id)] = type;
    have[size_t(id)] = true;
  };
  std::unordered_map<std::string, int32_t> by_text;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) throw FormatError(file, "model.vocab." + it.key(), "id is not an integer");
    int64_t id = it.value().get<int64_t>();
    if (id >= 0 && id < int64_t(have.size()) && have[size_t(id)])
      throw FormatError(file, "model.vocab." + it.key(), "token id " + std::to_string(id) + " used twice");
    place(id, it.key(), TokenType::Normal, "model.vocab." + it.key());
    by_text[it.key()] = int32_t(id);
  }
  for (size_t k = 0; k < added.size(); ++k) {
    const json& a = added[k];
    const std::string field = "added_tokens[" + std::to_string(k) + "]";
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string())
      throw FormatError(file, field, "expected {\"id\": int, \"content\": string, ...}");
    bool special = get_bool(a, file, "special", false);
    std::string text = a["content"].get<std::string>();
    place(a["id"].get<int64_t>(), text, special ? TokenType::Control : TokenType::UserDefined, field + ".id");
    by_text[text] = int32_t(a["id"].get<int64_t>());
  }
  for (size_t id = 0; id < have.size(); ++id)
    if (!have[id]) throw FormatError(file, "model.vocab", "token id " + std::to_string(id) + " not in vocab nor added_tokens");

  if (auto m = model->find("merges"); m != model->end() && !m->is_null()) {
    if (!m->is_array()) throw FormatError(file, "model.merges", "not an array");
    t.merges.reserve(m->size());
    for (size_t k = 0; k < m->size(); ++k) {
      const json& e = (*m)[k];
      if (e.is_string()) {
        t.merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        t.merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
      } else {
        throw FormatError(file, "model.merges[" + std::to_string(k) + "]", "expected \"a b\" or [\"a\", \"b\"]");
      }
    }
  }
  t.model = "gpt2";
  t.pre = j.contains("pre_tokenizer") ? pre_from_json(j["pre_tokenizer"]) : "default";

  auto lookup = [&](const std::string& f, const std::string& key, const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    auto it = by_text.find(text);
    if (it == by_text.end()) throw FormatError(f, key, "token '" + text + "' is not in the vocabulary");
    return it->second;
  };
  const std::string tc_file = dir + "/tokenizer_config.json";
  json tc = fs::exists(tc_file) ? read_json(tc_file) : json::object();
  t.bos_id = lookup(tc_file, "bos_token", special_token_text(tc, tc_file, "bos_token"));
  t.eos_id = lookup(tc_file, "eos_token", special_token_text(tc, tc_file, "eos_token"));
  t.unk_id = lookup(tc_file, "unk_token", special_token_text(tc, tc_file, "unk_token"));
  t.pad_id = lookup(tc_file, "pad_token", special_token_text(tc, tc_file, "pad_token"));
  t.add_bos = get_bool(tc, tc_file, "add_bos_token", false);
  t.add_eos = get_bool(tc, tc_file, "add_eos_token", false);
  if (auto ct = tc.find("chat_template"); ct != tc.end() && !ct->is_null()) {
    if (ct->is_string()) {
      t.chat_template = ct->get<std::string>();
    } else if (ct->is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const auto& e : *ct)
        if (string_at(e, "name") == "default" && e.contains("template") && e["template"].is_string())
          t.chat_template = e["template"].get<std::string>();
    } else {
      throw FormatError(tc_file, "chat_template", "expected a string or a list of {name, template}");
    }
  } else if (fs::exists(dir + "/chat_template.jinja")) {
    t.chat_template = read_text(dir + "/chat_template.jinja");
  }
  // Fall back to config.json ids for bos/eos/pad.
  const std::string cfg_file = dir + "/config.json";
  if ((t.bos_id < 0 || t.eos_id < 0 || t.pad_id < 0) && fs::exists(cfg_file)) {
    json cfg = read_json(cfg_file);
    const int64_t n = int64_t(t.tokens.size());
    auto id_from = [&](const char* key, int32_t& dst) {
      if (dst >= 0 || !cfg.contains(key)) return;
      json v = cfg[key];
      if (v.is_array() && !v.empty()) v = v[0];
      if (v.is_null()) return;
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n)
        throw FormatError(cfg_file, key, "not a token id in [0, " + std::to_string(n) + ")");
      dst = int32_t(v.get<int64_t>());
    };
    id_from("bos_token_id", t.bos_id);
    id_from("eos_token_id", t.eos_id);
    id_from("pad_token_id", t.pad_id);
  }
  return t;
}

HfDir::HfDir(const std::string& dir) : path_(dir) {
  config_ = read_hf_config(dir);
  if (auto q = read_ct_config(dir)) quant_ = std::make_shared<const CtConfig>(std::move(*q));
  has_tokenizer_ = fs::exists(dir + "/tokenizer.json");
  tokenizer_ = read_hf_tokenizer(dir);
  const std::string index_file = dir + "/model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> wanted;  // (hf name, shard) when sharded
  if (fs::exists(index_file)) {
    auto wm = read_safetensors_index(index_file);
    std::unordered_map<std::string, size_t> shard_of;
    for (const auto& [name, shard] : wm) {
      if (!shard_of.count(shard)) {
        shard_of[shard] = shards_.size();
        shards_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + shard));
      }
      const SafetensorsFile& sf = *shards_[shard_of[shard]];
      const SafetensorsTensor* st = sf.find(name);
      if (!st) throw FormatError(sf.path(), name, "tensor listed in model.safetensors.index.json is missing");
      views_.push_back({hf_to_canonical_name(name), st->dtype, st->shape, st->data, st->n_bytes, st->raw});
    }
  } else {
    const std::string single = dir + "/model.safetensors";
    if (!fs::exists(single))
      throw InputError("cannot open model '" + dir + "': no model.safetensors or model.safetensors.index.json");
    shards_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& st : shards_.back()->tensors())
      views_.push_back({hf_to_canonical_name(st.name), st.dtype, st.shape, st.data, st.n_bytes, st.raw});
  }
  std::unordered_map<std::string, int> seen;
  for (const auto& v : views_)
    if (seen[v.name]++) throw FormatError(dir, v.name, "tensor appears twice");
  // A quantized lm_head keeps its values in output.weight_packed (compressed-tensors pack formats).
  if (!seen.count("output.weight") && !seen.count("output.weight_packed")) config_.tied_embeddings = true;
}

const TokenizerData& HfDir::tokenizer() const {
  if (!has_tokenizer_)
    throw InputError(path_ + ": no tokenizer.json: the model directory needs the tokenizer.json of its model "
                             "(from the repository it came from) to encode and decode text");
  return tokenizer_;
}

void write_hf_config(const std::string& dir, const ModelConfig& c, const TokenizerData& tok, const std::string& torch_dtype) {
  ojson j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.intermediate;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.max_context;
  j["rms_norm_eps"] = double(c.rms_eps);
  j["rope_theta"] = double(c.rope_theta);
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = torch_dtype;
  j["bos_token_id"] = tok.bos_id >= 0 ? ojson(tok.bos_id) : ojson(nullptr);
  j["eos_token_id"] = tok.eos_id >= 0 ? ojson(tok.eos_id) : ojson(nullptr);
  if (tok.pad_id >= 0) j["pad_token_id"] = tok.pad_id;
  write_text(dir + "/config.json", j.dump(2) + "\n");
}

void write_hf_tokenizer(const std::string& dir, const TokenizerData& tok) {
  if (tok.token_types.size() != tok.tokens.size())
    throw FormatError(dir, "tokenizer", "token_types and tokens differ in length");
  ojson vocab = ojson::object();
  std::unordered_map<std::string, size_t> seen;
  ojson added = ojson::array();
  for (size_t id = 0; id < tok.tokens.size(); ++id) {
    if (!seen.emplace(tok.tokens[id], id).second)
      throw FormatError(dir, "tokenizer.json",
                        "token " + std::to_string(id) + " has the same text as token " + std::to_string(seen[tok.tokens[id]]) +
                            "; an HF vocab cannot hold both");
    vocab[tok.tokens[id]] = id;
    TokenType ty = tok.token_types[id];
    if (ty == TokenType::Control || ty == TokenType::UserDefined)
      added.push_back({{"id", id}, {"content", tok.tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", ty != TokenType::Control}, {"special", ty == TokenType::Control}});
  }
  ojson byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_to_json(tok.pre);
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", tok.merges}};
  write_text(dir + "/tokenizer.json", j.dump(1) + "\n");

  ojson tc;
  tc["tokenizer_class"] = "GPT2Tokenizer";
  auto text = [&](int32_t id) { return id >= 0 && size_t(id) < tok.tokens.size() ? ojson(tok.tokens[size_t(id)]) : ojson(nullptr); };
  tc["bos_token"] = text(tok.bos_id);
  tc["eos_token"] = text(tok.eos_id);
  tc["unk_token"] = text(tok.unk_id);
  tc["pad_token"] = text(tok.pad_id);
  tc["add_bos_token"] = tok.add_bos;
  tc["add_eos_token"] = tok.add_eos;
  tc["clean_up_tokenization_spaces"] = false;
  if (!tok.chat_template.empty()) tc["chat_template"] = tok.chat_template;
  write_text(dir + "/tokenizer_config.json", tc.dump(2) + "\n");
}

}  // namespace tp
