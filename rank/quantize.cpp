#include "rank/quantize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <regex>
#include <utility>

#include "common/cpu_clock.h"
#include "common/error.h"
#include "kernels/cpu/linear.h"
#include "rank/convert.h"
#include "rank/hf_dir.h"
#include "rank/quant_awq.h"
#include "rank/quant_gptq.h"
#include "rank/quant_smooth.h"
#include "rank/quant_vec.h"

namespace tp {

namespace {

using Vec = std::vector<float>;


// y [n, n_out] = x [n, n_in] · wᵀ, on the CPU GEMM (kernels/cpu linear: oneDNN, the threads of
// cpu::set_num_threads).
Vec matmul(const Vec& x, int64_t n, const Vec& w, int64_t n_out, int64_t n_in) {
  Vec y(static_cast<size_t>(n * n_out));
  if (n == 0) return y;
  const cpu::Weight wt(DType::F32, n_out, n_in, DType::F32, w.data(), n_in * int64_t(sizeof(float)));
  cpu::linear(x.data(), n, wt, y.data());
  return y;
}

Vec rmsnorm(const Vec& x, int64_t n, int64_t d, const Vec& g, float eps) {
  Vec y(x.size());
  for (int64_t t = 0; t < n; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x[size_t(t * d + j)]) * x[size_t(t * d + j)];
    const float r = float(1.0 / std::sqrt(ss / double(d) + eps));
    for (int64_t j = 0; j < d; ++j) y[size_t(t * d + j)] = x[size_t(t * d + j)] * r * g[size_t(j)];
  }
  return y;
}

bool ignored(const std::vector<std::string>& ignore, const std::string& module) {
  for (const std::string& i : ignore) {
    if (i == module) return true;
    if (i.rfind("re:", 0) == 0 && std::regex_search(module, std::regex(i.substr(3)), std::regex_constants::match_continuous))
      return true;
  }
  return false;
}

struct Linear {
  const char* canonical;  // "attn_q"
  const char* hf;         // "self_attn.q_proj"
};
constexpr Linear kQ{"attn_q", "self_attn.q_proj"}, kK{"attn_k", "self_attn.k_proj"}, kV{"attn_v", "self_attn.v_proj"},
    kO{"attn_output", "self_attn.o_proj"}, kGate{"ffn_gate", "mlp.gate_proj"}, kUp{"ffn_up", "mlp.up_proj"},
    kDown{"ffn_down", "mlp.down_proj"};

class Quantizer {
 public:
  Quantizer(const ModelFile& m, const QuantizeOptions& o)
      : m_(m), o_(o), c_(m.config()), spec_(scheme_weight_spec(o.scheme, o.group_size)),
        w_(o.scheme, spec_, o.act_order, o.ignore, o.dtype) {}

  void run(const std::string& out_dir);

 private:
  Vec load(const std::string& name, std::vector<int64_t> shape, int64_t qk_heads = 0) {
    CpuTimer timer(&cpu_.load);
    const TensorView& t = m_.require(name, shape);
    const int64_t row = shape.back(), rows = t.n_elems() / row;
    const int64_t rb = dtype_row_bytes(t.dtype, row);
    Vec out(static_cast<size_t>(rows * row));
    const bool unpermute = qk_heads > 0 && c_.rope_style == RopeStyle::Interleaved;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = unpermute ? gguf_to_hf_row(r, rows / qk_heads) : r;
      dequantize_row(t.dtype, t.data + src * rb, out.data() + r * row, row);
    }
    return out;
  }
  std::string module(int64_t layer, const Linear& l) const {
    return "model.layers." + std::to_string(layer) + "." + l.hf;
  }
  // Quantizes w [n_out, n_in] of module `mod` (with Hessian h when GPTQ), writes it, returns W'.
  // group_amax: fused_amax() of the fused group mod belongs to (0: none).
  // keep: the quantized weight is returned there and NOT written (the caller writes it after changing it).
  Vec quantize(const std::string& mod, const Vec& w, int64_t n_out, int64_t n_in, const std::vector<double>* h,
               float group_amax = 0, QuantizedLinear* keep = nullptr) {
    if (ignored(o_.ignore, mod)) {
      w_.add_dense(mod + ".weight", {n_out, n_in}, w.data());
      return w;
    }
    ++n_quantized_;
    QuantizedLinear q;
    if (h) {
      GptqOptions go = gptq_options();
      go.nvfp4_amax = group_amax;
      q = quantize_gptq(spec_, w.data(), n_out, n_in, *h, go);
    } else {
      CpuTimer timer(&cpu_.rtn);
      q = quantize_rtn(spec_, w.data(), n_out, n_in, group_amax);
    }
    Vec d = q.dequantize();
    if (keep)
      *keep = std::move(q);
    else
      w_.add_quantized(mod, q);
    return d;
  }
  // NVFP4: max|W| over the quantized (not ignored) weights of a fused group — q|k|v or gate|up, which
  // compressed-tensors gives one global scale (rank/quant_rtn.h); 0 for every other kind.
  float fused_amax(int64_t layer, std::initializer_list<std::pair<const Linear*, const Vec*>> parts) const {
    if (spec_.kind != QuantKind::Nvfp4) return 0;
    float m = 0;
    for (const auto& [l, w] : parts)
      if (!ignored(o_.ignore, module(layer, *l)))
        for (float v : *w) m = std::max(m, std::fabs(v));
    return m;
  }
  bool gptq() const { return o_.method == QuantMethod::Gptq || o_.method == QuantMethod::SmoothQuantGptq; }
  GptqOptions gptq_options() {
    GptqOptions go;
    go.percdamp = o_.percdamp;
    go.act_order = o_.act_order;
    go.static_groups = o_.static_groups;
    // Quantize with the scales as a BF16 output stores them at 8 bits (int8 per channel, FP8), where a scale's BF16
    // rounding moves a weight by up to 2^-9 × 128 = 0.25 of a step. At 3–4 bits that is ≤ 0.03 of a step and the
    // end-to-end figures only moved within GPTQ's run-to-run spread (w4a16-asym −1%, w4a16 +0.4%, w3a16 +12% in
    // perplexity; bench/results/gptq-scales-20261202.md), so those outputs stay as they were.
    go.bf16_scales = o_.dtype == DType::BF16 && spec_.bits == 8;
    go.times = &gptq_cpu_;
    return go;
  }
  bool calibrated() const { return o_.method != QuantMethod::Rtn; }

  // Smoothing (AWQ / SmoothQuant) of the linears `ws` reading x [n, n_in]: scales their columns, divides the
  // preceding norm `g` and x by s.
  void smooth(std::vector<Vec*> ws, const std::vector<int64_t>& n_outs, Vec& x, int64_t n, int64_t n_in, Vec& g) {
    CpuTimer timer(&cpu_.smooth);
    std::vector<LinearRef> refs;
    for (size_t i = 0; i < ws.size(); ++i) refs.push_back({ws[i]->data(), n_outs[i]});
    std::vector<float> s;
    if (o_.method == QuantMethod::Awq) {
      s = awq_search(spec_, refs, x.data(), n, n_in).scales;
    } else if (o_.method == QuantMethod::SmoothQuantGptq) {
      ActAbsMax am(n_in);
      am.add(x.data(), n);
      s = smoothquant_scales(o_.sq_alpha, refs, am.values());
    } else {
      return;
    }
    for (size_t i = 0; i < ws.size(); ++i) apply_input_scales(ws[i]->data(), n_outs[i], n_in, s);
    fold_into_previous(g.data(), n_in, 1, s);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < n_in; ++j) x[size_t(t * n_in + j)] /= s[size_t(j)];
  }

  std::vector<double> hessian(const Vec& x, int64_t n, int64_t n_in) {
    CpuTimer timer(&cpu_.hessian);
    GptqHessian h(n_in);
    h.add(x.data(), std::min(n, n_calib_));
    return h.hessian();
  }

  // Causal attention of q [n, nh·hd], k/v [n, nkv·hd] (rope applied here) over sequences of seq_len; the
  // tokens split over the cpu::num_threads() threads.
  Vec attention(Vec q, Vec k, const Vec& v, int64_t n) const {
    const int64_t nh = c_.n_heads, nkv = c_.n_kv_heads, hd = c_.head_dim, half = hd / 2;
    const int64_t n_pos = std::min(n, o_.seq_len);
    Vec cs(static_cast<size_t>(n_pos * half)), sn(cs.size());  // [position, half]
    for (int64_t pos = 0; pos < n_pos; ++pos)
      for (int64_t i = 0; i < half; ++i) {
        const double th = double(pos) * std::pow(double(c_.rope_theta), -2.0 * double(i) / double(hd));
        cs[size_t(pos * half + i)] = float(std::cos(th));
        sn[size_t(pos * half + i)] = float(std::sin(th));
      }
    const int n_threads = cpu::num_threads();
    auto rope = [&](Vec& a, int64_t heads) {
#pragma omp parallel for schedule(static) num_threads(n_threads)
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = t % o_.seq_len;
        for (int64_t h = 0; h < heads; ++h) {
          float* p = a.data() + (t * heads + h) * hd;
          for (int64_t i = 0; i < half; ++i) {
            const float c = cs[size_t(pos * half + i)], s = sn[size_t(pos * half + i)];
            const float a0 = p[i], a1 = p[i + half];
            p[i] = a0 * c - a1 * s;
            p[i + half] = a0 * s + a1 * c;
          }
        }
      }
    };
    rope(q, nh);
    rope(k, nkv);
    Vec out(static_cast<size_t>(n * nh * hd), 0.0f);
    const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel num_threads(n_threads)
    {
      Vec sc;
#pragma omp for schedule(dynamic, 16)
      for (int64_t t = 0; t < n; ++t) {
        const int64_t t0 = t - t % o_.seq_len;
        sc.resize(size_t(t - t0 + 1));
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t kh = h / (nh / nkv);
          const float* qp = q.data() + (t * nh + h) * hd;
          float mx = -INFINITY;
          for (int64_t u = t0; u <= t; ++u) {
            sc[size_t(u - t0)] = quant_vec::dot8_f32(qp, k.data() + (u * nkv + kh) * hd, hd) * scale;
            mx = std::max(mx, sc[size_t(u - t0)]);
          }
          double sum = 0;
          for (float& s : sc) sum += (s = std::exp(s - mx));
          float* op = out.data() + (t * nh + h) * hd;
          for (int64_t u = t0; u <= t; ++u) {
            const float p = float(sc[size_t(u - t0)] / sum);
            quant_vec::add_scaled(op, v.data() + (u * nkv + kh) * hd, p, hd);
          }
        }
      }
    }
    return out;
  }

  void layer(int64_t i, Vec& x, int64_t n);

  // Diagnostics (TPSERVE_QUANT_HOLDOUT=N: the last N calibration rows are not calibrated on): the relative
  // output error ‖X·(W'−W)ᵀ‖² / ‖X·Wᵀ‖² of W' and of RTN's, on the calibrated rows and on the held-out ones.
  void report(const std::string& mod, const Vec& x, int64_t n, int64_t n_in, const Vec& w, const Vec& wq,
              int64_t n_out) const {
    if (n_calib_ == n || ignored(o_.ignore, mod)) return;
    const Vec rtn = quantize_rtn(spec_, w.data(), n_out, n_in).dequantize();
    const Vec y = matmul(x, n, w, n_out, n_in), yq = matmul(x, n, wq, n_out, n_in), yr = matmul(x, n, rtn, n_out, n_in);
    double e[2][2] = {{0, 0}, {0, 0}}, den[2] = {0, 0};
    for (int64_t t = 0; t < n; ++t) {
      const int part = t < n_calib_ ? 0 : 1;
      for (int64_t o = 0; o < n_out; ++o) {
        const size_t k = size_t(t * n_out + o);
        den[part] += double(y[k]) * y[k];
        e[part][0] += (double(yq[k]) - y[k]) * (double(yq[k]) - y[k]);
        e[part][1] += (double(yr[k]) - y[k]) * (double(yr[k]) - y[k]);
      }
    }
    std::fprintf(stderr, "holdout %-34s calib: method %.4g rtn %.4g (ratio %.3f)  held-out: method %.4g rtn %.4g (ratio %.3f)\n",
                 mod.c_str(), e[0][0] / den[0], e[0][1] / den[0], e[0][0] / e[0][1], e[1][0] / den[1], e[1][1] / den[1],
                 e[1][0] / e[1][1]);
  }

  const ModelFile& m_;
  const QuantizeOptions& o_;
  const ModelConfig& c_;
  QuantSpec spec_;
  CtWriter w_;
  // CPU seconds (all threads) by phase, for the progress lines; what is left of a layer's CPU seconds is the
  // calibration forward (norms, products, attention, SiLU), dequantization and writing.
  struct {
    double load = 0, hessian = 0, smooth = 0, rtn = 0;
  } cpu_;
  GptqTimes gptq_cpu_;
  int64_t n_quantized_ = 0;
  int64_t n_calib_ = 0;  // calibration rows the Hessians use (the rest: TPSERVE_QUANT_HOLDOUT diagnostics)
};

void Quantizer::layer(int64_t i, Vec& x, int64_t n) {
  const int64_t H = c_.hidden, I = c_.intermediate, nh = c_.n_heads, nkv = c_.n_kv_heads, hd = c_.head_dim;
  const int64_t nq = nh * hd, nk = nkv * hd;
  const std::string b = "blk." + std::to_string(i) + ".";
  const std::string hfb = "model.layers." + std::to_string(i) + ".";
  Vec attn_norm = load(b + "attn_norm.weight", {H}), ffn_norm = load(b + "ffn_norm.weight", {H});
  Vec wq = load(b + "attn_q.weight", {nq, H}, nh), wk = load(b + "attn_k.weight", {nk, H}, nkv),
      wv = load(b + "attn_v.weight", {nk, H});
  Vec h;
  if (calibrated()) {
    h = rmsnorm(x, n, H, attn_norm, c_.rms_eps);
    smooth({&wq, &wk, &wv}, {nq, nk, nk}, h, n, H, attn_norm);
  }
  std::vector<double> hs;
  if (gptq()) hs = hessian(h, n, H);
  const std::vector<double>* hp = gptq() ? &hs : nullptr;
  const float qkv_amax = fused_amax(i, {{&kQ, &wq}, {&kK, &wk}, {&kV, &wv}});
  const Vec q = quantize(module(i, kQ), wq, nq, H, hp, qkv_amax);
  const Vec k = quantize(module(i, kK), wk, nk, H, hp, qkv_amax);
  QuantizedLinear vq;
  Vec v = quantize(module(i, kV), wv, nk, H, hp, qkv_amax, &vq);
  report(module(i, kQ), h, n, H, wq, q, nq);
  report(module(i, kK), h, n, H, wk, k, nk);
  report(module(i, kV), h, n, H, wv, v, nk);
  wq.clear(), wk.clear();
  Vec wo = load(b + "attn_output.weight", {H, nq});
  Vec a;
  if (calibrated()) {
    a = attention(matmul(h, n, q, nq, H), matmul(h, n, k, nk, H), matmul(h, n, v, nk, H), n);
    // AWQ of o folds into v's rows: only when they line up (n_heads = n_kv_heads) and v's row scales can take it.
    if (o_.method == QuantMethod::Awq && nh == nkv && !vq.q.empty() && vq.g_idx.empty()) {
      const std::vector<float> s = awq_search(spec_, {{wo.data(), H}}, a.data(), n, nq).scales;
      apply_input_scales(wo.data(), H, nq, s);
      const int64_t ng = vq.n_groups();
      for (int64_t r = 0; r < nk; ++r)
        for (int64_t g = 0; g < ng; ++g) vq.scales[size_t(r * ng + g)] /= s[size_t(r)];
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < nq; ++j) a[size_t(t * nq + j)] /= s[size_t(j)];
    }
  }
  if (!vq.q.empty() || !vq.codes.empty()) w_.add_quantized(module(i, kV), vq);
  w_.add_dense(hfb + "input_layernorm.weight", {H}, attn_norm.data());
  if (gptq()) hs = hessian(a, n, nq);
  const Vec o = quantize(module(i, kO), wo, H, nq, hp);
  report(module(i, kO), a, n, nq, wo, o, H);
  wo.clear();
  if (calibrated()) {
    const Vec y = matmul(a, n, o, H, nq);
    for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
  }
  Vec wg = load(b + "ffn_gate.weight", {I, H}), wu = load(b + "ffn_up.weight", {I, H});
  if (calibrated()) {
    h = rmsnorm(x, n, H, ffn_norm, c_.rms_eps);
    smooth({&wg, &wu}, {I, I}, h, n, H, ffn_norm);
  }
  w_.add_dense(hfb + "post_attention_layernorm.weight", {H}, ffn_norm.data());
  if (gptq()) hs = hessian(h, n, H);
  const float gate_up_amax = fused_amax(i, {{&kGate, &wg}, {&kUp, &wu}});
  const Vec g = quantize(module(i, kGate), wg, I, H, hp, gate_up_amax);
  report(module(i, kGate), h, n, H, wg, g, I);
  QuantizedLinear uq;
  // up is written after down's AWQ scales are folded into its row scales.
  const bool up_ignored = ignored(o_.ignore, module(i, kUp));
  Vec u;
  if (up_ignored) {
    u = wu;
  } else if (gptq()) {
    GptqOptions go = gptq_options();
    go.nvfp4_amax = gate_up_amax;
    uq = quantize_gptq(spec_, wu.data(), I, H, hs, go);
    u = uq.dequantize();
  } else {
    CpuTimer timer(&cpu_.rtn);
    uq = quantize_rtn(spec_, wu.data(), I, H, gate_up_amax);
    u = uq.dequantize();
  }
  Vec wd = load(b + "ffn_down.weight", {H, I});
  Vec mlp;
  if (calibrated()) {
    const Vec gg = matmul(h, n, g, I, H), uu = matmul(h, n, u, I, H);
    mlp.resize(gg.size());
    for (size_t j = 0; j < gg.size(); ++j) mlp[j] = gg[j] / (1.0f + std::exp(-gg[j])) * uu[j];
    const bool row_scaled = up_ignored || spec_.kind == QuantKind::Int || spec_.kind == QuantKind::Fp8;
    if (o_.method == QuantMethod::Awq && row_scaled) {
      const std::vector<float> s = awq_search(spec_, {{wd.data(), H}}, mlp.data(), n, I).scales;
      apply_input_scales(wd.data(), H, I, s);
      if (up_ignored) {
        fold_into_previous(u.data(), I, H, s);
      } else {
        const int64_t ng = uq.n_groups();
        for (int64_t r = 0; r < I; ++r)
          for (int64_t gi = 0; gi < ng; ++gi) uq.scales[size_t(r * ng + gi)] /= s[size_t(r)];
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < I; ++j) mlp[size_t(t * I + j)] /= s[size_t(j)];
    }
  }
  if (up_ignored) {
    w_.add_dense(module(i, kUp) + ".weight", {I, H}, u.data());
  } else {
    ++n_quantized_;
    w_.add_quantized(module(i, kUp), uq);
  }
  if (gptq()) hs = hessian(mlp, n, I);
  const Vec d = quantize(module(i, kDown), wd, H, I, hp);
  report(module(i, kDown), mlp, n, I, wd, d, H);
  if (calibrated()) {
    const Vec y = matmul(mlp, n, d, H, I);
    for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
  }
}

void Quantizer::run(const std::string& out_dir) {
  const int64_t H = c_.hidden, I = c_.intermediate, nq = c_.n_heads * c_.head_dim;
  if (m_.quantization())
    throw InputError(m_.path() + ": already quantized (compressed-tensors); quantize an unquantized model");
  for (auto [n_in, what] : {std::pair<int64_t, const char*>{H, "q/k/v/gate/up_proj"}, {nq, "o_proj"}, {I, "down_proj"}})
    check_quant_spec(spec_, n_in, std::string("") + what);
  if (o_.act_order != ActOrder::None && !gptq()) throw UsageError("--act-order / --act-order-group need --method gptq or smoothquant+gptq");
  if (o_.scheme == QuantScheme::Fp8Block && o_.method != QuantMethod::Rtn)
    throw UsageError("fp8-block is quantized by round to nearest only (--method rtn, as llm-compressor's FP8_BLOCK)");
  if (o_.method == QuantMethod::SmoothQuantGptq && o_.scheme != QuantScheme::W8A8Int8 && o_.scheme != QuantScheme::Fp8Dynamic)
    throw UsageError("smoothquant+gptq is for schemes that quantize activations (w8a8-int8, fp8-dynamic)");
  const int64_t n = int64_t(o_.calib_tokens.size());
  n_calib_ = n;
  if (const char* e = std::getenv("TPSERVE_QUANT_HOLDOUT")) n_calib_ = std::clamp<int64_t>(n - std::atoll(e), 1, n);
  if (calibrated() && n == 0) throw UsageError("--method needs calibration tokens (--calib FILE)");
  // Embedding rows of the calibration tokens.
  Vec x;
  const TensorView& emb = m_.require("token_embd.weight", {c_.vocab, H});
  if (calibrated()) {
    x.resize(size_t(n * H));
    const int64_t rb = dtype_row_bytes(emb.dtype, H);
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = o_.calib_tokens[size_t(t)];
      if (id < 0 || id >= c_.vocab) throw InputError("calibration token id " + std::to_string(id) + " out of the vocabulary");
      dequantize_row(emb.dtype, emb.data + id * rb, x.data() + t * H, H);
    }
  }
  {
    Vec e = load("token_embd.weight", {c_.vocab, H});
    w_.add_dense("model.embed_tokens.weight", {c_.vocab, H}, e.data());
  }
  const double cpu0 = process_cpu_seconds();
  for (int64_t i = 0; i < c_.n_layers; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    layer(i, x, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o_.progress) {
      const int64_t done = (i + 1) * 20 / c_.n_layers;
      char buf[256];
      std::snprintf(buf, sizeof buf, "quantize [%s%s] layer %lld/%lld: %lld linears quantized, %.1f s (%.1f CPU s)",
                    std::string(size_t(done), '#').c_str(), std::string(size_t(20 - done), '.').c_str(),
                    (long long)(i + 1), (long long)c_.n_layers, (long long)n_quantized_, s, process_cpu_seconds() - c0);
      o_.progress(buf);
    }
  }
  if (o_.progress) {
    const double total = process_cpu_seconds() - cpu0;
    const double rest = total - cpu_.load - cpu_.hessian - cpu_.smooth - cpu_.rtn - gptq_cpu_.factor - gptq_cpu_.columns;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "quantize: layers %.1f CPU s = Hessians %.1f + GPTQ factor %.1f + GPTQ columns %.1f + RTN %.1f + "
                  "smoothing %.1f + loading %.1f + forward/dequantize/write %.1f",
                  total, cpu_.hessian, gptq_cpu_.factor, gptq_cpu_.columns, cpu_.rtn, cpu_.smooth, cpu_.load, rest);
    o_.progress(buf);
  }
  const Vec out_norm = load("output_norm.weight", {H});
  w_.add_dense("model.norm.weight", {H}, out_norm.data());
  // The lm_head: dense where --ignore names it (the default, as llm-compressor's recipes); else quantized with the
  // scheme — by GPTQ (gptq, smoothquant+gptq) on the final norm's output of the calibration tokens, else by RTN (awq:
  // no smoothing, as llm-compressor's AWQ maps none onto it) — and a tied model is untied: the embedding stays dense,
  // the lm_head its own quantized tensor (as llm-compressor writes a targeted lm_head, and as vLLM loads it).
  ModelConfig cfg = c_;
  cfg.rope_style = RopeStyle::Neox;
  const bool head_quantized = !ignored(o_.ignore, "lm_head");
  cfg.tied_embeddings = m_.find("output.weight") == nullptr && !head_quantized;
  if (!cfg.tied_embeddings) {
    const Vec l = load(m_.find("output.weight") ? "output.weight" : "token_embd.weight", {c_.vocab, H});
    std::vector<double> hs;
    if (head_quantized && gptq()) hs = hessian(rmsnorm(x, n, H, out_norm, c_.rms_eps), n, H);
    quantize("lm_head", l, c_.vocab, H, hs.empty() ? nullptr : &hs);
  }
  TokenizerData tok;
  try {
    tok = m_.tokenizer();
  } catch (const InputError&) {
  }
  w_.finish(out_dir, cfg, tok);
}

}  // namespace

QuantMethod parse_quant_method(std::string_view name) {
  if (name == "rtn") return QuantMethod::Rtn;
  if (name == "gptq") return QuantMethod::Gptq;
  if (name == "awq") return QuantMethod::Awq;
  if (name == "smoothquant+gptq") return QuantMethod::SmoothQuantGptq;
  throw UsageError("unknown quantization method '" + std::string(name) + "' (valid: rtn, gptq, awq, smoothquant+gptq)");
}

void quantize_model(const ModelFile& model, const std::string& out_dir, const QuantizeOptions& options) {
  Quantizer q(model, options);
  q.run(out_dir);
}

}  // namespace tp
