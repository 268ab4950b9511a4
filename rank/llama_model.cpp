#include "rank/llama_model.h"

#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"
#include "rank/cuda_graph_buckets.h"
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


template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

}  // namespace

LlamaModel::LlamaModel(const ModelFile& f, DType runtime, Communicator* comm, const LoadProgress& progress,
                       Backend* backend)
    : LlamaModel(f, WeightLoadOptions{runtime}, comm, progress, backend) {}

LlamaModel::LlamaModel(const ModelFile& f, const WeightLoadOptions& o, Communicator* comm, const LoadProgress& progress,
                       Backend* backend)
    : cfg_(f.config()), layout_(layout_for(f, comm)), backend_(backend ? backend : &cpu_backend()) {
  Backend& b = *backend_;
  Communicator* group = comm && comm->size() > 1 ? comm : nullptr;
  single_rank_ = group == nullptr;
  if (const char* g = std::getenv("TPSERVE_CUDA_GRAPHS"); g && std::string(g) == "0") graphs_enabled_ = false;
  double* comm_s = &times_.comm_s;
  const int64_t hd = cfg_.head_dim, hidden = cfg_.hidden, nh = cfg_.n_heads, nkv = cfg_.n_kv_heads;
  if (hd % 2 != 0) throw FormatError(f.path(), "head_dim", std::to_string(hd) + " is odd; rope needs pairs");
  const Range q{layout_.q_heads.begin * hd, layout_.q_heads.end * hd};
  const Range kv{layout_.kv_heads.begin * hd, layout_.kv_heads.end * hd};
  const Range inter = layout_.intermediate;

  lm_head_ = ParallelLmHead(b, f, o, layout_, group, comm_s);
  embd_ = VocabParallelEmbedding(
      b, f, {layout_.vocab_rows.begin, layout_.vocab_rows.begin + layout_.local_real_vocab_rows()}, group, comm_s);
  layers_.reserve(size_t(cfg_.n_layers));
  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    layers_.push_back(Layer{
        b.upload(load_vector(f, blk(i, "attn_norm"), hidden)),
        b.upload(load_vector(f, blk(i, "ffn_norm"), hidden)),
        ColumnParallelLinear(b, f, o, hidden, {{blk(i, "attn_q"), nh * hd, q}, {blk(i, "attn_k"), nkv * hd, kv},
                                               {blk(i, "attn_v"), nkv * hd, kv}}),
        RowParallelLinear(b, f, o, blk(i, "attn_output"), hidden, nh * hd, q, group, comm_s),
        ColumnParallelLinear(b, f, o, hidden, {{blk(i, "ffn_gate"), cfg_.intermediate, inter},
                                               {blk(i, "ffn_up"), cfg_.intermediate, inter}}),
        RowParallelLinear(b, f, o, blk(i, "ffn_down"), hidden, cfg_.intermediate, inter, group, comm_s),
    });
    if (progress && i + 1 < cfg_.n_layers) progress(i + 1, cfg_.n_layers, resident_weight_bytes());
  }
  output_norm_ = b.upload(load_vector(f, "output_norm.weight", hidden));
  if (progress) progress(cfg_.n_layers, cfg_.n_layers, resident_weight_bytes());
}

int64_t LlamaModel::resident_weight_bytes() const {
  int64_t n = embd_.n_bytes() + lm_head_.n_bytes() + output_norm_.bytes();
  for (const Layer& l : layers_)
    n += l.qkv.n_bytes() + l.wo.n_bytes() + l.gate_up.n_bytes() + l.down.n_bytes() + l.attn_norm.bytes() +
         l.ffn_norm.bytes();
  return n;
}

int64_t LlamaModel::activation_bytes(int64_t n_tok, int64_t n_out) const {
  const int64_t hidden = cfg_.hidden, hd = cfg_.head_dim, f = sizeof(float);
  const int64_t nh = layout_.local_q_heads(), nkv = layout_.local_kv_heads(), inter = layout_.intermediate.size();
  // x, h, qkv, q, k, v, attn, gate|up, mlp, the logit rows' hidden states (the order of forward())
  int64_t n = n_tok * (2 * hidden + 2 * (nh + 2 * nkv) * hd + nh * hd + 2 * inter + inter) * f + n_out * hidden * f;
  n += n_out * cfg_.vocab * f;  // the logits
  if (!backend_->host_memory()) {  // the step's ids, positions, slots in the backend's memory
    n += n_tok * (2 * int64_t(sizeof(int32_t)) + int64_t(sizeof(int64_t)));
    Backend::StepShape step;  // and the scratch of the backend's own ops
    step.n_tokens = n_tok;
    step.max_features = std::max({hidden, (nh + 2 * nkv) * hd, 2 * inter, layout_.vocab_rows.size()});
    step.n_heads = nh;
    step.n_kv_heads = nkv;
    step.head_dim = hd;
    step.max_context = cfg_.max_context;
    n += backend_->workspace_bytes(step);
  }
  int64_t layer_scratch = 0;  // one scratch per layer object; the layers' are alike, every one is held
  for (const Layer& l : layers_)
    layer_scratch += l.qkv.scratch_bytes(n_tok) + l.wo.scratch_bytes(n_tok) + l.gate_up.scratch_bytes(n_tok) +
                     l.down.scratch_bytes(n_tok);
  return n + layer_scratch + lm_head_.scratch_bytes(n_out);
}

KvPoolShape LlamaModel::kv_shape(int64_t n_blocks, int64_t block_size, KvDType dtype) const {
  return KvPoolShape{cfg_.n_layers, n_blocks, block_size, layout_.local_kv_heads(), cfg_.head_dim, dtype};
}

void LlamaModel::forward(const std::vector<SeqPlan>& seqs, KvPool& pool, std::vector<float>& logits) {
  const auto t_start = Clock::now();
  const int64_t vocab = cfg_.vocab, bs = pool.shape().block_size;
  Backend& b = *backend_;
  b.activate();
  // A pure decode step of <= 128 sequences on a backend with graphs, at tp 1: its bucket's graph.
  const int64_t bucket = single_rank_ && b.supports_graphs() && graphs_enabled_ ? cuda_graph_bucket(seqs) : 0;
  int64_t fixed_ctx = 0;
  if (bucket > 0) {
    int64_t ctx = 1;
    for (const SeqPlan& s : seqs) ctx = std::max(ctx, s.start_pos + 1);
    fixed_ctx = kGraphMinContext;
    while (fixed_ctx < ctx) fixed_ctx *= 2;
  }
  const int64_t n_real_out = stage_step(seqs, bs, bucket);
  const GraphKey key{bucket, fixed_ctx, pool.k(0).blocks};
  if (bucket > 0 && b.allocation_epoch() != graph_epoch_) {  // a buffer moved: every graph may hold stale addresses
    b.drop_graphs();
    graphs_.clear();
  }
  const auto found = bucket > 0 ? graphs_.find(key) : graphs_.end();
  float* out = nullptr;
  if (found != graphs_.end()) {
    b.prepare_attention(attn_seqs_, bs, fixed_ctx);
    b.replay(found->second.graph);
    out = found->second.logits;
    progress_ns_.store(Clock::now().time_since_epoch() / std::chrono::nanoseconds(1), std::memory_order_relaxed);
    // a replay is not split by kind: all of it is in total_s
  } else {
    out = enqueue_forward(step_seqs_, pool, fixed_ctx);
    if (bucket > 0) {  // capture it now that every buffer has its size; this step's logits come from the eager run
      b.synchronize();
      const ForwardTimes before = times_;
      b.prepare_attention(attn_seqs_, bs, fixed_ctx);
      b.begin_capture();
      float* captured = nullptr;
      try {
        captured = enqueue_forward(step_seqs_, pool, fixed_ctx);
      } catch (...) {
        b.abort_capture();
        throw;
      }
      const int64_t graph = b.end_capture();
      times_ = before;
      if (captured != out) throw Error("forward: a buffer moved while a decode graph was captured");
      graphs_[key] = {graph, out};
      graph_epoch_ = b.allocation_epoch();
    }
  }
  logits.resize(size_t(n_real_out * vocab));
  if (b.host_memory()) {
    if (out != logits.data()) std::copy_n(out, n_real_out * vocab, logits.data());
  } else {
    b.copy_to_host(logits.data(), out, n_real_out * vocab * int64_t(sizeof(float)));
  }
  times_.total_s += std::chrono::duration<double>(Clock::now() - t_start).count();
  ++times_.steps;
}

int64_t LlamaModel::stage_step(const std::vector<SeqPlan>& seqs, int64_t bs, int64_t pad_to) {
  const int64_t vocab = cfg_.vocab;
  // Flatten the step: token ids, positions and pool slots of every new token; padding sequences (a graph's
  // bucket above the batch) decode token 0 at position 0 over block 0 and write nothing (slot -1).
  int64_t n_tok = 0, n_out = 0;
  for (const SeqPlan& s : seqs) {
    n_tok += int64_t(s.tokens.size());
    n_out += s.n_logit_rows();
    const int64_t end = s.start_pos + int64_t(s.tokens.size());
    if (int64_t(s.block_table.size()) * bs < end)
      throw Error("forward: block table covers " + std::to_string(s.block_table.size() * bs) + " positions, needs " +
                  std::to_string(end));
  }
  const int64_t n_pad = pad_to > 0 ? pad_to - int64_t(seqs.size()) : 0;
  step_seqs_.assign(seqs.begin(), seqs.end());
  for (int64_t i = 0; i < n_pad; ++i) {
    SeqPlan& p = step_seqs_.emplace_back();
    p.tokens = {0};
    p.start_pos = 0;
    p.block_table = {0};
    p.want_logits = true;
  }
  const int64_t n_all = n_tok + n_pad;
  int32_t* ids = grow(ids_, n_all);
  int32_t* pos = grow(positions_, n_all);
  int64_t* slot = grow(slots_, n_all);
  for (size_t si = 0; si < step_seqs_.size(); ++si) {
    const SeqPlan& s = step_seqs_[si];
    const bool padding = si >= seqs.size();
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t p = s.start_pos + int64_t(i);
      if (s.tokens[i] < 0 || s.tokens[i] >= vocab)
        throw InputError("token id " + std::to_string(s.tokens[i]) + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ")");
      *ids++ = s.tokens[i];
      *pos++ = int32_t(p);
      *slot++ = padding ? -1 : int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs;
    }
  }
  attn_seqs_.clear();
  for (const SeqPlan& s : step_seqs_)
    attn_seqs_.push_back({int64_t(s.tokens.size()), s.start_pos, s.block_table.data()});
  Backend& b = *backend_;
  if (!b.host_memory()) {  // the step's indices to the backend's memory
    int32_t* d_ids = grow_buffer<int32_t>(b, d_ids_, n_all);
    int32_t* d_pos = grow_buffer<int32_t>(b, d_positions_, n_all);
    int64_t* d_slot = grow_buffer<int64_t>(b, d_slots_, n_all);
    b.copy_to_device(d_ids, ids_.data(), n_all * int64_t(sizeof(int32_t)));
    b.copy_to_device(d_pos, positions_.data(), n_all * int64_t(sizeof(int32_t)));
    b.copy_to_device(d_slot, slots_.data(), n_all * int64_t(sizeof(int64_t)));
  }
  return n_out;
}

float* LlamaModel::enqueue_forward(const std::vector<SeqPlan>& seqs, KvPool& pool, int64_t fixed_ctx) {
  // A linear layer's time, its communication (counted in comm_s by the layer) taken out.
  const auto timed_linear = [this](auto&& f) {
    const auto t0 = Clock::now();
    const double comm0 = times_.comm_s;
    f();
    times_.linear_s += std::chrono::duration<double>(Clock::now() - t0).count() - (times_.comm_s - comm0);
  };
  const int64_t hidden = cfg_.hidden, hd = cfg_.head_dim, vocab = cfg_.vocab;
  const int64_t nh = layout_.local_q_heads(), nkv = layout_.local_kv_heads();
  const int64_t inter = layout_.intermediate.size();
  const int64_t qkv_w = (nh + 2 * nkv) * hd;
  int64_t n_tok = 0, n_out = 0;
  for (const SeqPlan& s : seqs) {
    n_tok += int64_t(s.tokens.size());
    n_out += s.n_logit_rows();
  }
  Backend& b = *backend_;
  const int32_t* ids = b.host_memory() ? ids_.data() : d_ids_.as<int32_t>();
  const int32_t* pos = b.host_memory() ? positions_.data() : d_positions_.as<int32_t>();
  const int64_t* slot = b.host_memory() ? slots_.data() : d_slots_.as<int64_t>();

  float* x = grow_buffer<float>(b, x_, n_tok * hidden);
  float* h = grow_buffer<float>(b, h_, n_tok * hidden);
  float* qkv = grow_buffer<float>(b, qkv_, n_tok * qkv_w);
  float* q = grow_buffer<float>(b, q_, n_tok * nh * hd);
  float* k = grow_buffer<float>(b, k_, n_tok * nkv * hd);
  float* v = grow_buffer<float>(b, v_, n_tok * nkv * hd);
  float* attn = grow_buffer<float>(b, attn_, n_tok * nh * hd);
  float* gu = grow_buffer<float>(b, gu_, n_tok * 2 * inter);
  float* mlp = grow_buffer<float>(b, mlp_, n_tok * inter);
  constexpr int64_t kF = sizeof(float);

  embd_.forward(ids, n_tok, x);
  const float scale = 1.0f / std::sqrt(float(hd));

  for (int64_t li = 0; li < cfg_.n_layers; ++li) {
    Layer& L = layers_[size_t(li)];
    // h holds the previous layer's MLP output: its residual add is fused with this layer's first norm.
    if (li == 0)
      b.rmsnorm(x, L.attn_norm.as<float>(), n_tok, hidden, cfg_.rms_eps, h);
    else
      b.add_rmsnorm(x, h, L.attn_norm.as<float>(), n_tok, hidden, cfg_.rms_eps, h);
    timed_linear([&] { L.qkv.forward(h, n_tok, qkv); });
    b.split_qkv_rope(qkv, n_tok, nh, nkv, hd, pos, cfg_.rope_theta, cfg_.rope_style, q, k, v);
    const KvTensorView k_pool = pool.k(li), v_pool = pool.v(li);  // in the pool's dtype (cache.dtype)
    b.write_kv(k, v, n_tok, slot, k_pool, v_pool);
    const auto t_attn = Clock::now();
    b.paged_attention_batch(q, attn_seqs_, nh, k_pool, v_pool, scale, attn, fixed_ctx);
    times_.attention_s += std::chrono::duration<double>(Clock::now() - t_attn).count();
    timed_linear([&] { L.wo.forward(attn, n_tok, h); });
    b.add_rmsnorm(x, h, L.ffn_norm.as<float>(), n_tok, hidden, cfg_.rms_eps, h);
    timed_linear([&] { L.gate_up.forward(h, n_tok, gu); });
    b.silu_mul(gu, n_tok, inter, mlp);
    timed_linear([&] { L.down.forward(mlp, n_tok, h); });
    if (li + 1 == cfg_.n_layers) b.add_inplace(x, h, n_tok * hidden);
    progress_ns_.store(Clock::now().time_since_epoch() / std::chrono::nanoseconds(1), std::memory_order_relaxed);
  }

  // Final norm and lm_head only for the rows that give logits: prompt-logprob rows, then the last token.
  float* last = grow_buffer<float>(b, last_, n_out * hidden);
  int64_t t0 = 0, o = 0;
  for (const SeqPlan& s : seqs) {
    const int64_t n = int64_t(s.tokens.size()), m = int64_t(s.prompt_targets.size());
    b.copy_2d(last + o * hidden, hidden * kF, x + t0 * hidden, hidden * kF, hidden * kF, m);
    o += m;
    if (s.want_logits) b.copy_2d(last + (o++) * hidden, hidden * kF, x + (t0 + n - 1) * hidden, hidden * kF, hidden * kF, 1);
    t0 += n;
  }
  b.rmsnorm(last, output_norm_.as<float>(), n_out, hidden, cfg_.rms_eps, last);
  float* out = grow_buffer<float>(b, logits_, n_out * vocab);
  timed_linear([&] { lm_head_.forward(last, n_out, out); });
  return out;
}

}  // namespace tp
