#include "rank/synth.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/model_config.h"
#include "common/tokenizer_data.h"
#include "common/unicode_bytes.h"
#include "rank/hf_dir.h"
#include "rank/safetensors_file.h"

namespace tp {
namespace {

// SplitMix64: a tiny generator whose sequence is fixed by the seed on every platform.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
};

// Fills n values ~ N(0, std²) from a generator seeded by (seed, tensor index).
void fill_normal(uint8_t* dst, DType dtype, int64_t n, uint64_t seed, uint64_t tensor, float std_dev) {
  SplitMix64 g{seed * 0x100000001b3ull + tensor};
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(g.uniform())), t = 2.0 * M_PI * g.uniform();
    const float v[2] = {float(r * std::cos(t)) * std_dev, float(r * std::sin(t)) * std_dev};
    for (int64_t j = 0; j < 2 && i + j < n; ++j) {
      if (dtype == DType::F32) {
        std::memcpy(dst + (i + j) * 4, &v[j], 4);
      } else {
        const uint16_t b = f32_to_bf16(v[j]);
        std::memcpy(dst + (i + j) * 2, &b, 2);
      }
    }
  }
}

void fill_ones(uint8_t* dst, int64_t n) {
  const float one = 1.0f;
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * 4, &one, 4);
}

void check(bool ok, const char* field, const std::string& why) {
  if (!ok) throw InputError(std::string("synth: --") + field + ": " + why);
}

TokenizerData synth_tokenizer(int64_t vocab) {
  TokenizerData t;
  t.model = "gpt2";
  t.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    t.tokens.emplace_back(byte_to_unicode(uint8_t(b)));
    t.token_types.push_back(TokenType::Normal);
  }
  for (int64_t i = 256; i < vocab - 1; ++i) {
    t.tokens.push_back("<|extra_" + std::to_string(i) + "|>");
    t.token_types.push_back(TokenType::Normal);
  }
  t.tokens.push_back("<|endoftext|>");
  t.token_types.push_back(TokenType::Control);
  t.eos_id = t.bos_id = int32_t(vocab - 1);
  return t;
}

}  // namespace

void write_synthetic_model(const std::string& out, const SynthSpec& s) {
  check(s.n_layers >= 1, "layers", "must be >= 1");
  check(s.n_heads >= 1 && s.hidden % s.n_heads == 0, "heads", "must divide --hidden " + std::to_string(s.hidden));
  check((s.hidden / s.n_heads) % 2 == 0, "hidden", "hidden / heads must be even (rope pairs)");
  check(s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0, "kv-heads", "must divide --heads " + std::to_string(s.n_heads));
  check(s.intermediate >= 1, "intermediate", "must be >= 1");
  check(s.vocab >= 257, "vocab", "must be >= 257 (256 byte tokens + end of text)");
  check(is_runtime_dtype(s.dtype), "dtype", "must be bf16 or f32");

  const int64_t hd = s.hidden / s.n_heads;
  ModelConfig cfg;
  cfg.name = "synthetic-" + std::to_string(s.n_layers) + "L-" + std::to_string(s.hidden) + "H-seed" + std::to_string(s.seed);
  cfg.n_layers = s.n_layers;
  cfg.hidden = s.hidden;
  cfg.n_heads = s.n_heads;
  cfg.n_kv_heads = s.n_kv_heads;
  cfg.head_dim = hd;
  cfg.intermediate = s.intermediate;
  cfg.vocab = s.vocab;
  cfg.max_context = 8192;
  cfg.rms_eps = 1e-5f;
  cfg.rope_theta = 10000.0f;
  cfg.tied_embeddings = s.tied;
  cfg.rope_style = RopeStyle::Neox;

  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    bool norm;
  };
  std::vector<Spec> specs = {{"token_embd.weight", {s.vocab, s.hidden}, false}};
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    specs.push_back({p + "attn_norm.weight", {s.hidden}, true});
    specs.push_back({p + "attn_q.weight", {s.n_heads * hd, s.hidden}, false});
    specs.push_back({p + "attn_k.weight", {s.n_kv_heads * hd, s.hidden}, false});
    specs.push_back({p + "attn_v.weight", {s.n_kv_heads * hd, s.hidden}, false});
    specs.push_back({p + "attn_output.weight", {s.hidden, s.n_heads * hd}, false});
    specs.push_back({p + "ffn_norm.weight", {s.hidden}, true});
    specs.push_back({p + "ffn_gate.weight", {s.intermediate, s.hidden}, false});
    specs.push_back({p + "ffn_up.weight", {s.intermediate, s.hidden}, false});
    specs.push_back({p + "ffn_down.weight", {s.hidden, s.intermediate}, false});
  }
  specs.push_back({"output_norm.weight", {s.hidden}, true});
  if (!s.tied) specs.push_back({"output.weight", {s.vocab, s.hidden}, false});

  std::vector<SafetensorsOut> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec sp = specs[i];
    int64_t n = 1;
    for (int64_t d : sp.shape) n *= d;
    const DType dt = sp.norm ? DType::F32 : s.dtype;
    const uint64_t seed = s.seed, index = i;
    tensors.push_back({canonical_to_hf_name(sp.name), dt, sp.shape, [=](uint8_t* dst) {
                         if (sp.norm)
                           fill_ones(dst, n);
                         else
                           fill_normal(dst, dt, n, seed, index, 0.02f);
                       }});
  }
  std::filesystem::create_directories(out);
  const TokenizerData tok = synth_tokenizer(s.vocab);
  write_safetensors(out + "/model.safetensors", tensors);
  write_hf_config(out, cfg, tok, s.dtype == DType::F32 ? "float32" : "bfloat16");
  write_hf_tokenizer(out, tok);
}

}  // namespace tp
