#include "rank/quant_awq.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/cpu/linear.h"

namespace tp {

namespace {

// y [m, n_out] = x [m, n_in] · wᵀ on the CPU GEMM (kernels/cpu linear).
std::vector<float> matmul(const float* x, int64_t m, const float* w, int64_t n_out, int64_t n_in) {
  std::vector<float> y(static_cast<size_t>(m * n_out));
  const cpu::Weight wt(DType::F32, n_out, n_in, DType::F32, w, n_in * int64_t(sizeof(float)));
  cpu::linear(x, m, wt, y.data());
  return y;
}

}  // namespace

void apply_input_scales(float* w, int64_t n_out, int64_t n_in, const std::vector<float>& s) {
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t j = 0; j < n_in; ++j) w[r * n_in + j] *= s[size_t(j)];
}

void fold_into_previous(float* v, int64_t n, int64_t row_len, const std::vector<float>& s) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = 0; k < row_len; ++k) v[j * row_len + k] /= s[size_t(j)];
}

AwqResult awq_search(const QuantSpec& spec, const std::vector<LinearRef>& ws, const float* x, int64_t n_tok,
                     int64_t n_in, int n_grid, int64_t max_rows) {
  check_quant_spec(spec, n_in, "AWQ weight");
  if (n_tok <= 0) throw InputError("AWQ needs calibration rows");
  std::vector<double> xmean(static_cast<size_t>(n_in), 0.0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < n_in; ++j) xmean[size_t(j)] += std::fabs(x[t * n_in + j]);
  for (double& v : xmean) v /= double(n_tok);
  // Search rows: evenly spaced.
  const int64_t m = std::min(n_tok, max_rows);
  std::vector<float> xs(static_cast<size_t>(m * n_in));
  for (int64_t i = 0; i < m; ++i) std::copy_n(x + (i * n_tok / m) * n_in, n_in, xs.begin() + i * n_in);
  // Reference outputs.
  std::vector<std::vector<float>> ref(ws.size());
  double ref_norm = 0;
  for (size_t li = 0; li < ws.size(); ++li) {
    ref[li] = matmul(xs.data(), m, ws[li].w, ws[li].n_out, n_in);
    for (float y : ref[li]) ref_norm += double(y) * y;
  }
  if (!(ref_norm > 0)) ref_norm = 1;
  AwqResult best;
  best.error = -1;
  std::vector<float> s(static_cast<size_t>(n_in)), ws_buf;
  for (int gi = 0; gi < n_grid; ++gi) {
    const double alpha = double(gi) / n_grid;
    double smax = 0, smin = INFINITY;
    for (int64_t j = 0; j < n_in; ++j) {
      s[size_t(j)] = float(std::pow(std::max(xmean[size_t(j)], 1e-8), alpha));
      smax = std::max(smax, double(s[size_t(j)]));
      smin = std::min(smin, double(s[size_t(j)]));
    }
    const float norm = float(std::sqrt(smax * smin));
    for (float& v : s) v /= norm;
    double err = 0;
    for (size_t li = 0; li < ws.size(); ++li) {
      const int64_t no = ws[li].n_out;
      ws_buf.assign(ws[li].w, ws[li].w + no * n_in);
      apply_input_scales(ws_buf.data(), no, n_in, s);
      std::vector<float> wq = quantize_rtn(spec, ws_buf.data(), no, n_in).dequantize();
      for (int64_t o = 0; o < no; ++o)
        for (int64_t j = 0; j < n_in; ++j) wq[size_t(o * n_in + j)] /= s[size_t(j)];
      const std::vector<float> y = matmul(xs.data(), m, wq.data(), no, n_in);
      for (size_t k = 0; k < y.size(); ++k) {
        const double d = double(y[k]) - ref[li][k];
        err += d * d;
      }
    }
    err /= ref_norm;
    if (gi == 0) best.error_rtn = err;
    if (best.error < 0 || err < best.error) {
      best.error = err;
      best.alpha = alpha;
      best.scales = s;
    }
  }
  return best;
}

}  // namespace tp
