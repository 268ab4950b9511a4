#include "kvstore/capacity.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"

namespace tp {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string format_scaled(int64_t bytes, double base, const char* const* units) {
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= base && units[u + 1] != nullptr) {
    v /= base;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  return buf;
}

struct SizeUnit {
  const char* suffix;
  double multiplier;
};

constexpr SizeUnit kSizeUnits[] = {
    {"", 1},       {"b", 1},
    {"k", 1e3},    {"kb", 1e3},    {"m", 1e6},    {"mb", 1e6},    {"g", 1e9},     {"gb", 1e9},     {"t", 1e12},
    {"tb", 1e12},  {"ki", 0x1p10}, {"kib", 0x1p10}, {"mi", 0x1p20}, {"mib", 0x1p20}, {"gi", 0x1p30}, {"gib", 0x1p30},
    {"ti", 0x1p40}, {"tib", 0x1p40},
};

}  // namespace

int64_t parse_byte_size(std::string_view text, std::string_view what) {
  const std::string_view t = trim(text);
  auto bad = [&](const std::string& why) {
    return InputError(std::string(what) + ": '" + std::string(text) + "' " + why +
                      "; use e.g. 80GB (GB = 1e9 bytes), 80GiB (GiB = 2^30 bytes) or 512MiB");
  };
  size_t n = 0;
  bool digits = false, dot = false;
  while (n < t.size() && (std::isdigit(static_cast<unsigned char>(t[n])) || (t[n] == '.' && !dot))) {
    digits = digits || t[n] != '.';
    dot = dot || t[n] == '.';
    ++n;
  }
  if (!digits) throw bad("is not a size");
  const double number = std::strtod(std::string(t.substr(0, n)).c_str(), nullptr);
  const std::string suffix = lower(trim(t.substr(n)));
  for (const SizeUnit& u : kSizeUnits) {
    if (suffix != u.suffix) continue;
    const double bytes = std::round(number * u.multiplier);
    if (!std::isfinite(bytes) || bytes >= 0x1p63) throw bad("is too large");
    return int64_t(bytes);
  }
  throw bad("has an unknown unit '" + std::string(trim(t.substr(n))) + "'");
}

std::string format_si_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB", nullptr};
  return format_scaled(bytes, 1000.0, kUnits);
}

std::string format_binary_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", nullptr};
  return format_scaled(bytes, 1024.0, kUnits);
}

int64_t ModelShape::n_embedding_and_norm_params() const {
  return vocab * hidden * (tied_embeddings ? 1 : 2) + (2 * n_layers + 1) * hidden;
}

ModelShape model_shape_from(const ModelConfig& c, int64_t n_params) {
  ModelShape s;
  s.name = c.name;
  s.n_layers = c.n_layers;
  s.hidden = c.hidden;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate;
  s.vocab = c.vocab;
  s.max_context = c.max_context;
  s.tied_embeddings = c.tied_embeddings;
  s.n_params = n_params;
  s.n_active_params = n_params;
  return s;
}

// ---- weights ----

namespace {

struct FormatInfo {
  PlanFormat format;
  const char* name;
  double bits;
};

constexpr FormatInfo kFormats[] = {
    {PlanFormat::F32, "f32", 32.0},      {PlanFormat::BF16, "bf16", 16.0}, {PlanFormat::FP8, "fp8", 8.0},
    {PlanFormat::INT8, "int8", 8.0},     {PlanFormat::INT4, "int4", 4.5},  {PlanFormat::MXFP4, "mxfp4", 4.25},
    {PlanFormat::Stored, "stored", 0.0},
};

const FormatInfo& info(PlanFormat f) {
  for (const FormatInfo& i : kFormats)
    if (i.format == f) return i;
  return kFormats[1];
}

}  // namespace

PlanFormat parse_plan_format(std::string_view name) {
  const std::string n = lower(name);
  std::string list;
  for (const FormatInfo& i : kFormats) {
    if (n == i.name) return i.format;
    list += (list.empty() ? "" : ", ") + std::string(i.name);
  }
  throw InputError("weight format '" + std::string(name) + "' is not one of: " + list);
}

std::string_view plan_format_name(PlanFormat f) { return info(f).name; }

double plan_format_bits(PlanFormat f) { return info(f).bits; }

WeightBytes weight_bytes(const ModelShape& s, PlanFormat format, int64_t tp) {
  WeightBytes w;
  w.format = format;
  if (format == PlanFormat::Stored) {
    if (s.stored_bytes <= 0) throw InputError("weight format 'stored' needs a model file (a card has no stored bytes)");
    w.n_format_params = s.n_params;
    w.total_bytes = s.stored_bytes;
    w.per_rank_bytes = ceil_div(w.total_bytes, std::max<int64_t>(tp, 1));
    w.bits_per_param = s.n_params > 0 ? 8.0 * double(w.total_bytes) / double(s.n_params) : 0.0;
    return w;
  }
  if (format == PlanFormat::F32 || format == PlanFormat::BF16) {
    w.n_format_params = s.n_params;
  } else {
    const int64_t bulk = s.is_moe() ? s.n_expert_params : s.n_params - s.n_embedding_and_norm_params();
    w.n_format_params = std::clamp<int64_t>(bulk, 0, s.n_params);
    w.n_bf16_params = s.n_params - w.n_format_params;
  }
  // Integer arithmetic: bits x 8 is whole for every format (mxfp4 34, int4 36), so bytes = params x (bits x 8) / 64.
  const int64_t bits_x8 = int64_t(std::lround(plan_format_bits(format) * 8.0));
  w.total_bytes = ceil_div(w.n_format_params * bits_x8, 64) + w.n_bf16_params * 2;
  w.per_rank_bytes = ceil_div(w.total_bytes, std::max<int64_t>(tp, 1));
  w.bits_per_param = plan_format_bits(format);
  return w;
}

int64_t min_gpus_for_weights(int64_t total_weight_bytes, int64_t gpu_mem_bytes, int64_t reserve_bytes) {
  const int64_t usable = gpu_mem_bytes - reserve_bytes;
  if (usable <= 0) return -1;
  return std::max<int64_t>(1, ceil_div(total_weight_bytes, usable));
}

// ---- KV cache ----

KvCost kv_cost(KvDType t, bool tensor_scales) {
  return {std::string(kv_dtype_name(t)), kv_dtype_bytes(t), kv_block_scales(t, tensor_scales) ? kKvScaleBytes : 0};
}

KvCost parse_kv_cost(std::string_view name) {
  const std::string n = lower(name);
  std::string list;
  for (KvDType t : kKvDTypes) {
    if (n == kv_dtype_name(t)) return kv_cost(t);
    list += std::string(kv_dtype_name(t)) + ", ";
  }
  if (n == "fp8") return kv_cost(KvDType::FP8_E4M3);
  if (n == "f16") return {"f16", 2, 0};
  throw InputError("KV dtype '" + std::string(name) + "' is not one of: " + list + "fp8 (= fp8_e4m3), f16");
}

KvFootprint kv_footprint(const ModelShape& s, int64_t kv_heads, const KvCost& cost) {
  KvFootprint f;
  f.dtype = cost.name;
  f.n_layers = s.n_layers;
  f.n_sliding_layers = std::clamp<int64_t>(s.sliding_window > 0 ? s.n_sliding_layers : 0, 0, s.n_layers);
  f.sliding_window = f.n_sliding_layers > 0 ? s.sliding_window : 0;
  f.kv_heads = kv_heads;
  f.head_dim = s.head_dim;
  f.dtype_bytes = cost.dtype_bytes;
  f.scale_bytes = cost.scale_bytes;
  f.layer_bytes_per_token = 2 * kv_heads * s.head_dim * cost.dtype_bytes;
  f.layer_scale_bytes_per_block = 2 * kv_heads * cost.scale_bytes;
  f.bytes_per_token = f.n_layers * f.layer_bytes_per_token;
  f.long_bytes_per_token = (f.n_layers - f.n_sliding_layers) * f.layer_bytes_per_token;
  f.scale_bytes_per_block = f.n_layers * f.layer_scale_bytes_per_block;
  return f;
}

KvFootprint kv_footprint(const ModelShape& s, int64_t kv_heads, int64_t kv_dtype_bytes) {
  return kv_footprint(s, kv_heads, KvCost{"", kv_dtype_bytes, 0});
}

int64_t kv_bytes_for_context(const KvFootprint& fp, int64_t tokens, int64_t block_size) {
  if (tokens <= 0) return 0;
  const int64_t bs = std::max<int64_t>(block_size, 1);
  const int64_t blocks = ceil_div(tokens, bs);
  const int64_t layer_block_bytes = fp.layer_bytes_per_token * bs + fp.layer_scale_bytes_per_block;
  int64_t bytes = (fp.n_layers - fp.n_sliding_layers) * layer_block_bytes * blocks;
  if (fp.n_sliding_layers > 0) {
    const int64_t window_blocks = ceil_div(fp.sliding_window - 1, bs) + 1;
    bytes += fp.n_sliding_layers * layer_block_bytes * std::min(blocks, window_blocks);
  }
  return bytes;
}

KvPoolPlan kv_pool_plan(const KvFootprint& fp, int64_t budget_bytes, int64_t block_size) {
  KvPoolPlan p;
  p.budget_bytes = budget_bytes;
  p.block_size = block_size;
  p.block_bytes = fp.block_bytes(block_size);
  p.n_blocks = budget_bytes > 0 && p.block_bytes > 0 ? budget_bytes / p.block_bytes : 0;
  p.token_capacity = p.n_blocks * block_size;
  return p;
}

Concurrency concurrency(const KvFootprint& fp, int64_t budget_bytes, int64_t tokens, int64_t block_size) {
  Concurrency c;
  c.tokens = tokens;
  c.bytes_per_seq = kv_bytes_for_context(fp, tokens, block_size);
  c.n_seqs = budget_bytes > 0 && c.bytes_per_seq > 0 ? budget_bytes / c.bytes_per_seq : 0;
  return c;
}

std::string capacity_report(const KvFootprint& fp, int64_t budget_bytes, int64_t block_size, int64_t max_context) {
  const KvPoolPlan p = kv_pool_plan(fp, budget_bytes, block_size);
  auto n = [](int64_t v) { return std::to_string(v); };
  std::string r = "KV cache per rank: " + n(fp.bytes_per_token) + " B/token (2 x " + n(fp.n_layers) + " layers x " +
                  n(fp.kv_heads) + " KV heads x " + n(fp.head_dim) + " x " + n(fp.dtype_bytes) + " B" +
                  (fp.dtype.empty() ? "" : " " + fp.dtype) + ")";
  if (fp.n_sliding_layers > 0)
    r += ", " + n(fp.long_bytes_per_token) + " B/token past the " + n(fp.sliding_window) + "-token window of " +
         n(fp.n_sliding_layers) + " sliding layers";
  if (fp.scale_bytes_per_block > 0)
    r += ", + " + n(fp.scale_bytes_per_block) + " B/block of scales (2 x " + n(fp.n_layers) + " layers x " +
         n(fp.kv_heads) + " KV heads x " + n(fp.scale_bytes) + " B)";
  r += ", block " + n(block_size) + " tokens = " + n(p.block_bytes) + " B\n";
  r += "KV pool per rank: " + n(p.n_blocks) + " blocks = " + n(p.token_capacity) + " tokens in " + n(budget_bytes) +
       " B (" + format_binary_bytes(budget_bytes) + ")\n";
  r += "max concurrency: " + n(concurrency(fp, budget_bytes, max_context, block_size).n_seqs) +
       " at the max context of " + n(max_context) + " tokens, " +
       n(concurrency(fp, budget_bytes, 2048, block_size).n_seqs) + " at 2048, " +
       n(concurrency(fp, budget_bytes, 8192, block_size).n_seqs) + " at 8192\n";
  return r;
}

}  // namespace tp
