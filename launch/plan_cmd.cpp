// `tpserve plan`: will a model fit, and how many sequences can it serve? Weight bytes per rank, KV bytes per
// token (whole model and per rank, KV-head replication counted), the KV budget per rank, concurrency under a
// static max-context reservation vs paged allocation at a mean length, and the smallest tp that fits.
// All arithmetic is kvstore/capacity (shared with the engine's start-up report); this file reads the model
// (a GGUF file / HF directory header, or a YAML card in configs/models/), checks the tp with parallel's
// tp_layout, and prints a table or JSON.
//
// A card (configs/models/NAME.yaml) holds: name, layers, hidden, heads, kv_heads, head_dim (default
// hidden / heads), intermediate, vocab, max_context, tied_embeddings, params, and optionally active_params,
// experts, experts_per_token, expert_params, sliding_layers, sliding_window. Cards are looked up in
// --cards DIR, else ./configs/models, else configs/models in a folder above the tpserve binary.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <cstring>

#include "common/error.h"
#include "common/packed_weight.h"
#include "kvstore/capacity.h"
#include "launch/cli_args.h"
#include "launch/commands.h"
#include "launch/model_card.h"
#include "parallel/tp_layout.h"
#include "rank/ct_config.h"
#include "rank/model_file.h"

namespace tp {
namespace {

namespace fs = std::filesystem;

// The default room left on a GPU for everything but weights and KV: the CUDA context (~0.5 GiB), activations
// and GEMM workspace of a 2k–8k token prefill step, NCCL buffers and allocator slack.
constexpr const char* kDefaultReserve = "3GiB";
constexpr int64_t kDefaultBlockSize = 16;   // tokens per KV block, as configs/default.yaml
constexpr int64_t kDefaultMeanLen = 8192;   // mean sequence length for paged allocation (capped at the context)
constexpr int64_t kReportContexts[] = {2048, 8192, 32768, 131072};

}  // namespace

// ---- model cards (launch/model_card.h) ----

namespace {

std::optional<fs::path> cards_dir(const std::optional<std::string>& given) {
  if (given) return fs::path(*given);
  std::error_code ec;
  if (fs::is_directory("configs/models", ec)) return fs::absolute("configs/models", ec);
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return std::nullopt;
  for (; !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (std::error_code e; fs::is_directory(dir / "configs" / "models", e)) return dir / "configs" / "models";
  return std::nullopt;
}

std::vector<std::string> card_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

ModelShape load_card(const fs::path& path) {
  const std::string file = path.string();
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw InputError("cannot read model card '" + file + "'");
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, "<yaml>", "not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (!root.IsMap()) throw ConfigError(file, "<root>", "expected a mapping of keys");
  static const char* kKeys[] = {"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                "vocab", "max_context", "tied_embeddings", "params", "active_params", "experts",
                                "experts_per_token", "expert_params", "sliding_layers", "sliding_window"};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (std::none_of(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; })) {
      std::string valid;
      for (const char* k : kKeys) valid += (valid.empty() ? "" : ", ") + std::string(k);
      throw ConfigError(file, key, "unknown key (valid: " + valid + ")");
    }
  }
  auto integer = [&](const char* key, std::optional<int64_t> fallback, int64_t lo) -> int64_t {
    const YAML::Node n = root[key];
    if (!n) {
      if (!fallback) throw ConfigError(file, key, "missing");
      return *fallback;
    }
    int64_t v = 0;
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      throw ConfigError(file, key, "expected an integer, got '" + (n.IsScalar() ? n.Scalar() : "?") + "'");
    }
    if (v < lo) throw ConfigError(file, key, std::to_string(v) + " must be >= " + std::to_string(lo));
    return v;
  };
  ModelShape s;
  s.name = root["name"] ? root["name"].as<std::string>() : path.stem().string();
  s.n_layers = integer("layers", std::nullopt, 1);
  s.hidden = integer("hidden", std::nullopt, 1);
  s.n_heads = integer("heads", std::nullopt, 1);
  s.n_kv_heads = integer("kv_heads", std::nullopt, 1);
  s.head_dim = integer("head_dim", s.hidden / s.n_heads, 1);
  s.intermediate = integer("intermediate", std::nullopt, 1);
  s.vocab = integer("vocab", std::nullopt, 1);
  s.max_context = integer("max_context", 0, 0);
  try {
    s.tied_embeddings = root["tied_embeddings"] ? root["tied_embeddings"].as<bool>() : false;
  } catch (const YAML::Exception&) {
    throw ConfigError(file, "tied_embeddings", "expected true or false");
  }
  s.n_params = integer("params", std::nullopt, 1);
  s.n_active_params = integer("active_params", s.n_params, 1);
  s.n_experts = integer("experts", 0, 0);
  s.n_experts_per_token = integer("experts_per_token", 0, 0);
  s.n_expert_params = integer("expert_params", 0, 0);
  s.n_sliding_layers = integer("sliding_layers", 0, 0);
  s.sliding_window = integer("sliding_window", 0, 0);
  if (s.n_heads % s.n_kv_heads != 0)
    throw ConfigError(file, "kv_heads", std::to_string(s.n_kv_heads) + " does not divide heads " + std::to_string(s.n_heads));
  if (s.n_active_params > s.n_params) throw ConfigError(file, "active_params", "exceeds params");
  if (s.n_expert_params >= s.n_params) throw ConfigError(file, "expert_params", "must be below params");
  if ((s.n_experts > 0) != (s.n_expert_params > 0) || s.n_experts_per_token > s.n_experts)
    throw ConfigError(file, "experts", "experts, experts_per_token and expert_params go together (0 < per token <= experts)");
  if (s.n_sliding_layers > s.n_layers) throw ConfigError(file, "sliding_layers", "exceeds layers");
  if (s.n_sliding_layers > 0 && s.sliding_window == 0)
    throw ConfigError(file, "sliding_window", "needed (> 0) when sliding_layers > 0");
  return s;
}

// A model file's parameters and stored bytes: every "*.weight" tensor's elements (GGUF blocks count their values;
// compressed-tensors' FP8 / int8 weights are one a value) and every "*.weight_packed" tensor's logical [n_out, n_in]
// from its "*.weight_shape" (int4 / int8 codes packed into int32), or two a byte (FP4 codes, no shape); scales, zero
// points, g_idx, shapes and KV scales are no parameters, though their bytes are stored. The format: compressed-tensors'
// (config.json), else the dtypes of the 2-D weights ("q4_1 + q8_0", "bf16"). A GGUF linear weight of a type no kernel
// keeps counts the bytes of the type it is held in ("iq4_xs as iq4_nl": common/packed_weight.h gguf_held_dtype); the
// token table is read from the file as it is stored.
void file_weights(const ModelFile& m, ModelShape& s) {
  std::map<std::string, const TensorView*> by_name;
  for (const TensorView& t : m.tensors()) by_name[t.name] = &t;
  auto ends_with = [](const std::string& a, const std::string& b) {
    return a.size() >= b.size() && a.compare(a.size() - b.size(), b.size(), b) == 0;
  };
  std::set<std::string> dtypes;
  for (const TensorView& t : m.tensors()) {
    const bool linear = ends_with(t.name, ".weight") && t.shape.size() == 2 && t.raw == RawType::None;
    const DType held = linear && t.name != "token_embd.weight" ? gguf_held_dtype(t.dtype) : t.dtype;
    s.stored_bytes +=
        held == t.dtype ? t.n_bytes : t.n_elems() / t.shape.back() * dtype_row_bytes(held, t.shape.back());
    if (ends_with(t.name, ".weight")) {
      s.n_params += t.n_elems();
      if (linear)
        dtypes.insert(std::string(dtype_name(t.dtype)) +
                      (held == t.dtype ? "" : " as " + std::string(dtype_name(held))));
    } else if (ends_with(t.name, ".weight_packed")) {
      const std::string shape_name = t.name.substr(0, t.name.size() - 7) + "_shape";
      const auto it = by_name.find(shape_name);
      if (it != by_name.end() && it->second->n_bytes == 16) {
        int64_t dims[2];
        std::memcpy(dims, it->second->data, sizeof dims);
        if (dims[0] <= 0 || dims[1] <= 0 || dims[0] > (int64_t(1) << 31) || dims[1] > (int64_t(1) << 31))
          throw InputError(m.path() + ": " + shape_name + " [" + std::to_string(dims[0]) + ", " +
                           std::to_string(dims[1]) + "] is not a weight's shape");
        s.n_params += dims[0] * dims[1];
      } else if (t.raw == RawType::U8) {  // NVFP4 / MXFP4: two E2M1 codes a byte, no weight_shape
        s.n_params += 2 * t.n_elems();
      } else {
        throw InputError(m.path() + ": " + t.name + " has no 2-value int64 " + shape_name + " (its logical shape)");
      }
    }
  }
  s.n_active_params = s.n_params;
  if (const CtConfig* q = m.quantization()) {
    s.stored_format =
        "compressed-tensors " + std::string(q->mixed_precision ? "mixed-precision" : ct_format_name(q->format));
  } else {
    for (const std::string& d : dtypes) s.stored_format += (s.stored_format.empty() ? "" : " + ") + d;
  }
}

}  // namespace

LoadedModel load_model(const std::string& spec, const std::optional<std::string>& cards) {
  std::error_code ec;
  const fs::path p(spec);
  if (fs::exists(p, ec)) {
    if (fs::is_regular_file(p, ec) && (p.extension() == ".yaml" || p.extension() == ".yml"))
      return {load_card(p), "card " + spec};
    const auto m = open_model(spec);
    ModelShape s = model_shape_from(m->config(), 0);
    file_weights(*m, s);
    if (s.name.empty()) s.name = p.filename().string();
    return {s, "file " + spec};
  }
  const auto dir = cards_dir(cards);
  std::string known;
  if (dir)
    for (const auto& n : card_names(*dir)) known += (known.empty() ? "" : ", ") + n;
  const std::string card_list = known.empty() ? std::string(" (no cards found; pass --cards DIR)") : "; cards: " + known;
  if (dir && spec.find('/') == std::string::npos && fs::is_regular_file(*dir / (spec + ".yaml"), ec))
    return {load_card(*dir / (spec + ".yaml")), "card " + (*dir / (spec + ".yaml")).string()};
  const std::string ext = p.extension().string();
  if (spec.find('/') != std::string::npos || ext == ".gguf" || ext == ".yaml" || ext == ".yml")
    throw InputError("model '" + spec + "': no such file or directory (a card is named without a path" + card_list + ")");
  throw InputError("unknown model '" + spec + "': no such file or directory, and no card " +
                   (dir ? (*dir / (spec + ".yaml")).string() : std::string("configs/models/") + spec + ".yaml") +
                   card_list);
}

namespace {

// ---- the plan ----

struct TpPlan {
  int tp = 1;
  int64_t local_kv_heads = 0;
  bool kv_replicated = false;
  WeightBytes weights;
  int64_t budget = 0;          // KV bytes per rank
  KvFootprint fp_rank;
  Concurrency static_c;        // reservation of the full context per sequence
  Concurrency paged_c;         // blocks at the mean length
  bool weights_fit = false;
  bool fits = false;
  std::string why;             // when !fits
};

struct Inputs {
  ModelShape shape;
  PlanFormat format = PlanFormat::BF16;
  KvCost kv;                   // --kv-dtype
  int64_t gpu_mem = 0, reserve = 0;
  std::optional<int64_t> kv_mem;
  int64_t block_size = kDefaultBlockSize;
  int64_t context = 0, mean_len = 0;
};

TpPlan plan_for(const Inputs& in, int tp) {
  const TpShape ts{in.shape.n_layers, in.shape.n_heads, in.shape.n_kv_heads, in.shape.head_dim,
                   in.shape.hidden,   in.shape.intermediate, in.shape.vocab};
  const TpLayout layout = make_tp_layout(ts, tp, 0, in.shape.name);
  TpPlan p;
  p.tp = tp;
  p.local_kv_heads = layout.local_kv_heads();
  p.kv_replicated = layout.kv_replicated;
  p.weights = weight_bytes(in.shape, in.format, tp);
  p.budget = in.kv_mem ? *in.kv_mem : kv_budget_bytes(in.gpu_mem, p.weights.per_rank_bytes, in.reserve);
  p.fp_rank = kv_footprint(in.shape, p.local_kv_heads, in.kv);
  p.static_c = concurrency(p.fp_rank, p.budget, in.context, in.block_size);
  p.paged_c = concurrency(p.fp_rank, p.budget, in.mean_len, in.block_size);
  const int64_t used = p.weights.per_rank_bytes + in.reserve + (in.kv_mem ? *in.kv_mem : 0);
  p.weights_fit = used <= in.gpu_mem;
  if (!p.weights_fit)
    p.why = "weights " + format_si_bytes(p.weights.per_rank_bytes) + " per rank + reserve " + format_si_bytes(in.reserve) +
            (in.kv_mem ? " + KV " + format_si_bytes(*in.kv_mem) : "") + " exceed " + format_si_bytes(in.gpu_mem);
  else if (p.static_c.n_seqs < 1)
    p.why = "the KV budget " + format_si_bytes(std::max<int64_t>(p.budget, 0)) + " per rank holds no " +
            std::to_string(in.context) + "-token sequence (needs " + format_si_bytes(p.static_c.bytes_per_seq) + ")";
  p.fits = p.weights_fit && p.static_c.n_seqs >= 1;
  return p;
}

std::string count(int64_t n) {
  char buf[64];
  if (n >= 1'000'000'000)
    std::snprintf(buf, sizeof(buf), "%.2f B", double(n) / 1e9);
  else if (n >= 1'000'000)
    std::snprintf(buf, sizeof(buf), "%.2f M", double(n) / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(n));
  return buf;
}

std::string both(int64_t bytes) { return format_si_bytes(bytes) + " (" + format_binary_bytes(bytes) + ")"; }

std::string per_token(int64_t bytes) { return std::to_string(bytes) + " B (" + format_binary_bytes(bytes) + ")"; }

void print_table(const Inputs& in, const std::string& source, int gpus, int dp, const TpPlan& p,
                 const std::optional<TpPlan>& smallest, int64_t min_gpus) {
  const ModelShape& s = in.shape;
  const KvFootprint fp_all = kv_footprint(s, s.n_kv_heads, in.kv);
  auto row = [](const char* label, const std::string& text) { std::printf("%-16s%s\n", label, text.c_str()); };
  row("model", s.name + " (" + source + ")");
  row("shape", std::to_string(s.n_layers) + " layers, hidden " + std::to_string(s.hidden) + ", " +
                   std::to_string(s.n_heads) + " heads, " + std::to_string(s.n_kv_heads) + " KV heads x " +
                   std::to_string(s.head_dim) + ", intermediate " + std::to_string(s.intermediate) + ", vocab " +
                   std::to_string(s.vocab) + ", context " + std::to_string(s.max_context));
  if (s.is_moe()) row("", "MoE: " + std::to_string(s.n_experts) + " experts, " + std::to_string(s.n_experts_per_token) + " per token");
  if (s.n_sliding_layers > 0)
    row("", "sliding window of " + std::to_string(s.sliding_window) + " tokens in " + std::to_string(s.n_sliding_layers) +
                " of " + std::to_string(s.n_layers) + " layers");
  row("parameters", count(s.n_params) + " total, " + count(s.n_active_params) + " active per token" +
                        (s.is_moe() ? ", " + count(s.n_expert_params) + " in experts" : ""));
  row("setup", std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : "") + " x " + both(in.gpu_mem) + ", tp " +
                   std::to_string(p.tp) + ", dp " + std::to_string(dp) + ", reserve " + both(in.reserve) + ", block " +
                   std::to_string(in.block_size) + " tokens");
  const auto& w = p.weights;
  std::string wtext =
      w.format == PlanFormat::Stored ? "as stored, " + s.stored_format : std::string(plan_format_name(w.format));
  char bits[32];
  std::snprintf(bits, sizeof(bits), w.format == PlanFormat::Stored ? "%.2f" : "%g", w.bits_per_param);
  wtext += " (" + std::string(bits) + " bits" + (w.format == PlanFormat::Stored ? " a param" : "") + ") for " +
           count(w.n_format_params) + (w.n_bf16_params > 0 && s.is_moe() ? " expert" : "") + " params";
  if (w.n_bf16_params > 0) wtext += " + bf16 for " + count(w.n_bf16_params);
  row("weights", wtext + ": " + format_si_bytes(w.total_bytes) + " total, " + format_si_bytes(w.per_rank_bytes) + " per rank");
  const std::string window = s.n_sliding_layers > 0 ? " past the " + std::to_string(s.sliding_window) + "-token window" : "";
  std::string kv = per_token(fp_all.bytes_per_token) + " all layers";
  if (s.n_sliding_layers > 0) kv += ", " + per_token(fp_all.long_bytes_per_token) + window;
  if (fp_all.scale_bytes_per_block > 0)
    kv += " + " + std::to_string(fp_all.scale_bytes_per_block) + " B of scales per block";
  row("KV per token", kv + " (" + in.kv.name + ", " + std::to_string(s.n_kv_heads) + " KV heads)");
  std::string kvr = per_token(p.fp_rank.bytes_per_token);
  if (s.n_sliding_layers > 0) kvr += ", " + per_token(p.fp_rank.long_bytes_per_token) + window;
  kvr += " (" + std::to_string(p.local_kv_heads) + " KV head" + (p.local_kv_heads > 1 ? "s" : "");
  kvr += p.kv_replicated ? ", each replicated on " + std::to_string(p.tp / s.n_kv_heads) + " ranks)" : ")";
  row("KV per rank", kvr);
  std::string ctx;
  for (int64_t c : kReportContexts) ctx += (ctx.empty() ? "" : ", ") + std::to_string(c) + ": " + format_si_bytes(kv_bytes_for_context(fp_all, c));
  row("KV per sequence", ctx + " (whole model)");
  if (in.kv_mem)
    row("KV capacity", format_si_bytes(p.budget) + " per rank (--kv-mem)");
  else if (p.budget <= 0)
    row("KV capacity", "none: " + format_si_bytes(w.per_rank_bytes) + " weights per rank + " +
                           format_si_bytes(in.reserve) + " reserve leave nothing of " + format_si_bytes(in.gpu_mem));
  else
    row("KV capacity", format_si_bytes(p.budget) + " per rank = " + format_si_bytes(in.gpu_mem) + " - " +
                           format_si_bytes(w.per_rank_bytes) + " weights - " + format_si_bytes(in.reserve) + " reserve");
  const KvPoolPlan pool = kv_pool_plan(p.fp_rank, p.budget, in.block_size);
  std::string pool_text = std::to_string(pool.n_blocks) + " blocks of " + format_si_bytes(pool.block_bytes) + " = " +
                          std::to_string(pool.token_capacity) + " tokens per rank";
  if (s.n_sliding_layers > 0 && p.budget > 0)  // a hybrid allocator: long sequences cost only the full layers
    pool_text += " (all layers; " + std::to_string(p.budget / p.fp_rank.long_bytes_per_token) + " tokens" + window + ")";
  row("KV pool", pool_text);
  row("concurrency", "static " + std::to_string(in.context) + "-token reservation: " + std::to_string(p.static_c.n_seqs) +
                         " per replica, " + std::to_string(p.static_c.n_seqs * dp) + " in all");
  row("", "paged at a mean " + std::to_string(in.mean_len) + " tokens: " + std::to_string(p.paged_c.n_seqs) +
              " per replica, " + std::to_string(p.paged_c.n_seqs * dp) + " in all");
  row("weights alone", min_gpus < 0 ? "no GPU: the reserve exceeds the memory"
                                    : "need >= " + std::to_string(min_gpus) + " GPU" + (min_gpus > 1 ? "s" : ""));
  if (p.fits) {
    row("fits", "yes");
  } else {
    row("fits", "no: " + p.why);
    if (smallest)
      row("smallest tp", std::to_string(smallest->tp) + " fits (" + format_si_bytes(smallest->weights.per_rank_bytes) +
                             " weights and " + format_si_bytes(smallest->budget) + " KV per rank, " +
                             std::to_string(smallest->static_c.n_seqs) + " sequences at " + std::to_string(in.context) +
                             " tokens)" + (smallest->tp > gpus ? "; needs " + std::to_string(smallest->tp) + " GPUs" : ""));
    else
      row("smallest tp", "none of the valid tp degrees fits");
  }
  if (p.budget <= 0) return;
  std::printf("\nengine start-up report (per rank):\n");
  std::istringstream lines(capacity_report(p.fp_rank, p.budget, in.block_size, in.context));
  for (std::string l; std::getline(lines, l);) std::printf("  %s\n", l.c_str());
}

nlohmann::ordered_json to_json(const Inputs& in, const std::string& source, int gpus, int dp, const TpPlan& p,
                               const std::optional<TpPlan>& smallest, int64_t min_gpus) {
  const ModelShape& s = in.shape;
  const KvFootprint fp_all = kv_footprint(s, s.n_kv_heads, in.kv);
  const KvPoolPlan pool = kv_pool_plan(p.fp_rank, p.budget, in.block_size);
  nlohmann::ordered_json j;
  j["model"] = {{"name", s.name},
                {"source", source},
                {"layers", s.n_layers},
                {"hidden", s.hidden},
                {"heads", s.n_heads},
                {"kv_heads", s.n_kv_heads},
                {"head_dim", s.head_dim},
                {"intermediate", s.intermediate},
                {"vocab", s.vocab},
                {"max_context", s.max_context},
                {"tied_embeddings", s.tied_embeddings},
                {"params", s.n_params},
                {"active_params", s.n_active_params},
                {"expert_params", s.n_expert_params},
                {"experts", s.n_experts},
                {"experts_per_token", s.n_experts_per_token},
                {"sliding_layers", s.n_sliding_layers},
                {"sliding_window", s.sliding_window}};
  j["setup"] = {{"gpu_mem_bytes", in.gpu_mem}, {"gpus", gpus},           {"tp", p.tp},
                {"dp", dp},                    {"reserve_bytes", in.reserve}, {"block_size", in.block_size},
                {"context", in.context},       {"mean_len", in.mean_len}};
  j["weights"] = {{"format", plan_format_name(p.weights.format)},
                  {"stored_format", in.shape.stored_format},
                  {"bits_per_param", p.weights.bits_per_param},
                  {"format_params", p.weights.n_format_params},
                  {"bf16_params", p.weights.n_bf16_params},
                  {"bytes_total", p.weights.total_bytes},
                  {"bytes_per_rank", p.weights.per_rank_bytes}};
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  for (int64_t c : kReportContexts) ctx[std::to_string(c)] = kv_bytes_for_context(fp_all, c);
  j["kv"] = {{"dtype", in.kv.name},
             {"dtype_bytes", in.kv.dtype_bytes},
             {"scale_bytes_per_block", fp_all.scale_bytes_per_block},
             {"scale_bytes_per_block_per_rank", p.fp_rank.scale_bytes_per_block},
             {"bytes_per_token", fp_all.bytes_per_token},
             {"long_bytes_per_token", fp_all.long_bytes_per_token},
             {"local_kv_heads", p.local_kv_heads},
             {"replicated", p.kv_replicated},
             {"bytes_per_token_per_rank", p.fp_rank.bytes_per_token},
             {"long_bytes_per_token_per_rank", p.fp_rank.long_bytes_per_token},
             {"bytes_per_sequence", ctx},
             {"budget_bytes_per_rank", p.budget},
             {"block_bytes", pool.block_bytes},
             {"blocks_per_rank", pool.n_blocks},
             {"token_capacity_per_rank", pool.token_capacity}};
  j["concurrency"] = {{"static_per_replica", p.static_c.n_seqs},
                      {"static_total", p.static_c.n_seqs * dp},
                      {"static_bytes_per_seq", p.static_c.bytes_per_seq},
                      {"paged_per_replica", p.paged_c.n_seqs},
                      {"paged_total", p.paged_c.n_seqs * dp},
                      {"paged_bytes_per_seq", p.paged_c.bytes_per_seq},
                      {"at_2048", concurrency(p.fp_rank, p.budget, 2048, in.block_size).n_seqs},
                      {"at_8192", concurrency(p.fp_rank, p.budget, 8192, in.block_size).n_seqs}};
  j["min_gpus_for_weights"] = min_gpus;
  j["fits"] = p.fits;
  if (!p.fits) j["why"] = p.why;
  j["smallest_tp_that_fits"] = smallest ? nlohmann::ordered_json(smallest->tp) : nlohmann::ordered_json(nullptr);
  j["report"] = p.budget > 0 ? nlohmann::ordered_json(capacity_report(p.fp_rank, p.budget, in.block_size, in.context))
                             : nlohmann::ordered_json(nullptr);
  return j;
}

}  // namespace

const CommandSpec& plan_spec() {
  static const CommandSpec spec{
      "plan",
      "capacity plan: will a model fit, and how many sequences can it serve?",
      {
          OptionSpec::required_value("model", "PATH|NAME", "GGUF file, HF directory, card file, or a card's name"),
          OptionSpec::required_value("gpu-mem", "SIZE", "memory of one GPU"),
          OptionSpec::computed("gpus", "N", "tp x dp", "GPUs in all"),
          OptionSpec::value("tp", "T", "1", "tensor-parallel degree"),
          OptionSpec::computed("dp", "D", "gpus / tp", "data-parallel replicas"),
          OptionSpec::computed("weights", "FORMAT", "stored for a model file, else bf16",
                               "weight format: stored (a file's own bytes), bf16, fp8, int8, int4, mxfp4 or f32"),
          OptionSpec::value("kv-dtype", "DTYPE", "bf16",
                            "KV cache dtype: bf16, f32, fp8_e4m3 (or fp8), int8 (+ scales per block and head), f16"),
          OptionSpec::computed("context", "C", "the model's max context, else 8192", "max tokens per sequence"),
          OptionSpec::computed("mean-len", "L", "min(context, 8192)", "mean sequence length for paged allocation"),
          OptionSpec::value("reserve", "SIZE", kDefaultReserve,
                            "room per GPU for everything but weights and KV (CUDA context, activations, NCCL)"),
          OptionSpec::computed("kv-mem", "SIZE", "GPU memory - weights - reserve", "KV cache bytes per rank"),
          OptionSpec::value("block-size", "B", std::to_string(kDefaultBlockSize), "tokens per KV block"),
          OptionSpec::computed("cards", "DIR", "./configs/models, else configs/models in a folder above tpserve",
                               "where model cards (NAME.yaml) are looked up"),
          OptionSpec::flag("json", "print JSON instead of a table"),
      },
      "SIZE: 80GB = 80e9 bytes, 80GiB = 80 x 2^30 bytes. NAME: a card in configs/models/ (e.g. Llama-3.3-70B)."};
  return spec;
}

int run_plan(const CliArgs& a) {
  const std::string model_spec = a.required("model");
  const std::string gpu_mem_text = a.required("gpu-mem");
  Inputs in;
  auto size = [&](const std::string& text, const char* what) {
    try {
      return parse_byte_size(text, what);
    } catch (const InputError& e) {
      throw UsageError(std::string("plan: ") + e.what());
    }
  };
  in.gpu_mem = size(gpu_mem_text, "--gpu-mem");
  if (in.gpu_mem <= 0) throw UsageError("plan: --gpu-mem must be > 0");
  in.reserve = size(*a.str("reserve"), "--reserve");
  if (auto k = a.str("kv-mem")) in.kv_mem = size(*k, "--kv-mem");
  const int tp = int(a.integer("tp", 1, 4096));
  const int dp_given = int(a.integer("dp", 0, 1, 4096));
  const int gpus = int(a.integer("gpus", int64_t(tp) * std::max(dp_given, 1), 1, 1 << 20));
  in.block_size = a.integer("block-size", 1, 1024);
  try {
    if (auto w = a.str("weights")) in.format = parse_plan_format(*w);
    in.kv = parse_kv_cost(*a.str("kv-dtype"));
  } catch (const InputError& e) {
    throw UsageError(std::string("plan: ") + e.what());
  }
  const LoadedModel m = load_model(model_spec, a.str("cards"));
  in.shape = m.shape;
  if (!a.str("weights")) in.format = in.shape.stored_bytes > 0 ? PlanFormat::Stored : PlanFormat::BF16;
  if (in.format == PlanFormat::Stored && in.shape.stored_bytes <= 0)
    throw UsageError("plan: --weights stored needs a model file; " + m.source + " has no stored bytes");
  in.context = a.integer("context", in.shape.max_context > 0 ? in.shape.max_context : 8192, 1, int64_t(1) << 30);
  in.mean_len = a.integer("mean-len", std::min(in.context, kDefaultMeanLen), 1, int64_t(1) << 30);
  if (gpus < tp)
    throw UsageError("plan: --tp " + std::to_string(tp) + " needs " + std::to_string(tp) + " GPUs; --gpus is " +
                     std::to_string(gpus));
  const int dp = dp_given > 0 ? dp_given : gpus / tp;
  if (int64_t(dp) * tp > gpus)
    throw UsageError("plan: --dp " + std::to_string(dp) + " x --tp " + std::to_string(tp) + " = " +
                     std::to_string(int64_t(dp) * tp) + " GPUs; --gpus is " + std::to_string(gpus));

  const TpShape ts{in.shape.n_layers, in.shape.n_heads, in.shape.n_kv_heads, in.shape.head_dim,
                   in.shape.hidden,   in.shape.intermediate, in.shape.vocab};
  validate_tp(ts, tp, in.shape.name);
  const TpPlan p = plan_for(in, tp);
  std::optional<TpPlan> smallest;
  if (!p.fits)
    for (int t : valid_tp_degrees(ts))
      if (TpPlan q = plan_for(in, t); q.fits) {
        smallest = q;
        break;
      }
  const int64_t min_gpus = min_gpus_for_weights(p.weights.total_bytes, in.gpu_mem, in.reserve);
  if (a.flag("json"))
    std::printf("%s\n", to_json(in, m.source, gpus, dp, p, smallest, min_gpus).dump(2).c_str());
  else
    print_table(in, m.source, gpus, dp, p, smallest, min_gpus);
  return 0;
}

}  // namespace tp
