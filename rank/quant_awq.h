// AWQ (Lin et al. 2023; llm-compressor's AWQModifier without duo scaling): per-input-channel scales s [n_in]
// for the linears that read one input (q|k|v after the attention norm, gate|up after the FFN norm, down after
// up), chosen to minimize the quantized layers' output error on calibration inputs.
//
//   x̄_j = mean_t |x_tj|;  s(α) = x̄^α, normalized s /= sqrt(max s · min s);  α ∈ {0, 1/20, ..., 19/20}.
//   err(α) = Σ_linears ‖X · (Q(W·diag(s)) · diag(s)⁻¹)ᵀ − X · Wᵀ‖²  (Q: RTN with `spec`)
//   The α of least error is kept; α = 0 (s = 1: plain RTN) is on the grid, so the result is never worse than
//   RTN on the search rows. The caller multiplies W's columns by s (apply_input_scales) and divides the
//   previous op's outputs by s (fold_into_previous: the RMSNorm weight, or up_proj's rows for down_proj).
// The search uses at most max_rows calibration rows (evenly spaced) to bound its cost.
#pragma once
#include <cstdint>
#include <vector>

#include "rank/quant_rtn.h"

namespace tp {

struct LinearRef {
  const float* w = nullptr;  // [n_out, n_in] row-major
  int64_t n_out = 0;
};

struct AwqResult {
  std::vector<float> scales;  // s [n_in]
  double alpha = 0;
  double error = 0;           // err(alpha) / ‖X·Wᵀ‖² (relative, over the search rows)
  double error_rtn = 0;       // err(0) / ‖X·Wᵀ‖²
};

// x [n_tok, n_in]: the input every linear in `ws` reads.
AwqResult awq_search(const QuantSpec& spec, const std::vector<LinearRef>& ws, const float* x, int64_t n_tok,
                     int64_t n_in, int n_grid = 20, int64_t max_rows = 256);

// W[:, j] *= s_j for w [n_out, n_in].
void apply_input_scales(float* w, int64_t n_out, int64_t n_in, const std::vector<float>& s);
// The previous op's output channel j divided by s_j: a norm weight [n] (v[j] /= s_j), or the rows of the
// previous linear (w [n, n_in_prev]: row j /= s_j).
void fold_into_previous(float* v, int64_t n, int64_t row_len, const std::vector<float>& s);

}  // namespace tp
