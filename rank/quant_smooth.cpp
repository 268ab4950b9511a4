#include "rank/quant_smooth.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace tp {

void ActAbsMax::add(const float* x, int64_t n_tok) {
  const int64_t n = int64_t(m_.size());
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < n; ++j) m_[size_t(j)] = std::max(m_[size_t(j)], std::fabs(x[t * n + j]));
}

std::vector<float> smoothquant_scales(float alpha, const std::vector<LinearRef>& ws, const std::vector<float>& act) {
  if (!(alpha >= 0 && alpha <= 1)) throw InputError("SmoothQuant alpha " + std::to_string(alpha) + " is not in [0, 1]");
  const int64_t n = int64_t(act.size());
  std::vector<float> wmax(static_cast<size_t>(n), 0.0f);
  for (const LinearRef& l : ws)
    for (int64_t r = 0; r < l.n_out; ++r)
      for (int64_t j = 0; j < n; ++j) wmax[size_t(j)] = std::max(wmax[size_t(j)], std::fabs(l.w[r * n + j]));
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const double a = std::max(double(act[size_t(j)]), 1e-5), w = std::max(double(wmax[size_t(j)]), 1e-5);
    s[size_t(j)] = float(std::pow(a, alpha) / std::pow(w, 1.0 - alpha));
  }
  return s;
}

}  // namespace tp
