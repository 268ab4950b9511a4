// Which GGUF type each tensor of a model gets when `tpserve convert` quantizes it: the choice llama-quantize
// (llama.cpp's llama_tensor_get_type, no importance matrix) makes for a llama model, so our files have the
// same tensor types as llama.cpp's of the same name.
//   gguf-q8_0   every matrix Q8_0                           (llama-quantize ... Q8_0,   file_type 7)
//   gguf-q4_0   Q4_0; the output / tied embedding Q6_K      (llama-quantize ... Q4_0,   file_type 2)
//   gguf-q4_1   Q4_1; the output / tied embedding Q6_K      (llama-quantize ... Q4_1,   file_type 3)
//   gguf-q4_k   every matrix Q4_K                           (llama-quantize --pure ... Q4_K_S, file_type 14)
//   gguf-q6_k   every matrix Q6_K                           (llama-quantize --pure ... Q6_K,   file_type 18)
//   gguf-q4_k_m Q4_K; attn_v and ffn_down Q6_K in the layers use_more_bits picks (the first and last eighth,
//               every third between); the output / tied embedding Q6_K (llama-quantize ... Q4_K_M, 15)
// then llama-quantize's fallback for rows that are not whole blocks: a 256-block type whose row length is not
// a multiple of 256 becomes Q4_K -> Q5_0, Q6_K -> Q8_0 (the output's Q6_K becomes Q8_0 directly); a 32-block
// type still off its blocks -> F16. SmolLM2-135M (hidden 576 = 2.25 × 256) therefore keeps Q4_K / Q6_K only in
// ffn_down (1536 columns): its Q4_K_M file is Q5_0 (q, k, o, gate, up, most v), Q8_0 (the tied embedding and
// the use_more_bits v), Q4_K / Q6_K (ffn_down).
#pragma once
#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace tp {

enum class GgufQuantMix { Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q4_K_M };

// The type of a matrix `name` [rows, cols] of a model with n_layers layers; `output_tensor`: output.weight, or
// token_embd.weight when the model has no output.weight (tied).
DType gguf_mix_type(GgufQuantMix mix, const std::string& name, int64_t cols, int64_t n_layers, bool output_tensor);
// general.file_type llama.cpp writes for the mix.
uint32_t gguf_mix_file_type(GgufQuantMix mix);

}  // namespace tp
