#include "rank/llama_model.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"

namespace tp {
namespace {

std::string blk(int64_t i, const char* what) { return "blk." + std::to_string(i) + "." + what + ".weight"; }

std::vector<float> load_vector(const ModelFile& f, const std::string& name, int64_t n) {
  const TensorView& t = f.require(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

// Rows of several [rows_i, n_in] tensors stacked into one runtime weight.
cpu::Weight stack_rows(const ModelFile& f, DType runtime, int64_t n_in,
                       const std::vector<std::pair<std::string, int64_t>>& parts) {
  if (parts.size() == 1) {
    const TensorView& t = f.require(parts[0].first, {parts[0].second, n_in});
    return cpu::Weight(runtime, parts[0].second, n_in, t.dtype, t.data, dtype_row_bytes(t.dtype, n_in));
  }
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.second;
  std::vector<float> staging(static_cast<size_t>(rows * n_in));
  int64_t r0 = 0;
  for (const auto& [name, n_rows] : parts) {
    const TensorView& t = f.require(name, {n_rows, n_in});
    const int64_t stride = dtype_row_bytes(t.dtype, n_in);
    for (int64_t r = 0; r < n_rows; ++r)
      dequantize_row(t.dtype, t.data + r * stride, staging.data() + (r0 + r) * n_in, n_in);
    r0 += n_rows;
  }
  return cpu::Weight(runtime, rows, n_in, DType::F32, staging.data(), n_in * int64_t(sizeof(float)));
}

template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

DType check_runtime(DType runtime) {
  if (runtime != DType::F32 && runtime != DType::BF16)
    throw InputError("runtime dtype must be f32 or bf16, not " + std::string(dtype_name(runtime)));
  return runtime;
}

// SmolLM2 and other tied models have no output.weight: the lm_head is the token embedding.
cpu::Weight load_lm_head(const ModelFile& f, DType runtime) {
  const ModelConfig& c = f.config();
  const bool tied = c.tied_embeddings || f.find("output.weight") == nullptr;
  return stack_rows(f, check_runtime(runtime), c.hidden, {{tied ? "token_embd.weight" : "output.weight", c.vocab}});
}

}  // namespace

LlamaModel::LlamaModel(const ModelFile& f, DType runtime) : cfg_(f.config()), lm_head_(load_lm_head(f, runtime)) {
  const int64_t hd = cfg_.head_dim, hidden = cfg_.hidden, inter = cfg_.intermediate;
  const int64_t q_rows = cfg_.n_heads * hd, kv_rows = cfg_.n_kv_heads * hd;
  if (hd % 2 != 0) throw FormatError(f.path(), "head_dim", std::to_string(hd) + " is odd; rope needs pairs");
  if (cfg_.n_kv_heads <= 0 || cfg_.n_heads % cfg_.n_kv_heads != 0)
    throw FormatError(f.path(), "head_count_kv",
                      std::to_string(cfg_.n_kv_heads) + " does not divide " + std::to_string(cfg_.n_heads) + " heads");

  embd_ = &f.require("token_embd.weight", {cfg_.vocab, hidden});
  if (embd_->dtype != DType::F32 && hidden % dtype_block_elems(embd_->dtype) != 0)
    throw FormatError(f.path(), "token_embd.weight", "row length is not a multiple of the block size");
  layers_.reserve(size_t(cfg_.n_layers));
  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    layers_.push_back(Layer{
        load_vector(f, blk(i, "attn_norm"), hidden),
        load_vector(f, blk(i, "ffn_norm"), hidden),
        stack_rows(f, runtime, hidden, {{blk(i, "attn_q"), q_rows}, {blk(i, "attn_k"), kv_rows}, {blk(i, "attn_v"), kv_rows}}),
        stack_rows(f, runtime, q_rows, {{blk(i, "attn_output"), hidden}}),
        stack_rows(f, runtime, hidden, {{blk(i, "ffn_gate"), inter}, {blk(i, "ffn_up"), inter}}),
        stack_rows(f, runtime, inter, {{blk(i, "ffn_down"), hidden}}),
    });
  }
  output_norm_ = load_vector(f, "output_norm.weight", hidden);
}

int64_t LlamaModel::resident_weight_bytes() const {
  int64_t n = embd_->n_bytes + lm_head_.n_bytes() + int64_t(output_norm_.size() * sizeof(float));
  for (const Layer& l : layers_)
    n += l.qkv.n_bytes() + l.wo.n_bytes() + l.gate_up.n_bytes() + l.down.n_bytes() +
         int64_t((l.attn_norm.size() + l.ffn_norm.size()) * sizeof(float));
  return n;
}

KvPoolShape LlamaModel::kv_shape(int64_t n_blocks, int64_t block_size) const {
  return KvPoolShape{cfg_.n_layers, n_blocks, block_size, cfg_.n_kv_heads, cfg_.head_dim};
}

void LlamaModel::forward(const std::vector<SeqStep>& seqs, KvPool& pool, std::vector<float>& logits) {
  const int64_t hidden = cfg_.hidden, hd = cfg_.head_dim, nh = cfg_.n_heads, nkv = cfg_.n_kv_heads;
  const int64_t inter = cfg_.intermediate, bs = pool.shape().block_size;
  const int64_t qkv_w = (nh + 2 * nkv) * hd;

  // Flatten the step: token ids, positions and pool slots of every new token.
  int64_t n_tok = 0, n_out = 0;
  for (const SeqStep& s : seqs) {
    n_tok += int64_t(s.tokens.size());
    n_out += s.want_logits ? 1 : 0;
    const int64_t end = s.start_pos + int64_t(s.tokens.size());
    if (int64_t(s.block_table.size()) * bs < end)
      throw Error("forward: block table covers " + std::to_string(s.block_table.size() * bs) + " positions, needs " +
                  std::to_string(end));
  }
  std::vector<int32_t> ids;
  ids.reserve(size_t(n_tok));
  int32_t* pos = grow(positions_, n_tok);
  int64_t* slot = grow(slots_, n_tok);
  for (const SeqStep& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t p = s.start_pos + int64_t(i);
      if (s.tokens[i] < 0 || s.tokens[i] >= cfg_.vocab)
        throw InputError("token id " + std::to_string(s.tokens[i]) + " is outside the vocabulary [0, " +
                         std::to_string(cfg_.vocab) + ")");
      ids.push_back(s.tokens[i]);
      *pos++ = int32_t(p);
      *slot++ = int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs;
    }
  }
  pos = positions_.data();
  slot = slots_.data();

  float* x = grow(x_, n_tok * hidden);
  float* h = grow(h_, n_tok * hidden);
  float* qkv = grow(qkv_, n_tok * qkv_w);
  float* q = grow(q_, n_tok * nh * hd);
  float* k = grow(k_, n_tok * nkv * hd);
  float* v = grow(v_, n_tok * nkv * hd);
  float* attn = grow(attn_, n_tok * nh * hd);
  float* gu = grow(gu_, n_tok * 2 * inter);
  float* mlp = grow(mlp_, n_tok * inter);

  cpu::embedding(embd_->data, embd_->dtype, dtype_row_bytes(embd_->dtype, hidden), hidden, ids.data(), n_tok, x);
  const float scale = 1.0f / std::sqrt(float(hd));

  for (int64_t li = 0; li < cfg_.n_layers; ++li) {
    Layer& L = layers_[size_t(li)];
    cpu::rmsnorm(x, L.attn_norm.data(), n_tok, hidden, cfg_.rms_eps, h);
    cpu::linear(h, n_tok, L.qkv, qkv);
    for (int64_t t = 0; t < n_tok; ++t) {
      const float* row = qkv + t * qkv_w;
      std::memcpy(q + t * nh * hd, row, size_t(nh * hd) * sizeof(float));
      std::memcpy(k + t * nkv * hd, row + nh * hd, size_t(nkv * hd) * sizeof(float));
      std::memcpy(v + t * nkv * hd, row + (nh + nkv) * hd, size_t(nkv * hd) * sizeof(float));
    }
    cpu::rope(q, n_tok, nh, hd, pos, cfg_.rope_theta, cfg_.rope_style);
    cpu::rope(k, n_tok, nkv, hd, pos, cfg_.rope_theta, cfg_.rope_style);
    cpu::write_kv(k, v, n_tok, nkv, hd, slot, pool.k(li), pool.v(li));
    int64_t t0 = 0;
    for (const SeqStep& s : seqs) {
      const int64_t n = int64_t(s.tokens.size());
      cpu::paged_attention(q + t0 * nh * hd, n, s.start_pos, nh, nkv, hd, pool.k(li), pool.v(li),
                           s.block_table.data(), bs, scale, attn + t0 * nh * hd);
      t0 += n;
    }
    cpu::linear(attn, n_tok, L.wo, h);
    cpu::add_inplace(x, h, n_tok * hidden);

    cpu::rmsnorm(x, L.ffn_norm.data(), n_tok, hidden, cfg_.rms_eps, h);
    cpu::linear(h, n_tok, L.gate_up, gu);
    cpu::silu_mul(gu, n_tok, inter, mlp);
    cpu::linear(mlp, n_tok, L.down, h);
    cpu::add_inplace(x, h, n_tok * hidden);
  }

  // Final norm and lm_head only for the last token of each sequence that wants logits.
  float* last = grow(last_, n_out * hidden);
  int64_t t_end = 0, o = 0;
  for (const SeqStep& s : seqs) {
    t_end += int64_t(s.tokens.size());
    if (s.want_logits) std::memcpy(last + (o++) * hidden, x + (t_end - 1) * hidden, size_t(hidden) * sizeof(float));
  }
  cpu::rmsnorm(last, output_norm_.data(), n_out, hidden, cfg_.rms_eps, last);
  logits.resize(size_t(n_out * cfg_.vocab));
  cpu::linear(last, n_out, lm_head_, logits.data());
}

}  // namespace tp
