// `tpserve quantize`: an unquantized model (GGUF — its blocks dequantized — or an HF F32 / BF16 directory) ->
// a compressed-tensors HF directory (rank/ct_writer.h), layer by layer:
//   rtn                 each linear rounded to the nearest grid point (no calibration).
//   gptq                each linear by GPTQ (rank/quant_gptq.h) from its inputs on the calibration tokens.
//   awq                 per-channel scales searched (rank/quant_awq.h) for q|k|v (folded into the attention norm),
//                       gate|up (into the FFN norm), down (into up_proj's row scales) and o (into v_proj's rows
//                       when n_heads = n_kv_heads), then RTN.
//   smoothquant+gptq    SmoothQuant scales (rank/quant_smooth.h, alpha) for q|k|v and gate|up folded into the norms,
//                       then GPTQ.
// Calibration: the tokens are cut into sequences of `seq_len`; the embeddings run through the decoder layers
// in F32 (RMSNorm, Q/K/V, rope, causal attention, O, SiLU·up, down — our own reference forward, on one rank),
// each linear's input captured where the layer reads it, and the next layer fed from the layer computed with
// the already-quantized weights (activation quantization of W8A8 / FP8-dynamic is not applied in this pass).
// The calibration forward's products, the Hessians (X^T X per 512 rows) and AWQ's search run on the kernels/cpu
// GEMM (oneDNN) with cpu::set_num_threads threads; attention and GPTQ's updates are OpenMP loops.
// Diagnostics: with TPSERVE_QUANT_HOLDOUT=N in the environment the last N calibration tokens still run through
// the forward but are left out of the Hessians, and each linear's relative output error (method and RTN) on the
// calibrated and the held-out rows is printed to stderr.
// Peak memory: one layer's F32 weights, the activations [n_tokens, max(hidden, intermediate)] a few times, one
// Hessian, and the output in its compressed form.
// Q/K of a GGUF input are un-permuted into the HF (rotate-half) layout before quantization.
// NVFP4: q|k|v of a layer share one global scale, and gate|up another (from the largest |w| of the group), as
// compressed-tensors writes them and vLLM needs them (rank/quant_rtn.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "rank/ct_writer.h"
#include "rank/model_file.h"

namespace tp {

enum class QuantMethod : uint8_t { Rtn, Gptq, Awq, SmoothQuantGptq };
// "rtn", "gptq", "awq", "smoothquant+gptq"; UsageError otherwise.
QuantMethod parse_quant_method(std::string_view name);

struct QuantizeOptions {
  QuantScheme scheme = QuantScheme::W8A16;
  QuantMethod method = QuantMethod::Rtn;
  int64_t group_size = -1;                     // -1: the scheme's default (rank/ct_writer.h)
  ActOrder act_order = ActOrder::None;         // GPTQ only (rank/quant_gptq.h); the CLI defaults to Weight
  bool static_groups = false;                  // GPTQ group params from the original weights (rank/quant_gptq.h)
  std::vector<int32_t> calib_tokens;           // needed by every method but rtn
  int64_t seq_len = 512;                       // calibration sequence length
  std::vector<std::string> ignore = {"lm_head"};  // HF module names (exact, or "re:" + regex from the start)
  DType dtype = DType::BF16;                   // dense tensors and scales in the output (8-bit GPTQ quantizes
                                               // with the scales rounded to it: GptqOptions::bf16_scales)
  // GPTQ damping (a fraction of the Hessian's mean diagonal). 0.1, not llm-compressor's 0.01: on SmolLM2 with
  // 7,639 GPL-3 calibration tokens, layer 0's down_proj at 0.01 had 0.30x RTN's output error on the calibration
  // rows but 1.10x on held-out Python-manual rows (over-fitted); 0.1 gave 0.34x and 0.81x, and q/k/v/o/gate
  // were no worse on either (TPSERVE_QUANT_HOLDOUT diagnostics). End to end, w4a16 g64 over 10 x 512 held-out
  // tokens: with act-order "weight" 0.1 gives perplexity 25.47 and 0.01 26.43 (RTN 26.73); in order with
  // dynamic group scales both lost to RTN (29.05, 28.54) — bench/results/quality-llmcompressor-*.md.
  double percdamp = 0.1;
  float sq_alpha = 0.5f;
  std::function<void(const std::string&)> progress;  // one line per layer
};

// Throws UsageError / InputError with one line naming the problem (a group size that does not divide a
// linear's input, calibration missing or too short, an already quantized input).
// The lm_head is quantized too when `ignore` does not name it (a tied model is untied: rank/quantize.cpp).
void quantize_model(const ModelFile& model, const std::string& out_dir, const QuantizeOptions& options);

}  // namespace tp
