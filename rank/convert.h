// `tpserve convert`: rewrites a model (GGUF file or HF directory) as
//   GgufF32 / GgufF16 / GgufBf16: a GGUF v3 file, every 2-D+ weight in the target type, 1-D tensors (norms)
//     F32, alignment 32. From a GGUF all metadata is copied (general.file_type rewritten: ALL_F32=0,
//     MOSTLY_F16=1, MOSTLY_BF16=32); from an HF directory the llama.* / tokenizer.ggml.* keys are built from
//     config.json + tokenizer files and Q/K are permuted into llama.cpp's interleaved layout.
//   GgufQ8_0 / GgufQ4_0 / GgufQ4_1 / GgufQ4_K / GgufQ6_K / GgufQ4_K_M: a GGUF v3 file whose matrices are
//     quantized as llama-quantize does it without an importance matrix — its per-tensor type choice
//     (rank/gguf_quant_mix.h) and its reference quantizers (kernels/cpu/gguf_quantize.h) — 1-D tensors F32;
//     general.file_type as llama.cpp writes it, general.quantization_version 2.
//   HfF32 / HfBf16: an HF directory (config.json, model.safetensors with HF names, tokenizer.json,
//     tokenizer_config.json), 2-D+ weights in the target type, 1-D in F32; Q/K from a GGUF are un-permuted
//     into the rotate-half (Neox) layout.
// Throws InputError / FormatError.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

enum class ConvertFormat {
  GgufF32, GgufBf16, GgufF16, HfF32, HfBf16,
  GgufQ8_0, GgufQ4_0, GgufQ4_1, GgufQ4_K, GgufQ6_K, GgufQ4_K_M,
};

// "gguf-f32", "gguf-bf16", "gguf-f16", "hf-f32", "hf-bf16", "gguf-q8_0", "gguf-q4_0", "gguf-q4_1", "gguf-q4_k",
// "gguf-q6_k", "gguf-q4_k_m"; throws UsageError on anything else.
ConvertFormat parse_convert_format(std::string_view name);

void convert_model(const std::string& in_path, const std::string& out_path, ConvertFormat fmt);

// Row index maps for Q/K weights [n_heads * head_dim, ...] (row r of the result comes from row map(r)).
//   gguf_to_hf_row: undoes llama.cpp's permute (interleaved pairs -> rotate-half halves).
//   hf_to_gguf_row: applies it.
int64_t gguf_to_hf_row(int64_t r, int64_t head_dim);
int64_t hf_to_gguf_row(int64_t r, int64_t head_dim);

}  // namespace tp
