// compressed-tensors WRITER: an HF directory (config.json with `quantization_config`, model.safetensors,
// tokenizer files) laid out exactly as llm-compressor 0.x / compressed-tensors 0.19 write it for each scheme
// (checked against tests/peers/fixtures/compressed_tensors; rank/compressed_tensors.h reads it back).
//
// Schemes (config group "group_0", targets ["Linear"], ignore ["lm_head"] by default) and the tensors of a
// quantized module M [n_out, n_in] (scale dtype = the output dtype, BF16 or F32, as llm-compressor keeps the
// model's):
//   w8a16        pack-quantized, int 8 sym channel:      M.weight_packed I32 [n_out, n_in / 4] (u = q + 128, four
//                a word, low byte first), M.weight_scale [n_out, 1], M.weight_shape I64 [2]
//   w4a16        pack-quantized, int 4 sym group G (G 0: channel): weight_packed I32 [n_out, n_in / 8] (u = q + 8,
//                eight a word, low nibble first), weight_scale [n_out, n_in / G], weight_shape; act-order:
//                actorder "group" and M.weight_g_idx I32 [n_in]
//   w4a16-asym   as w4a16, symmetric false, zp_dtype torch.int8, M.weight_zero_point I32
//                [ceil(n_out / 8), n_groups] (z + 8 packed eight a word along the rows)
//   w8a8-int8    int-quantized, weights int 8 sym channel, input_activations int 8 token dynamic:
//                M.weight I8 [n_out, n_in], M.weight_scale [n_out, 1]
//   fp8-dynamic  float-quantized, weights float 8 channel, input_activations float 8 token dynamic:
//                M.weight F8_E4M3 [n_out, n_in], M.weight_scale [n_out, 1]
//   fp8-weight   naive-quantized, weights float 8 channel, no activations: as fp8-dynamic
//   fp8-block    float-quantized, weights float 8 block [128, 128], input_activations float 8 group 128 dynamic
//                (llm-compressor's FP8_BLOCK): M.weight F8_E4M3 [n_out, n_in], M.weight_scale [ceil(n_out / 128),
//                ceil(n_in / 128)] (partial blocks at the edges, as compressed-tensors' ceil'ed grid)
//   nvfp4        nvfp4-pack-quantized, float 4 tensor_group 16: M.weight_packed U8 [n_out, n_in / 2] (E2M1 pairs,
//                low nibble first), M.weight_scale F8_E4M3 [n_out, n_in / 16], M.weight_global_scale F32 [1]
//   mxfp4        mxfp4-pack-quantized, float 4 group 32: M.weight_packed U8 [n_out, n_in / 2], M.weight_scale U8
//                (E8M0) [n_out, n_in / 32]
//   w3a16        pack-quantized, int 3 sym group G: weight_packed I32 [n_out, ceil(n_in / 10)] (u = q + 4, ten a
//                word at bits 3k..3k+2, the top 2 bits 0, the last word of a row zero-padded: compressed-tensors'
//                pack_to_int32 with pack factor 32 / 3), weight_scale, weight_shape as w4a16
// Everything else (embeddings, norms, ignored modules) is written dense in the output dtype.
// The writer spills every tensor, in its stored form, to an unnamed temporary file as it comes (memory: the
// tensor being added), and finish() copies them into model.safetensors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/model_config.h"
#include "common/tokenizer_data.h"
#include "rank/quant_gptq.h"
#include "rank/quant_rtn.h"

namespace tp {

enum class QuantScheme : uint8_t {
  W8A16, W4A16, W4A16Asym, W3A16, W8A8Int8, Fp8Dynamic, Fp8Weight, Nvfp4, Mxfp4, Fp8Block
};
inline constexpr int64_t kFp8BlockSize = 128;  // fp8-block's rows and columns a scale

// "w8a16", "w4a16", "w4a16-asym", "w3a16", "w8a8-int8", "fp8-dynamic", "fp8-weight", "nvfp4", "mxfp4",
// "fp8-block";
// UsageError naming the valid ones otherwise.
QuantScheme parse_quant_scheme(std::string_view name);
std::string_view quant_scheme_name(QuantScheme s);
inline constexpr const char* kQuantSchemeNames =
    "w8a16, w4a16, w4a16-asym, w3a16, w8a8-int8, fp8-dynamic, fp8-weight, fp8-block, nvfp4, mxfp4";

// The weight grid of a scheme. group_size: -1 the scheme's default (w4a16 / w4a16-asym / w3a16: 128; others
// their fixed grid), 0 per channel (integer schemes), > 0 columns a group (integer 4/3-bit schemes; others
// refuse a group size, UsageError).
QuantSpec scheme_weight_spec(QuantScheme s, int64_t group_size);

class CtWriter {
 public:
  // dtype: F32 or BF16 (dense tensors and scales). act_order: the config's "actorder" (rank/quant_gptq.h):
  // None null, Weight "weight" (the layout is unchanged), Group "group" (the weights carry g_idx).
  // Throws UsageError for act-order on a non-integer scheme or a bad dtype.
  CtWriter(QuantScheme scheme, QuantSpec spec, ActOrder act_order, std::vector<std::string> ignore, DType dtype);
  ~CtWriter();
  CtWriter(const CtWriter&) = delete;
  CtWriter& operator=(const CtWriter&) = delete;

  // A dense tensor (HF name, shape, F32 values; copied).
  void add_dense(const std::string& hf_name, const std::vector<int64_t>& shape, const float* values);
  // A quantized linear module ("model.layers.0.self_attn.q_proj", no ".weight"); q.spec must be the writer's.
  void add_quantized(const std::string& module, const QuantizedLinear& q);
  // Writes out_dir/model.safetensors, config.json (the model's, with quantization_config) and the tokenizer
  // files (when tok has tokens). Throws InputError when a file cannot be written.
  void finish(const std::string& out_dir, const ModelConfig& config, const TokenizerData& tok);
  // The quantization_config JSON text (tests).
  std::string quantization_config_json() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace tp
