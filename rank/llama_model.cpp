#include "rank/llama_model.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "rank/weight_loader.h"

namespace tp {
namespace {

using Clock = std::chrono::steady_clock;

std::string blk(int64_t i, const char* what) { return "blk." + std::to_string(i) + "." + what + ".weight"; }

// The model as users name it: its file or folder name up to the first '.' ("SmolLM2-135M-Instruct").
std::string model_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).lexically_normal().filename().string();
  if (stem.empty()) stem = std::filesystem::path(path).lexically_normal().parent_path().filename().string();
  return stem.substr(0, stem.find('.'));
}

TpLayout layout_for(const ModelFile& f, Communicator* comm) {
  const int tp = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  return make_tp_layout(TpShape::from(f.config()), tp, rank, model_name(f.path()));
}

// SmolLM2 and other tied models have no output.weight: the lm_head is the token embedding.
cpu::Weight load_lm_head(const ModelFile& f, const WeightLoadOptions& o, const TpLayout& l) {
  const ModelConfig& c = f.config();
  const bool tied = c.tied_embeddings || f.find("output.weight") == nullptr;
  const Range rows{l.vocab_rows.begin, l.vocab_rows.begin + l.local_real_vocab_rows()};
  return load_linear(f, o, c.hidden, {0, c.hidden}, {{tied ? "token_embd.weight" : "output.weight", c.vocab, rows}});
}

template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

}  // namespace

LlamaModel::LlamaModel(const ModelFile& f, DType runtime, Communicator* comm, const LoadProgress& progress)
    : cfg_(f.config()),
      layout_(layout_for(f, comm)),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      lm_head_(load_lm_head(f, WeightLoadOptions{runtime}, layout_)) {
  const WeightLoadOptions o{runtime};
  const int64_t hd = cfg_.head_dim, hidden = cfg_.hidden, nh = cfg_.n_heads, nkv = cfg_.n_kv_heads;
  if (hd % 2 != 0) throw FormatError(f.path(), "head_dim", std::to_string(hd) + " is odd; rope needs pairs");
  const Range q{layout_.q_heads.begin * hd, layout_.q_heads.end * hd};
  const Range kv{layout_.kv_heads.begin * hd, layout_.kv_heads.end * hd};
  const Range inter = layout_.intermediate;

  embd_ = &f.require("token_embd.weight", {cfg_.vocab, hidden});
  if (hidden % dtype_block_elems(embd_->dtype) != 0)
    throw FormatError(f.path(), "token_embd.weight", "row length is not a multiple of the block size");
  if (!cfg_.tied_embeddings && f.find("output.weight") != nullptr)  // tied: the lm_head checked these rows
    check_embedding_rows(f, *embd_, hidden,
                         {layout_.vocab_rows.begin, layout_.vocab_rows.begin + layout_.local_real_vocab_rows()});
  layers_.reserve(size_t(cfg_.n_layers));
  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    layers_.push_back(Layer{
        load_vector(f, blk(i, "attn_norm"), hidden),
        load_vector(f, blk(i, "ffn_norm"), hidden),
        load_linear(f, o, hidden, {0, hidden},
                    {{blk(i, "attn_q"), nh * hd, q}, {blk(i, "attn_k"), nkv * hd, kv}, {blk(i, "attn_v"), nkv * hd, kv}}),
        load_linear(f, o, nh * hd, q, {{blk(i, "attn_output"), hidden, {0, hidden}}}),
        load_linear(f, o, hidden, {0, hidden},
                    {{blk(i, "ffn_gate"), cfg_.intermediate, inter}, {blk(i, "ffn_up"), cfg_.intermediate, inter}}),
        load_linear(f, o, cfg_.intermediate, inter, {{blk(i, "ffn_down"), hidden, {0, hidden}}}),
    });
    if (progress && i + 1 < cfg_.n_layers) progress(i + 1, cfg_.n_layers, resident_weight_bytes());
  }
  output_norm_ = load_vector(f, "output_norm.weight", hidden);
  if (progress) progress(cfg_.n_layers, cfg_.n_layers, resident_weight_bytes());
}

int64_t LlamaModel::resident_weight_bytes() const {
  const int64_t embd_rows = layout_.local_real_vocab_rows();
  int64_t n = embd_rows * dtype_row_bytes(embd_->dtype, cfg_.hidden) + lm_head_.n_bytes() +
              int64_t(output_norm_.size() * sizeof(float));
  for (const Layer& l : layers_)
    n += l.qkv.n_bytes() + l.wo.n_bytes() + l.gate_up.n_bytes() + l.down.n_bytes() +
         int64_t((l.attn_norm.size() + l.ffn_norm.size()) * sizeof(float));
  return n;
}

KvPoolShape LlamaModel::kv_shape(int64_t n_blocks, int64_t block_size) const {
  return KvPoolShape{cfg_.n_layers, n_blocks, block_size, layout_.local_kv_heads(), cfg_.head_dim};
}

void LlamaModel::all_reduce(float* x, int64_t n) {
  if (!comm_) return;
  const auto t0 = Clock::now();
  comm_->all_reduce_sum(x, size_t(n));
  times_.comm_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

void LlamaModel::forward(const std::vector<SeqPlan>& seqs, KvPool& pool, std::vector<float>& logits) {
  const auto t_start = Clock::now();
  const int64_t hidden = cfg_.hidden, hd = cfg_.head_dim, vocab = cfg_.vocab;
  const int64_t nh = layout_.local_q_heads(), nkv = layout_.local_kv_heads();
  const int64_t inter = layout_.intermediate.size(), bs = pool.shape().block_size;
  const int64_t qkv_w = (nh + 2 * nkv) * hd;

  // Flatten the step: token ids, positions and pool slots of every new token.
  int64_t n_tok = 0, n_out = 0;
  for (const SeqPlan& s : seqs) {
    n_tok += int64_t(s.tokens.size());
    n_out += s.n_logit_rows();
    const int64_t end = s.start_pos + int64_t(s.tokens.size());
    if (int64_t(s.block_table.size()) * bs < end)
      throw Error("forward: block table covers " + std::to_string(s.block_table.size() * bs) + " positions, needs " +
                  std::to_string(end));
  }
  int32_t* ids = grow(ids_, n_tok);
  int32_t* pos = grow(positions_, n_tok);
  int64_t* slot = grow(slots_, n_tok);
  for (const SeqPlan& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t p = s.start_pos + int64_t(i);
      if (s.tokens[i] < 0 || s.tokens[i] >= vocab)
        throw InputError("token id " + std::to_string(s.tokens[i]) + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ")");
      *ids++ = s.tokens[i];
      *pos++ = int32_t(p);
      *slot++ = int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs;
    }
  }
  ids = ids_.data();
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

  // Vocab-parallel embedding: rows outside this rank's shard are zero, the all-reduce fills them in.
  const int64_t row_bytes = dtype_row_bytes(embd_->dtype, hidden);
  if (!comm_) {
    cpu::embedding(embd_->data, embd_->dtype, row_bytes, hidden, ids, n_tok, x);
  } else {
    const Range mine{layout_.vocab_rows.begin, layout_.vocab_rows.begin + layout_.local_real_vocab_rows()};
    for (int64_t t = 0; t < n_tok; ++t) {
      if (mine.contains(ids[t]))
        cpu::embedding(embd_->data, embd_->dtype, row_bytes, hidden, ids + t, 1, x + t * hidden);
      else
        std::memset(x + t * hidden, 0, size_t(hidden) * sizeof(float));
    }
    all_reduce(x, n_tok * hidden);
  }
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
    for (const SeqPlan& s : seqs) {
      const int64_t n = int64_t(s.tokens.size());
      cpu::paged_attention(q + t0 * nh * hd, n, s.start_pos, nh, nkv, hd, pool.k(li), pool.v(li),
                           s.block_table.data(), bs, scale, attn + t0 * nh * hd);
      t0 += n;
    }
    cpu::linear(attn, n_tok, L.wo, h);
    all_reduce(h, n_tok * hidden);
    cpu::add_inplace(x, h, n_tok * hidden);

    cpu::rmsnorm(x, L.ffn_norm.data(), n_tok, hidden, cfg_.rms_eps, h);
    cpu::linear(h, n_tok, L.gate_up, gu);
    cpu::silu_mul(gu, n_tok, inter, mlp);
    cpu::linear(mlp, n_tok, L.down, h);
    all_reduce(h, n_tok * hidden);
    cpu::add_inplace(x, h, n_tok * hidden);
  }

  // Final norm and lm_head only for the rows that give logits: prompt-logprob rows, then the last token.
  float* last = grow(last_, n_out * hidden);
  int64_t t0 = 0, o = 0;
  for (const SeqPlan& s : seqs) {
    const int64_t n = int64_t(s.tokens.size()), m = int64_t(s.prompt_targets.size());
    std::memcpy(last + o * hidden, x + t0 * hidden, size_t(m * hidden) * sizeof(float));
    o += m;
    if (s.want_logits) std::memcpy(last + (o++) * hidden, x + (t0 + n - 1) * hidden, size_t(hidden) * sizeof(float));
    t0 += n;
  }
  cpu::rmsnorm(last, output_norm_.data(), n_out, hidden, cfg_.rms_eps, last);
  logits.resize(size_t(n_out * vocab));
  if (!comm_) {
    cpu::linear(last, n_out, lm_head_, logits.data());
  } else if (n_out > 0) {
    // Vocab-parallel lm_head: each rank computes its shard [n_out, local] (padded rows -inf), then every
    // rank gathers [tp, n_out, local] and keeps the real vocab columns.
    const int64_t local = layout_.vocab_rows.size(), real = layout_.local_real_vocab_rows();
    float* shard = grow(shard_, n_out * local);
    float* tmp = grow(lm_out_, n_out * std::max<int64_t>(real, 1));
    if (real > 0) cpu::linear(last, n_out, lm_head_, tmp);
    for (int64_t r = 0; r < n_out; ++r) {
      std::memcpy(shard + r * local, tmp + r * real, size_t(real) * sizeof(float));
      std::fill(shard + r * local + real, shard + (r + 1) * local, -std::numeric_limits<float>::infinity());
    }
    const int tp = layout_.tp;
    float* all = grow(gathered_, tp * n_out * local);
    const auto t0 = Clock::now();
    comm_->all_gather(shard, size_t(n_out * local) * sizeof(float), all);
    times_.comm_s += std::chrono::duration<double>(Clock::now() - t0).count();
    for (int64_t r = 0; r < n_out; ++r)
      for (int g = 0; g < tp; ++g) {
        const int64_t col0 = g * local, n = std::min(local, vocab - col0);
        if (n > 0)
          std::memcpy(logits.data() + r * vocab + col0, all + (g * n_out + r) * local, size_t(n) * sizeof(float));
      }
  }
  times_.total_s += std::chrono::duration<double>(Clock::now() - t_start).count();
  ++times_.steps;
}

}  // namespace tp
