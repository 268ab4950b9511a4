#include "rank/convert.h"

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "kernels/cpu/gguf_quantize.h"
#include "rank/gguf_model.h"
#include "rank/gguf_quant_mix.h"
#include "rank/gguf_writer.h"
#include "rank/hf_dir.h"
#include "rank/safetensors_file.h"

namespace tp {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes tensor `t` as `out` dtype (F32/F16/BF16 or a GGUF block type) into dst, taking row map(r) for output row r when
// heads > 0 (Q/K permutation with head_dim = rows / heads).
void convert_rows(const TensorView& t, DType out, uint8_t* dst, int64_t heads, bool to_hf) {
  const int64_t row_len = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = t.n_elems() / row_len;
  const int64_t src_row_bytes = dtype_row_bytes(t.dtype, row_len);
  const int64_t head_dim = heads > 0 ? rows / heads : 0;
  std::vector<float> buf(static_cast<size_t>(row_len));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t src = r;
    if (heads > 0) src = to_hf ? gguf_to_hf_row(r, head_dim) : hf_to_gguf_row(r, head_dim);
    dequantize_row(t.dtype, t.data + src * src_row_bytes, buf.data(), row_len);
    if (is_quantized(out)) {
      cpu::quantize_row_gguf(out, buf.data(), dst + r * dtype_row_bytes(out, row_len), row_len);
      continue;
    }
    switch (out) {
      case DType::F32: std::memcpy(dst + r * row_len * 4, buf.data(), size_t(row_len) * 4); break;
      case DType::F16:
      case DType::BF16: {
        uint16_t* d = reinterpret_cast<uint16_t*>(dst) + r * row_len;
        for (int64_t k = 0; k < row_len; ++k) {
          uint16_t h = out == DType::F16 ? f32_to_f16(buf[size_t(k)]) : f32_to_bf16(buf[size_t(k)]);
          std::memcpy(d + k, &h, 2);
        }
        break;
      }
      default: throw Error("convert: unsupported output dtype");
    }
  }
}

// Heads to permute for tensor `name` (0: none).
int64_t qk_heads(const std::string& name, const ModelConfig& c) {
  if (ends_with(name, ".attn_q.weight")) return c.n_heads;
  if (ends_with(name, ".attn_k.weight")) return c.n_kv_heads;
  return 0;
}

void check_qk(const ModelFile& m, const TensorView& t, int64_t heads) {
  if (t.shape.size() != 2 || t.shape[0] % heads != 0 || (t.shape[0] / heads) % 2 != 0)
    throw FormatError(m.path(), t.name, "shape does not split into " + std::to_string(heads) + " heads of even size");
}

void set_gguf_metadata_from(GgufWriter& w, const ModelConfig& c, const TokenizerData& tok) {
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("general.name", GgufValue::make_string(c.name));
  w.set("general.alignment", GgufValue::make_u32(uint32_t(kGgufDefaultAlignment)));
  w.set("llama.block_count", GgufValue::make_u32(uint32_t(c.n_layers)));
  w.set("llama.context_length", GgufValue::make_u32(uint32_t(c.max_context)));
  w.set("llama.embedding_length", GgufValue::make_u32(uint32_t(c.hidden)));
  w.set("llama.feed_forward_length", GgufValue::make_u32(uint32_t(c.intermediate)));
  w.set("llama.attention.head_count", GgufValue::make_u32(uint32_t(c.n_heads)));
  w.set("llama.attention.head_count_kv", GgufValue::make_u32(uint32_t(c.n_kv_heads)));
  w.set("llama.rope.freq_base", GgufValue::make_f32(c.rope_theta));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::make_f32(c.rms_eps));
  w.set("llama.rope.dimension_count", GgufValue::make_u32(uint32_t(c.head_dim)));
  if (c.head_dim * c.n_heads != c.hidden) {
    w.set("llama.attention.key_length", GgufValue::make_u32(uint32_t(c.head_dim)));
    w.set("llama.attention.value_length", GgufValue::make_u32(uint32_t(c.head_dim)));
  }
  w.set("llama.vocab_size", GgufValue::make_u32(uint32_t(c.vocab)));
  if (tok.tokens.empty()) return;
  w.set("tokenizer.ggml.model", GgufValue::make_string(tok.model));
  w.set("tokenizer.ggml.pre", GgufValue::make_string(tok.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(tok.tokens));
  std::vector<int32_t> types;
  for (TokenType t : tok.token_types) types.push_back(int32_t(t));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  w.set("tokenizer.ggml.merges", GgufValue::make_string_array(tok.merges));
  auto id = [&](const char* key, int32_t v) {
    if (v >= 0) w.set(key, GgufValue::make_u32(uint32_t(v)));
  };
  id("tokenizer.ggml.bos_token_id", tok.bos_id);
  id("tokenizer.ggml.eos_token_id", tok.eos_id);
  id("tokenizer.ggml.unknown_token_id", tok.unk_id);
  id("tokenizer.ggml.padding_token_id", tok.pad_id);
  w.set("tokenizer.ggml.add_bos_token", GgufValue::make_bool(tok.add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::make_bool(tok.add_eos));
  if (!tok.chat_template.empty()) w.set("tokenizer.chat_template", GgufValue::make_string(tok.chat_template));
}

// `mix`: the GGUF quantization mix of the matrices (wdt ignored), or none: every matrix in wdt.
void write_gguf(const ModelFile& m, const std::string& out_path, DType wdt, uint32_t file_type,
                const GgufQuantMix* mix = nullptr) {
  GgufWriter w;
  const auto* gm = dynamic_cast<const GgufModel*>(&m);
  const bool permute = m.config().rope_style == RopeStyle::Neox;
  if (gm) {
    for (const auto& kv : gm->gguf().metadata()) w.set(kv.key, kv.value);
    if (gm->gguf().has("general.alignment")) w.set("general.alignment", GgufValue::make_u32(uint32_t(kGgufDefaultAlignment)));
  } else {
    set_gguf_metadata_from(w, m.config(), m.tokenizer());
  }
  w.set("general.file_type", GgufValue::make_u32(file_type));
  if (mix) w.set("general.quantization_version", GgufValue::make_u32(2));
  const bool has_output = m.find("output.weight") != nullptr;
  for (const TensorView& t : m.tensors()) {
    const bool matrix = t.shape.size() >= 2;
    DType out = matrix ? wdt : DType::F32;
    if (matrix && mix) {
      const bool output = t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
      out = gguf_mix_type(*mix, t.name, t.shape.back(), m.config().n_layers, output);
    }
    const int64_t heads = permute ? qk_heads(t.name, m.config()) : 0;
    if (heads) check_qk(m, t, heads);
    if (t.shape.empty() || t.shape.back() % dtype_block_elems(out) != 0)
      throw FormatError(m.path(), t.name, "cannot be written as a GGUF tensor");
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    const TensorView* tp_ = &t;
    w.add_tensor(t.name, dtype_to_ggml(out), ne, [tp_, out, heads](uint8_t* dst) { convert_rows(*tp_, out, dst, heads, false); });
  }
  w.write(out_path);
}

void write_hf(const ModelFile& m, const std::string& out_dir, DType wdt) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw InputError("cannot create '" + out_dir + "': " + ec.message());
  const bool unpermute = m.config().rope_style == RopeStyle::Interleaved;
  std::vector<SafetensorsOut> outs;
  for (const TensorView& t : m.tensors()) {
    const DType out = t.shape.size() >= 2 ? wdt : DType::F32;
    const int64_t heads = unpermute ? qk_heads(t.name, m.config()) : 0;
    if (heads) check_qk(m, t, heads);
    const TensorView* tv = &t;
    outs.push_back({canonical_to_hf_name(t.name), out, t.shape, [tv, out, heads](uint8_t* dst) { convert_rows(*tv, out, dst, heads, true); }});
  }
  ModelConfig c = m.config();
  c.tied_embeddings = m.find("output.weight") == nullptr;
  write_safetensors(out_dir + "/model.safetensors", outs, {{"format", "pt"}});
  write_hf_config(out_dir, c, m.tokenizer(), wdt == DType::BF16 ? "bfloat16" : "float32");
  write_hf_tokenizer(out_dir, m.tokenizer());
}

}  // namespace

int64_t gguf_to_hf_row(int64_t r, int64_t head_dim) {
  const int64_t half = head_dim / 2, h = r / head_dim, rem = r % head_dim;
  const int64_t j = rem / half, i = rem % half;
  return h * head_dim + 2 * i + j;
}

int64_t hf_to_gguf_row(int64_t r, int64_t head_dim) {
  const int64_t half = head_dim / 2, h = r / head_dim, rem = r % head_dim;
  const int64_t i = rem / 2, j = rem % 2;
  return h * head_dim + j * half + i;
}

ConvertFormat parse_convert_format(std::string_view name) {
  if (name == "gguf-f32") return ConvertFormat::GgufF32;
  if (name == "gguf-bf16") return ConvertFormat::GgufBf16;
  if (name == "gguf-f16") return ConvertFormat::GgufF16;
  if (name == "hf-f32") return ConvertFormat::HfF32;
  if (name == "hf-bf16") return ConvertFormat::HfBf16;
  if (name == "gguf-q8_0") return ConvertFormat::GgufQ8_0;
  if (name == "gguf-q4_0") return ConvertFormat::GgufQ4_0;
  if (name == "gguf-q4_1") return ConvertFormat::GgufQ4_1;
  if (name == "gguf-q4_k") return ConvertFormat::GgufQ4_K;
  if (name == "gguf-q6_k") return ConvertFormat::GgufQ6_K;
  if (name == "gguf-q4_k_m") return ConvertFormat::GgufQ4_K_M;
  throw UsageError("unknown convert format '" + std::string(name) +
                   "' (valid: gguf-f32, gguf-bf16, gguf-f16, hf-f32, hf-bf16, gguf-q8_0, gguf-q4_0, gguf-q4_1, "
                   "gguf-q4_k, gguf-q6_k, gguf-q4_k_m)");
}

void convert_model(const std::string& in_path, const std::string& out_path, ConvertFormat fmt) {
  std::unique_ptr<ModelFile> m = open_model(in_path);
  switch (fmt) {
    case ConvertFormat::GgufF32: write_gguf(*m, out_path, DType::F32, 0); break;
    case ConvertFormat::GgufF16: write_gguf(*m, out_path, DType::F16, 1); break;
    case ConvertFormat::GgufBf16: write_gguf(*m, out_path, DType::BF16, 32); break;
    case ConvertFormat::HfF32: write_hf(*m, out_path, DType::F32); break;
    case ConvertFormat::HfBf16: write_hf(*m, out_path, DType::BF16); break;
    case ConvertFormat::GgufQ8_0:
    case ConvertFormat::GgufQ4_0:
    case ConvertFormat::GgufQ4_1:
    case ConvertFormat::GgufQ4_K:
    case ConvertFormat::GgufQ6_K:
    case ConvertFormat::GgufQ4_K_M: {
      const GgufQuantMix mix = fmt == ConvertFormat::GgufQ8_0   ? GgufQuantMix::Q8_0
                               : fmt == ConvertFormat::GgufQ4_0 ? GgufQuantMix::Q4_0
                               : fmt == ConvertFormat::GgufQ4_1 ? GgufQuantMix::Q4_1
                               : fmt == ConvertFormat::GgufQ4_K ? GgufQuantMix::Q4_K
                               : fmt == ConvertFormat::GgufQ6_K ? GgufQuantMix::Q6_K
                                                                : GgufQuantMix::Q4_K_M;
      write_gguf(*m, out_path, DType::F32, gguf_mix_file_type(mix), &mix);
      break;
    }
  }
}

}  // namespace tp
