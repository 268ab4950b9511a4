// SmoothQuant (Xiao et al. 2022, llm-compressor's SmoothQuantModifier): moves activation outliers into the
// weights before W8A8 quantization. For the linears reading one normed input (q|k|v, gate|up):
//   s_j = max_t|x_tj|^α / max_i|W_ij|^(1−α)   (max over every linear's rows; both clamped to ≥ 1e-5)
//   W[:, j] *= s_j and the RMSNorm weight γ_j /= s_j, so X·Wᵀ is unchanged before quantization.
// α = 0 gives s_j = 1 / max|W_j| (the weights' columns normalized; NOT the identity: the issue's "α = 0 equals
// no smoothing" holds for the unquantized function, which every α preserves exactly, see the tests).
#pragma once
#include <cstdint>
#include <vector>

#include "rank/quant_awq.h"

namespace tp {

// Per-channel max|x| of rows x [n_tok, n_in], accumulated.
class ActAbsMax {
 public:
  explicit ActAbsMax(int64_t n_in) : m_(size_t(n_in), 0.0f) {}
  void add(const float* x, int64_t n_tok);
  const std::vector<float>& values() const { return m_; }

 private:
  std::vector<float> m_;
};

std::vector<float> smoothquant_scales(float alpha, const std::vector<LinearRef>& ws, const std::vector<float>& act_absmax);

}  // namespace tp
