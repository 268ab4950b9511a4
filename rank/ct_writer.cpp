#include "rank/ct_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "rank/hf_dir.h"
#include "rank/safetensors_file.h"

namespace tp {

namespace {

using json = nlohmann::ordered_json;

struct Scheme {
  QuantScheme id;
  const char* name;
  const char* format;
};
constexpr Scheme kSchemes[] = {
    {QuantScheme::W8A16, "w8a16", "pack-quantized"},         {QuantScheme::W4A16, "w4a16", "pack-quantized"},
    {QuantScheme::W4A16Asym, "w4a16-asym", "pack-quantized"}, {QuantScheme::W3A16, "w3a16", "pack-quantized"},
    {QuantScheme::W8A8Int8, "w8a8-int8", "int-quantized"},   {QuantScheme::Fp8Dynamic, "fp8-dynamic", "float-quantized"},
    {QuantScheme::Fp8Weight, "fp8-weight", "naive-quantized"}, {QuantScheme::Nvfp4, "nvfp4", "nvfp4-pack-quantized"},
    {QuantScheme::Mxfp4, "mxfp4", "mxfp4-pack-quantized"},   {QuantScheme::Fp8Block, "fp8-block", "float-quantized"},
};

const Scheme& scheme_info(QuantScheme s) {
  for (const Scheme& x : kSchemes)
    if (x.id == s) return x;
  throw Error("unknown quant scheme");
}

json quant_args(int bits, const char* type, bool symmetric, const char* strategy, json group_size, json dynamic,
                json actorder, json observer, json scale_dtype, json zp_dtype, json block_structure = nullptr) {
  json j = json::object();
  j["actorder"] = actorder;
  j["block_structure"] = block_structure;
  j["dynamic"] = dynamic;
  j["group_size"] = group_size;
  j["num_bits"] = bits;
  j["observer"] = observer;
  j["observer_kwargs"] = json::object();
  j["scale_dtype"] = scale_dtype;
  j["strategy"] = strategy;
  j["symmetric"] = symmetric;
  j["type"] = type;
  j["zp_dtype"] = zp_dtype;
  return j;
}

// Bytes of `n` values of an output tensor.
struct Stored {
  std::string name;
  DType dtype = DType::F32;
  RawType raw = RawType::None;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // until push(): then in the spill file at `offset`
  int64_t offset = 0, n_bytes = 0;
};

}  // namespace

QuantScheme parse_quant_scheme(std::string_view name) {
  for (const Scheme& s : kSchemes)
    if (name == s.name) return s.id;
  throw UsageError("unknown quantization scheme '" + std::string(name) + "' (valid: " + kQuantSchemeNames + ")");
}

std::string_view quant_scheme_name(QuantScheme s) { return scheme_info(s).name; }

QuantSpec scheme_weight_spec(QuantScheme s, int64_t group_size) {
  QuantSpec q;
  const bool grouped = s == QuantScheme::W4A16 || s == QuantScheme::W4A16Asym || s == QuantScheme::W3A16;
  if (group_size > 0 && !grouped)
    throw UsageError(std::string("--group-size: scheme ") + scheme_info(s).name +
                     " has a fixed grid (group sizes apply to w4a16, w4a16-asym and w3a16)");
  switch (s) {
    case QuantScheme::W8A16:
    case QuantScheme::W8A8Int8: q.kind = QuantKind::Int, q.bits = 8, q.group_size = 0; break;
    case QuantScheme::W4A16:
    case QuantScheme::W4A16Asym:
    case QuantScheme::W3A16:
      q.kind = QuantKind::Int;
      q.bits = s == QuantScheme::W3A16 ? 3 : 4;
      q.symmetric = s != QuantScheme::W4A16Asym;
      q.group_size = group_size < 0 ? 128 : group_size;
      break;
    case QuantScheme::Fp8Dynamic:
    case QuantScheme::Fp8Weight: q.kind = QuantKind::Fp8, q.bits = 8; break;
    case QuantScheme::Fp8Block:
      q.kind = QuantKind::Fp8, q.bits = 8, q.block_rows = kFp8BlockSize, q.group_size = kFp8BlockSize;
      break;
    case QuantScheme::Nvfp4: q.kind = QuantKind::Nvfp4, q.bits = 4, q.group_size = 16; break;
    case QuantScheme::Mxfp4: q.kind = QuantKind::Mxfp4, q.bits = 4, q.group_size = 32; break;
  }
  return q;
}

struct CtWriter::Impl {
  QuantScheme scheme;
  QuantSpec spec;
  ActOrder act_order = ActOrder::None;
  std::vector<std::string> ignore;
  DType dtype = DType::BF16;
  std::vector<Stored> tensors;
  // Tensors are spilled to an unnamed temporary file as they come, so memory holds one layer, not the output.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> spill{std::tmpfile(), &std::fclose};
  int64_t spilled = 0;

  void push(Stored t) {
    if (!spill) throw InputError("quantize: cannot create a temporary file for the output tensors");
    t.offset = spilled;
    t.n_bytes = int64_t(t.bytes.size());
    if (std::fwrite(t.bytes.data(), 1, t.bytes.size(), spill.get()) != t.bytes.size())
      throw InputError("quantize: cannot write the temporary file of the output tensors (disk full?)");
    spilled += t.n_bytes;
    t.bytes = {};
    tensors.push_back(std::move(t));
  }

  void add_float(const std::string& name, const std::vector<int64_t>& shape, const float* v, int64_t n) {
    Stored t{name, dtype, RawType::None, shape, {}};
    t.bytes.resize(size_t(n) * (dtype == DType::F32 ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == DType::F32) {
        std::memcpy(t.bytes.data() + i * 4, v + i, 4);
      } else {
        const uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(t.bytes.data() + i * 2, &h, 2);
      }
    }
    push(std::move(t));
  }
  template <typename T>
  void add_raw(const std::string& name, RawType raw, const std::vector<int64_t>& shape, const std::vector<T>& v) {
    Stored t{name, DType::F32, raw, shape, {}};
    t.bytes.resize(v.size() * sizeof(T));
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    push(std::move(t));
  }
};

CtWriter::CtWriter(QuantScheme scheme, QuantSpec spec, ActOrder act_order, std::vector<std::string> ignore, DType dtype)
    : p_(std::make_unique<Impl>()) {
  if (dtype != DType::F32 && dtype != DType::BF16) throw UsageError("quantize: --dtype must be bf16 or f32");
  if (act_order == ActOrder::Group && spec.kind != QuantKind::Int)
    throw UsageError("act-order \"group\" (a g_idx) applies to integer schemes only");
  p_->scheme = scheme;
  p_->spec = spec;
  p_->act_order = act_order;
  p_->ignore = std::move(ignore);
  p_->dtype = dtype;
}

CtWriter::~CtWriter() = default;

void CtWriter::add_dense(const std::string& hf_name, const std::vector<int64_t>& shape, const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  p_->add_float(hf_name, shape, values, n);
}

void CtWriter::add_quantized(const std::string& m, const QuantizedLinear& q) {
  const int64_t n_out = q.n_out, n_in = q.n_in;
  switch (p_->scheme) {
    case QuantScheme::W8A16:
    case QuantScheme::W4A16:
    case QuantScheme::W4A16Asym:
    case QuantScheme::W3A16: {
      // compressed-tensors pack_to_int32 (dense): u = q + 2^(bits-1), value c of a row at bit bits · c of the
      // row's little-endian I32 words, split across two words where it straddles one (3 bits); ceil(n_in ·
      // bits / 32) words a row, the tail bits 0. Zero points the same along rows (a column per group).
      const int bits = q.spec.bits, ng = int(q.n_groups());
      const int64_t words = (n_in * bits + 31) / 32;
      std::vector<int32_t> packed(size_t(n_out * words), 0);
      auto put = [bits](int32_t* stream, int64_t stride, int64_t i, int v) {  // value i of a stream of words
        const uint64_t u = uint64_t(uint32_t(v + (1 << (bits - 1))) & ((1u << bits) - 1)) << ((i * bits) % 32);
        const int64_t k = i * bits / 32;
        reinterpret_cast<uint32_t&>(stream[k * stride]) |= uint32_t(u);
        if (u >> 32) reinterpret_cast<uint32_t&>(stream[(k + 1) * stride]) |= uint32_t(u >> 32);
      };
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t c = 0; c < n_in; ++c) put(&packed[size_t(r * words)], 1, c, q.q[size_t(r * n_in + c)]);
      p_->add_raw(m + ".weight_packed", RawType::I32, {n_out, words}, packed);
      p_->add_float(m + ".weight_scale", {n_out, ng}, q.scales.data(), n_out * ng);
      p_->add_raw(m + ".weight_shape", RawType::I64, {2}, std::vector<int64_t>{n_out, n_in});
      if (!q.zeros.empty()) {
        const int64_t zrows = (n_out * bits + 31) / 32;
        std::vector<int32_t> zp(size_t(zrows * ng), 0);
        for (int64_t r = 0; r < n_out; ++r)
          for (int g = 0; g < ng; ++g) put(&zp[size_t(g)], ng, r, q.zeros[size_t(r * ng + g)]);
        p_->add_raw(m + ".weight_zero_point", RawType::I32, {zrows, int64_t(ng)}, zp);
      }
      if (!q.g_idx.empty()) p_->add_raw(m + ".weight_g_idx", RawType::I32, {n_in}, q.g_idx);
      break;
    }
    case QuantScheme::W8A8Int8:
      p_->add_raw(m + ".weight", RawType::I8, {n_out, n_in}, q.q);
      p_->add_float(m + ".weight_scale", {n_out, 1}, q.scales.data(), n_out);
      break;
    case QuantScheme::Fp8Dynamic:
    case QuantScheme::Fp8Weight:
      p_->add_raw(m + ".weight", RawType::F8E4M3, {n_out, n_in}, q.codes);
      p_->add_float(m + ".weight_scale", {n_out, 1}, q.scales.data(), n_out);
      break;
    case QuantScheme::Fp8Block: {
      const int64_t nbr = int64_t(q.scales.size()) / q.n_groups();
      p_->add_raw(m + ".weight", RawType::F8E4M3, {n_out, n_in}, q.codes);
      p_->add_float(m + ".weight_scale", {nbr, q.n_groups()}, q.scales.data(), int64_t(q.scales.size()));
      break;
    }
    case QuantScheme::Nvfp4:
    case QuantScheme::Mxfp4: {
      std::vector<uint8_t> packed(size_t(n_out * n_in / 2));
      for (size_t i = 0; i < packed.size(); ++i)
        packed[i] = uint8_t((q.codes[2 * i] & 15) | ((q.codes[2 * i + 1] & 15) << 4));
      p_->add_raw(m + ".weight_packed", RawType::U8, {n_out, n_in / 2}, packed);
      const bool nv = p_->scheme == QuantScheme::Nvfp4;
      const int64_t b = nv ? 16 : 32;
      p_->add_raw(m + ".weight_scale", nv ? RawType::F8E4M3 : RawType::U8, {n_out, n_in / b}, q.scale_bytes);
      if (nv) {
        Stored t{m + ".weight_global_scale", DType::F32, RawType::None, {1}, std::vector<uint8_t>(4)};
        std::memcpy(t.bytes.data(), &q.global_scale, 4);
        p_->push(std::move(t));
      }
      break;
    }
  }
}

std::string CtWriter::quantization_config_json() const {
  const Impl& p = *p_;
  const Scheme& info = scheme_info(p.scheme);
  json weights, input = nullptr;
  const json actorder = p.act_order == ActOrder::Group    ? json("group")
                        : p.act_order == ActOrder::Weight ? json("weight")
                                                          : json(nullptr);
  switch (p.scheme) {
    case QuantScheme::W8A16:
    case QuantScheme::W8A8Int8:
      weights = quant_args(8, "int", true, "channel", nullptr, false, actorder, "memoryless_minmax", nullptr, nullptr);
      if (p.scheme == QuantScheme::W8A8Int8)
        input = quant_args(8, "int", true, "token", nullptr, true, nullptr, nullptr, nullptr, nullptr);
      break;
    case QuantScheme::W4A16:
    case QuantScheme::W4A16Asym:
    case QuantScheme::W3A16: {
      const bool group = p.spec.group_size > 0;
      weights = quant_args(p.spec.bits, "int", p.spec.symmetric, group ? "group" : "channel",
                           group ? json(p.spec.group_size) : json(nullptr), false,
                           actorder, "memoryless_minmax", nullptr,
                           p.spec.symmetric ? json(nullptr) : json("torch.int8"));
      break;
    }
    case QuantScheme::Fp8Dynamic:
    case QuantScheme::Fp8Weight:
      weights = quant_args(8, "float", true, "channel", nullptr, false, actorder, "memoryless_minmax", nullptr, nullptr);
      if (p.scheme == QuantScheme::Fp8Dynamic)
        input = quant_args(8, "float", true, "token", nullptr, true, nullptr, nullptr, nullptr, nullptr);
      break;
    case QuantScheme::Fp8Block:  // llm-compressor's FP8_BLOCK preset
      weights = quant_args(8, "float", true, "block", nullptr, false, actorder, "memoryless_minmax", nullptr, nullptr,
                           json::array({kFp8BlockSize, kFp8BlockSize}));
      input = quant_args(8, "float", true, "group", kFp8BlockSize, true, nullptr, nullptr, nullptr, nullptr);
      break;
    case QuantScheme::Nvfp4:
      weights = quant_args(4, "float", true, "tensor_group", 16, false, actorder, "memoryless_minmax",
                           "torch.float8_e4m3fn", nullptr);
      break;
    case QuantScheme::Mxfp4:
      weights = quant_args(4, "float", true, "group", 32, false, actorder, "memoryless_minmax", "torch.uint8", nullptr);
      break;
  }
  json group = json::object();
  group["format"] = info.format;
  group["input_activations"] = input;
  group["output_activations"] = nullptr;
  group["targets"] = json::array({"Linear"});
  group["weights"] = weights;
  json q = json::object();
  q["config_groups"] = json::object({{"group_0", group}});
  q["format"] = info.format;
  q["global_compression_ratio"] = nullptr;
  q["ignore"] = p.ignore;
  q["kv_cache_scheme"] = nullptr;
  q["quant_method"] = "compressed-tensors";
  q["quantization_status"] = "compressed";
  q["sparsity_config"] = json::object();
  q["transform_config"] = json::object();
  q["version"] = "0.19.0";
  return q.dump(2);
}

void CtWriter::finish(const std::string& out_dir, const ModelConfig& config, const TokenizerData& tok) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw InputError("cannot create '" + out_dir + "': " + ec.message());
  std::vector<SafetensorsOut> outs;
  std::fflush(p_->spill.get());
  std::FILE* spill = p_->spill.get();
  for (const Stored& t : p_->tensors) {
    const Stored* tp_ = &t;
    SafetensorsOut o{t.name, t.dtype, t.shape,
                     [tp_, spill](uint8_t* dst) {
                       if (std::fseek(spill, long(tp_->offset), SEEK_SET) != 0 ||
                           std::fread(dst, 1, size_t(tp_->n_bytes), spill) != size_t(tp_->n_bytes))
                         throw InputError("quantize: cannot read back the temporary file of the output tensors");
                     },
                     t.raw};
    outs.push_back(std::move(o));
  }
  write_safetensors(out_dir + "/model.safetensors", outs, {{"format", "pt"}});
  const std::string torch_dtype = p_->dtype == DType::F32 ? "float32" : "bfloat16";
  write_hf_config(out_dir, config, tok, torch_dtype);
  // Add quantization_config to what write_hf_config wrote.
  const std::string path = out_dir + "/config.json";
  json cfg;
  {
    std::ifstream in(path);
    cfg = json::parse(in);
  }
  cfg["quantization_config"] = json::parse(quantization_config_json());
  std::ofstream out(path, std::ios::trunc);
  out << cfg.dump(2) << "\n";
  if (!out) throw InputError("cannot write '" + path + "'");
  if (!tok.tokens.empty()) write_hf_tokenizer(out_dir, tok);
}

}  // namespace tp
