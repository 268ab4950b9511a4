#include "rank/llama_model.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"
#include "kernels/cpu/finite.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "rank/hf_dir.h"

namespace tp {
namespace {

using Clock = std::chrono::steady_clock;

std::string blk(int64_t i, const char* what) { return "blk." + std::to_string(i) + "." + what + ".weight"; }

// ---- refusing NaN / inf weights (one pass over what was just converted) ----

// The tensor as its file names it: the HF name too for an HF directory.
std::string tensor_label(const ModelFile& f, const std::string& name) {
  std::error_code ec;
  const std::string hf = canonical_to_hf_name(name);
  return std::filesystem::is_directory(f.path(), ec) && hf != name ? hf + " (" + name + ")" : name;
}

std::string value_text(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}

// Throws FormatError for element (row, col) of tensor `name` [n_rows, n_cols], whose value in the file is
// `source` and in the runtime dtype `runtime` (which may have overflowed to inf).
[[noreturn]] void refuse_weight(const ModelFile& f, const std::string& name, int64_t row, int64_t col, int64_t n_cols,
                                float source, DType runtime) {
  const std::string at = " at [" + std::to_string(row) + ", " + std::to_string(col) + "] (element " +
                         std::to_string(row * n_cols + col) + ")";
  const std::string what = std::isfinite(source) ? "holds " + value_text(source) + at + ", which overflows " +
                                                       std::string(dtype_name(runtime))
                                                 : "holds " + value_text(source) + at;
  throw FormatError(f.path(), tensor_label(f, name), what + ": every weight must be finite");
}

// Value of element `col` of row `row` of tensor t [rows, n_in], read from the file.
float source_value(const TensorView& t, int64_t n_in, int64_t row, int64_t col) {
  std::vector<float> r(static_cast<size_t>(n_in));
  dequantize_row(t.dtype, t.data + row * dtype_row_bytes(t.dtype, n_in), r.data(), n_in);
  return r[size_t(col)];
}

std::vector<float> load_vector(const ModelFile& f, const std::string& name, int64_t n) {
  const TensorView& t = f.require(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, out.data(), n);
  if (const int64_t bad = cpu::first_non_finite(DType::F32, out.data(), n); bad >= 0)
    throw FormatError(f.path(), tensor_label(f, name),
                      "holds " + value_text(out[size_t(bad)]) + " at [" + std::to_string(bad) +
                          "]: every weight must be finite");
  return out;
}

// Rows `rows` of tensor `name` [total_rows, n_in].
struct RowSlice {
  std::string name;
  int64_t total_rows;
  Range rows;
};

// The given row slices, stacked, restricted to columns `cols` of [0, n_in), as one runtime weight.
// Only the bytes of the slice are read from the mapping. A column slice of a quantized tensor must start and
// end on a block boundary.
cpu::Weight load_slices(const ModelFile& f, DType runtime, int64_t n_in, Range cols, const std::vector<RowSlice>& parts) {
  const int64_t n_cols = cols.size();
  int64_t rows = 0;
  std::vector<const TensorView*> views;
  for (const RowSlice& p : parts) {
    views.push_back(&f.require(p.name, {p.total_rows, n_in}));
    rows += p.rows.size();
    const int64_t blk_elems = dtype_block_elems(views.back()->dtype);
    if (cols.begin % blk_elems != 0 || cols.end % blk_elems != 0)
      throw FormatError(f.path(), p.name,
                        "column slice [" + std::to_string(cols.begin) + ", " + std::to_string(cols.end) +
                            ") does not fall on the " + std::to_string(blk_elems) + "-weight quantization blocks");
  }
  cpu::Weight w = [&] {
    if (parts.size() == 1 && n_cols == n_in) {  // one contiguous run of whole rows: convert straight from the file
      const TensorView& t = *views[0];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in);
      return cpu::Weight(runtime, rows, n_in, t.dtype, t.data + parts[0].rows.begin * stride, stride);
    }
    std::vector<float> staging(static_cast<size_t>(rows * n_cols));
    int64_t r0 = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const TensorView& t = *views[i];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in), col_off = dtype_row_bytes(t.dtype, cols.begin);
      for (int64_t r = parts[i].rows.begin; r < parts[i].rows.end; ++r, ++r0)
        dequantize_row(t.dtype, t.data + r * stride + col_off, staging.data() + r0 * n_cols, n_cols);
    }
    return cpu::Weight(runtime, rows, n_cols, DType::F32, staging.data(), n_cols * int64_t(sizeof(float)));
  }();
  // NaN / inf, in the file or from the conversion overflowing: name the part, its row and column.
  if (const int64_t bad = cpu::first_non_finite(w.dtype(), w.data(), rows * n_cols); bad >= 0) {
    int64_t r = bad / n_cols;  // row of the stacked weight -> part i, row of its tensor
    const int64_t c = cols.begin + bad % n_cols;
    size_t i = 0;
    while (r >= parts[i].rows.size()) r -= parts[i++].rows.size();
    const int64_t row = parts[i].rows.begin + r;
    refuse_weight(f, parts[i].name, row, c, n_in, source_value(*views[i], n_in, row, c), runtime);
  }
  return w;
}

// The rows [rows.begin, rows.end) of the token embedding, which stays in the file's type (it is read through
// the mapping, not converted): refused when one holds NaN / inf.
void check_embedding_rows(const ModelFile& f, const TensorView& t, int64_t hidden, Range rows) {
  const int64_t stride = dtype_row_bytes(t.dtype, hidden);
  if (!is_quantized(t.dtype)) {
    const int64_t bad = cpu::first_non_finite(t.dtype, t.data + rows.begin * stride, rows.size() * hidden);
    if (bad >= 0) {
      const int64_t row = rows.begin + bad / hidden, col = bad % hidden;
      refuse_weight(f, t.name, row, col, hidden, source_value(t, hidden, row, col), t.dtype);
    }
    return;
  }
  std::vector<float> r(static_cast<size_t>(hidden));
  for (int64_t row = rows.begin; row < rows.end; ++row) {
    dequantize_row(t.dtype, t.data + row * stride, r.data(), hidden);
    if (const int64_t col = cpu::first_non_finite(DType::F32, r.data(), hidden); col >= 0)
      refuse_weight(f, t.name, row, col, hidden, r[size_t(col)], t.dtype);
  }
}

DType check_runtime(DType runtime) {
  if (!is_runtime_dtype(runtime))
    throw InputError("runtime dtype must be bf16 or f32, not " + std::string(dtype_name(runtime)));
  return runtime;
}

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
cpu::Weight load_lm_head(const ModelFile& f, DType runtime, const TpLayout& l) {
  const ModelConfig& c = f.config();
  const bool tied = c.tied_embeddings || f.find("output.weight") == nullptr;
  const Range rows{l.vocab_rows.begin, l.vocab_rows.begin + l.local_real_vocab_rows()};
  return load_slices(f, check_runtime(runtime), c.hidden, {0, c.hidden},
                     {{tied ? "token_embd.weight" : "output.weight", c.vocab, rows}});
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
      lm_head_(load_lm_head(f, runtime, layout_)) {
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
        load_slices(f, runtime, hidden, {0, hidden},
                    {{blk(i, "attn_q"), nh * hd, q}, {blk(i, "attn_k"), nkv * hd, kv}, {blk(i, "attn_v"), nkv * hd, kv}}),
        load_slices(f, runtime, nh * hd, q, {{blk(i, "attn_output"), hidden, {0, hidden}}}),
        load_slices(f, runtime, hidden, {0, hidden},
                    {{blk(i, "ffn_gate"), cfg_.intermediate, inter}, {blk(i, "ffn_up"), cfg_.intermediate, inter}}),
        load_slices(f, runtime, cfg_.intermediate, inter, {{blk(i, "ffn_down"), hidden, {0, hidden}}}),
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
