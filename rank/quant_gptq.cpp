#include "rank/quant_gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/cpu_clock.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "kernels/cpu/linear.h"
#include "rank/quant_vec.h"

namespace tp {

void GptqHessian::add(const float* x, int64_t n_tok) {
  // Σ x xᵀ of each chunk of rows as F32 GEMMs (kernels/cpu linear: y = A · Bᵀ with A, B row ranges of
  // Xᵀ [n_in, chunk]), added to the double sums; F32 accumulates at most kChunk products per element. Only the
  // upper triangle is needed (mirrored in hessian()): one GEMM per block of kCols columns [c0, c1), over the rows
  // [0, c1) — about 55% of the full product's work.
  constexpr int64_t kChunk = 512, kCols = 128;
  const int64_t n = n_in_;
  std::vector<float> xt, y(static_cast<size_t>(n * std::min(n, kCols)));
  for (int64_t t0 = 0; t0 < n_tok; t0 += kChunk) {
    const int64_t c = std::min(kChunk, n_tok - t0);
    xt.resize(size_t(n * c));
    for (int64_t t = 0; t < c; ++t)
      for (int64_t j = 0; j < n; ++j) xt[size_t(j * c + t)] = x[(t0 + t) * n + j];
    for (int64_t c0 = 0; c0 < n; c0 += kCols) {
      const int64_t c1 = std::min(n, c0 + kCols), w = c1 - c0;
      const cpu::Weight b(DType::F32, w, c, DType::F32, xt.data() + c0 * c, c * int64_t(sizeof(float)));
      cpu::linear(xt.data(), c1, b, y.data());  // y [c1, w]: y[i][j - c0] = Σ_t Xᵀ[i][t] Xᵀ[j][t]
      for (int64_t i = 0; i < c1; ++i) {
        double* hr = h_.data() + i * n;
        const float* yr = y.data() + i * w;
        for (int64_t j = std::max(i, c0); j < c1; ++j) hr[j] += yr[j - c0];
      }
    }
  }
  n_rows_ += n_tok;
}

std::vector<double> GptqHessian::hessian() const {
  const int64_t n = n_in_;
  std::vector<double> h(static_cast<size_t>(n * n));
  const double f = n_rows_ > 0 ? 2.0 / double(n_rows_) : 0.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) h[size_t(i * n + j)] = h[size_t(j * n + i)] = f * h_[size_t(i * n + j)];
  return h;
}

namespace {

using quant_vec::dot4;

// Rows (Cholesky) or columns (inverse) handled together, so that each row of the matrix is read once per batch
// from memory, not once per step (n = 1536: the matrix, 19 MB, does not fit the caches).
constexpr int64_t kBatch = 32;

}  // namespace

// Step j (in order): L_jj = sqrt(a_jj − Σ_{k<j} L_jk²), L_ij = (a_ij − Σ_{k<j} L_ik L_jk) / L_jj for i > j, every
// sum a dot4 (fixed order). Batched: the steps j0 .. j0+31 run first on the batch's own rows, then each row below
// takes those 32 steps in turn, its partial sums over the columns before j0 made together (dot4_prefix) — the
// same sums, so the same bits as step by step.
bool cholesky_lower(std::vector<double>& a, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += kBatch) {
    const int64_t j1 = std::min(n, j0 + kBatch);
    const int m = int(j1 - j0);
    for (int64_t j = j0; j < j1; ++j) {
      double* aj = a.data() + j * n;
      double d = aj[j] - dot4(aj, aj, j);
      if (!(d > 0)) return false;
      d = std::sqrt(d);
      aj[j] = d;
      for (int64_t i = j + 1; i < j1; ++i) {
        double* ai = a.data() + i * n;
        ai[j] = (ai[j] - dot4(ai, aj, j)) / d;
      }
    }
    const double* rows[kBatch];
    for (int k = 0; k < m; ++k) rows[k] = a.data() + (j0 + k) * n;
#pragma omp parallel for schedule(static) num_threads(cpu::num_threads()) if ((n - j1) * j0 > (1 << 18))
    for (int64_t i = j1; i < n; ++i) {
      double* ai = a.data() + i * n;
      double s[kBatch][4] = {};
      quant_vec::dot4_prefix(m, ai, rows, j0, s);
      for (int64_t j = j0; j < j1; ++j) {
        const double* aj = rows[j - j0];
        ai[j] = (ai[j] - quant_vec::dot4_finish(s[j - j0], ai, aj, j0, j)) / aj[j];
      }
    }
  }
  for (int64_t j = 0; j < n; ++j) std::fill(a.begin() + j * n + j + 1, a.begin() + (j + 1) * n, 0.0);
  return true;
}

namespace {

// U with H⁻¹ = UᵀU, from H (damped, positive definite), with one Cholesky and one triangular inverse: with J
// the index reversal, J·H·J = L Lᵀ gives H⁻¹ = (J L⁻¹ J)ᵀ (J L⁻¹ J), and J L⁻¹ J is upper triangular with a
// positive diagonal, so it is U. Returns false when H is not positive definite.
bool inverse_upper_cholesky(const std::vector<double>& h, int64_t n, std::vector<double>& u) {
  std::vector<double> r(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) r[size_t(i * n + j)] = h[size_t((n - 1 - i) * n + (n - 1 - j))];
  if (!cholesky_lower(r, n)) return false;
  // Linv = L⁻¹ (lower), column j in a contiguous buffer: Linv_ij = (δ_ij − Σ_{j ≤ k < i} L_ik Linv_kj) / L_ii for
  // i ≥ j, the sum a dot4. The columns are independent: a batch of 32 goes down the rows together (row i of L read
  // once for the 32 sums, which run in lockstep), and threads share the batches.
  std::vector<double> li(static_cast<size_t>(n * n), 0.0);
  const int64_t n_batches = (n + kBatch - 1) / kBatch;
#pragma omp parallel num_threads(cpu::num_threads())
  {
    std::vector<double> cols(static_cast<size_t>(kBatch * n));
    const double* pa[kBatch];
    const double* pb[kBatch];
    int64_t len[kBatch];
    double dots[kBatch];
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < n_batches; ++b) {
      const int64_t j0 = b * kBatch, j1 = std::min(n, j0 + kBatch);
      for (int64_t i = j0; i < n; ++i) {
        const double* ri = r.data() + i * n;
        const int64_t je = std::min(j1, i + 1);
        const int m = int(je - j0);
        for (int k = 0; k < m; ++k) {
          const int64_t j = j0 + k;
          pa[k] = ri + j;
          pb[k] = cols.data() + k * n + j;
          len[k] = i - j;
        }
        quant_vec::dot4_many(m, pa, pb, len, dots);
        for (int k = 0; k < m; ++k) cols[size_t(k * n + i)] = ((i == j0 + k ? 1.0 : 0.0) - dots[k]) / ri[i];
      }
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = j; i < n; ++i) li[size_t(i * n + j)] = cols[size_t((j - j0) * n + i)];
    }
  }
  u.assign(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) u[size_t(i * n + j)] = li[size_t((n - 1 - i) * n + (n - 1 - j))];
  return true;
}

}  // namespace

QuantizedLinear quantize_gptq(const QuantSpec& s, const float* w_in, int64_t n_out, int64_t n_in,
                              const std::vector<double>& h_in, const GptqOptions& o) {
  check_quant_spec(s, n_in, "weight");
  if (s.kind == QuantKind::Fp8 && s.group_size > 0)
    throw InputError("GPTQ of FP8 with block scales is not supported (round to nearest: --method rtn)");
  const bool act_order = o.act_order != ActOrder::None;
  const bool static_groups = o.static_groups || o.act_order == ActOrder::Weight;
  // Act-order "group" (a g_idx per input column) exists only for integer weights; "weight" (static groups, the
  // order of the visit only) applies to every format.
  if (o.act_order == ActOrder::Group && s.kind != QuantKind::Int)
    throw InputError("GPTQ act-order \"group\" needs an integer scheme");
  if (int64_t(h_in.size()) != n_in * n_in) throw Error("quantize_gptq: Hessian size does not match the weight");
  const int64_t n = n_in;
  // Column-major working copy: wc[j] = column j [n_out] (in visiting order); w0: the original columns
  // (static group params).
  std::vector<double> h = h_in;
  std::vector<float> wc(static_cast<size_t>(n * n_out));
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t j = 0; j < n; ++j) wc[size_t(j * n_out + r)] = w_in[r * n + j];
  const std::vector<float> w0 = static_groups ? wc : std::vector<float>{};
  for (int64_t j = 0; j < n; ++j)
    if (h[size_t(j * n + j)] == 0) {
      h[size_t(j * n + j)] = 1;
      std::fill(wc.begin() + j * n_out, wc.begin() + (j + 1) * n_out, 0.0f);
    }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h[size_t(a * n + a)] > h[size_t(b * n + b)]; });
    std::vector<double> hp(static_cast<size_t>(n * n));
    std::vector<float> wp(wc.size());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) hp[size_t(i * n + j)] = h[size_t(perm[size_t(i)] * n + perm[size_t(j)])];
      std::copy_n(wc.begin() + perm[size_t(i)] * n_out, n_out, wp.begin() + i * n_out);
    }
    h.swap(hp);
    wc.swap(wp);
  }
  double mean_diag = 0;
  for (int64_t j = 0; j < n; ++j) mean_diag += h[size_t(j * n + j)];
  mean_diag /= double(n);
  std::vector<double> u;
  double damp = o.percdamp * mean_diag;
  {
    CpuTimer factor_timer(o.times ? &o.times->factor : nullptr);
    for (int attempt = 0;; ++attempt) {
      std::vector<double> hd = h;
      for (int64_t j = 0; j < n; ++j) hd[size_t(j * n + j)] += damp;
      if (inverse_upper_cholesky(hd, n, u)) break;
      if (attempt == 3) throw Error("GPTQ: the Hessian is not positive definite even with damping " + std::to_string(damp));
      damp *= 10;
    }
  }
  CpuTimer columns_timer(o.times ? &o.times->columns : nullptr);

  // Output, in visiting order first.
  QuantizedLinear ql;
  ql.spec = s;
  ql.n_out = n_out;
  ql.n_in = n_in;
  const bool is_int = s.kind == QuantKind::Int;
  const int64_t g = is_int ? s.group(n) : s.kind == QuantKind::Fp8 ? n : s.kind == QuantKind::Mxfp4 ? 32 : 16;
  const int64_t ng = n / g;
  std::vector<int8_t> qv(static_cast<size_t>(n * n_out));          // Int: q, column-major, visiting order
  std::vector<uint8_t> codes(static_cast<size_t>(n * n_out));      // others
  std::vector<float> scales(static_cast<size_t>(n_out * ng));
  std::vector<int8_t> zeros(s.symmetric || !is_int ? 0 : size_t(n_out * ng));
  std::vector<uint8_t> scale_bytes(is_int || s.kind == QuantKind::Fp8 ? 0 : size_t(n_out * ng));
  if (s.kind == QuantKind::Nvfp4) {
    float amax = o.nvfp4_amax;
    for (float v : wc) amax = std::max(amax, std::fabs(v));
    ql.global_scale = nvfp4_global_scale(amax);
  }
  // Params of group gi of row r: params[r * ng + gi] (Int), step[r * ng + gi] (others: w' = code value · step).
  std::vector<float> step(static_cast<size_t>(n_out * ng));
  std::vector<IntParams> params(static_cast<size_t>(n_out * ng));
  std::vector<float> gbuf(static_cast<size_t>(g));
  // Group gi's params from the g columns of `src` (column-major) starting at column c0.
  auto set_group = [&](int64_t gi, const std::vector<float>& src, int64_t c0) {
    for (int64_t r = 0; r < n_out; ++r) {
      for (int64_t k = 0; k < g; ++k) gbuf[size_t(k)] = src[size_t((c0 + k) * n_out + r)];
      const size_t rg = size_t(r * ng + gi);
      if (is_int) {
        params[rg] = int_params(s, gbuf.data(), g, o.bf16_scales);
        scales[rg] = params[rg].scale;
        if (!zeros.empty()) zeros[rg] = int8_t(params[rg].zero);
        continue;
      }
      float amax = 0;
      for (float v : gbuf) amax = std::max(amax, std::fabs(v));
      if (s.kind == QuantKind::Fp8) {
        step[rg] = amax > 0 ? amax / kFp8E4M3Max : 1.0f;
        if (o.bf16_scales) step[rg] = bf16_to_f32(f32_to_bf16(step[rg]));
        scales[rg] = step[rg];
      } else if (s.kind == QuantKind::Nvfp4) {
        const uint8_t s8 = f32_to_fp8_e4m3(amax / kE2M1Max * ql.global_scale);
        scale_bytes[rg] = s8;
        step[rg] = fp8_e4m3_to_f32(s8) / ql.global_scale;
      } else {
        const uint8_t e = mx_exponent_byte(amax);
        scale_bytes[rg] = e;
        step[rg] = e8m0_to_f32(e);
      }
    }
  };
  if (static_groups)
    for (int64_t gi = 0; gi < ng; ++gi) set_group(gi, w0, gi * g);
  // The group of visiting column c: with Weight the groups are the original columns'.
  auto group_of = [&](int64_t c) { return o.act_order == ActOrder::Weight ? perm[size_t(c)] / g : c / g; };
  // Quantizes value v of row r at visiting column c; returns the dequantized value.
  auto quant = [&](int64_t r, int64_t c, float v) -> float {
    const size_t rg = size_t(r * ng + group_of(c));
    if (is_int) {
      const int q = int_quant(s, params[rg], v);
      qv[size_t(c * n_out + r)] = int8_t(q);
      return int_dequant(params[rg], q);
    }
    const float st = step[rg];
    if (s.kind == QuantKind::Fp8) {
      const uint8_t code = f32_to_fp8_e4m3(v / st);
      codes[size_t(c * n_out + r)] = code;
      return fp8_e4m3_to_f32(code) * st;
    }
    const uint8_t code = st > 0 ? f32_to_e2m1(v / st) : 0;
    codes[size_t(c * n_out + r)] = code;
    return e2m1_to_f32(code) * st;
  };

  std::vector<float> err(static_cast<size_t>(o.block * n_out));
  const int n_threads = cpu::num_threads();
  for (int64_t i1 = 0; i1 < n; i1 += o.block) {
    const int64_t i2 = std::min(i1 + o.block, n), count = i2 - i1;
    for (int64_t i = i1; i < i2; ++i) {
      if (!static_groups && i % g == 0) set_group(i / g, wc, i);
      float* col = wc.data() + i * n_out;
      const double d = u[size_t(i * n + i)];
      float* e = err.data() + (i - i1) * n_out;
      for (int64_t r = 0; r < n_out; ++r) {
        const float q = quant(r, i, col[r]);
        e[r] = float((col[r] - q) / d);
        col[r] = q;
      }
      for (int64_t j = i + 1; j < i2; ++j)  // serial: ≤ 127 columns, too little for a parallel region each
        quant_vec::sub_scaled(wc.data() + j * n_out, e, float(u[size_t(i * n + j)]), n_out);
    }
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int64_t j = i2; j < n; ++j) {
      float* cj = wc.data() + j * n_out;
      for (int64_t k = 0; k < count; ++k) {
        const float hkj = float(u[size_t((i1 + k) * n + j)]);
        if (hkj == 0) continue;
        quant_vec::sub_scaled(cj, err.data() + k * n_out, hkj, n_out);
      }
    }
  }

  // Back to row-major original column order.
  if (is_int) {
    ql.q.resize(size_t(n_out * n));
    for (int64_t c = 0; c < n; ++c)
      for (int64_t r = 0; r < n_out; ++r) ql.q[size_t(r * n + perm[size_t(c)])] = qv[size_t(c * n_out + r)];
    if (o.act_order == ActOrder::Group) {
      ql.g_idx.resize(size_t(n));
      for (int64_t c = 0; c < n; ++c) ql.g_idx[size_t(perm[size_t(c)])] = int32_t(c / g);
    }
  } else {
    ql.codes.resize(size_t(n_out * n));
    for (int64_t c = 0; c < n; ++c)
      for (int64_t r = 0; r < n_out; ++r) ql.codes[size_t(r * n + perm[size_t(c)])] = codes[size_t(c * n_out + r)];
  }
  ql.scales = std::move(scales);
  ql.zeros = std::move(zeros);
  ql.scale_bytes = std::move(scale_bytes);
  if (s.kind == QuantKind::Mxfp4 || s.kind == QuantKind::Nvfp4) ql.scales.clear();
  return ql;
}

}  // namespace tp
