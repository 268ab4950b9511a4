// GPTQ (Frantar et al. 2022, as llm-compressor's gptq_quantize does it) of one linear layer's weight
// W [n_out, n_in] from its inputs on calibration text.
//
//   H = (2 / N) · Σ_t x_t x_tᵀ over the N calibration rows x_t [n_in] (GptqHessian accumulates it).
//   Dead columns (H_jj = 0: an input never active) get H_jj = 1 and W[:, j] = 0.
//   Activation ordering (ActOrder):
//     None    columns visited in their order.
//     Weight  columns visited in order of decreasing H_jj; the groups stay the original contiguous columns
//             (no g_idx), so their params are necessarily static (below). compressed-tensors actorder
//             "weight" — llm-compressor 0.14's default for GPTQ ("static" is its alias).
//     Group   columns visited in order of decreasing H_jj; groups are formed in that order and g_idx[j] (the
//             group of original column j) is returned (actorder "group": older GPTQ checkpoints; our loader
//             reads it, compressed-tensors 0.19 refuses it).
//   Group params: dynamic (the GPTQ paper's default) — a group's scale / zero point from the error-corrected
//     weights when its first column is reached; static (static_groups, and always with Weight) — every
//     group's params from the ORIGINAL weights up front, as RTN computes them (llm-compressor's memoryless
//     min-max observer runs before its GPTQ sweep).
//   Scales as stored (bf16_scales; tpserve quantize sets it for a BF16 output at 8 bits): Int / Fp8 scales
//     rounded to BF16 — an asymmetric group's zero point computed from the rounded scale — before the sweep
//     quantizes with them, so the error fed back is that of the weights the output holds (F32 scales rounded
//     only when written leave an error GPTQ never saw: at 8 bits per channel as large as the grid's rounding).
//   Damping: H += percdamp · mean(diag H) · I (raised ×10, at most 3 times, when H is not positive definite).
//   U = the upper Cholesky factor of H⁻¹ (H⁻¹ = UᵀU).
//   Columns i in blocks of `block` (128): q_i = Q(w_i) with its group's params, err_i = (w_i − q_i) / U_ii, the rest of the block
//     w_j −= err_i · U_ij at once, and the columns after the block updated lazily with the block's errors.
// Kinds: Int (any group), Fp8 per channel (params from the whole row at column 0), Mxfp4 / Nvfp4 (block
// params at each block's first column, or static; Nvfp4's global scale from the whole weight). Act-order Weight
// applies to every kind (the codes come back in the original column order); Group needs Int (InputError).
#pragma once
#include <cstdint>
#include <vector>

#include "rank/quant_rtn.h"

namespace tp {

class GptqHessian {
 public:
  explicit GptqHessian(int64_t n_in) : n_in_(n_in), h_(size_t(n_in * n_in), 0.0) {}
  // Adds rows x [n_tok, n_in].
  void add(const float* x, int64_t n_tok);
  int64_t n_in() const { return n_in_; }
  int64_t n_rows() const { return n_rows_; }
  // (2 / N) Σ x xᵀ, [n_in, n_in] row-major.
  std::vector<double> hessian() const;

 private:
  int64_t n_in_;
  int64_t n_rows_ = 0;
  std::vector<double> h_;  // Σ x xᵀ
};

enum class ActOrder : uint8_t { None, Weight, Group };

// CPU seconds of quantize_gptq's phases, added to (the quantizer's profile).
struct GptqTimes {
  double factor = 0;   // damping, Cholesky and the triangular inverse (U)
  double columns = 0;  // the column sweep: quantization, error feedback, lazy block updates
};

struct GptqOptions {
  double percdamp = 0.01;
  int64_t block = 128;
  ActOrder act_order = ActOrder::None;
  bool static_groups = false;  // implied by ActOrder::Weight
  GptqTimes* times = nullptr;  // when set, the phases' CPU seconds are added to it
  float nvfp4_amax = 0;        // NVFP4: max|W| of the fused group the global scale comes from (quantize_rtn)
  // Int and Fp8 scales rounded to BF16 before the sweep quantizes with them (int_params' bf16_scale): set when
  // the output stores BF16 scales, so that the error fed back is the error of the weight as stored.
  bool bf16_scales = false;
};

// W [n_out, n_in] F32 row-major; h: GptqHessian::hessian() of its inputs. Throws InputError for a spec that
// does not fit the weight or act-order with a non-Int kind; tp::Error when H stays not positive definite.
QuantizedLinear quantize_gptq(const QuantSpec& spec, const float* w, int64_t n_out, int64_t n_in,
                              const std::vector<double>& h, const GptqOptions& options = {});

// Lower Cholesky factor L of the symmetric matrix a [n, n] (a = L Lᵀ) in place (upper part zeroed); false when
// a is not positive definite.
bool cholesky_lower(std::vector<double>& a, int64_t n);

}  // namespace tp
