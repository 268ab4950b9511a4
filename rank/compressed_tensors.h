// compressed-tensors checkpoints (what llm-compressor writes, vLLM serves): one rank's slice of a quantized linear
// as a PackedWeight, and the KV cache scales (the config and each module's scheme: rank/ct_config.h).
//
// Formats and what each stores per quantized module M (tensor names after "M."; [n_out, n_in] = the weight):
//   pack-quantized      weight_packed I32 [n_out, ceil(n_in · bits / 32)]: bits 3, 4 or 8, u = q + 2^(bits-1),
//                       element c at bit bits · c of the row's little-endian words (dense, split across two
//                       words where it straddles; 4-bit: byte for byte the low-nibble-first pairs of
//                       PackedWeight Int4); older releases' 32 / bits values a word ([n_out, ceil(n_in / 10)]
//                       at 3 bits) load too, told apart by the shape; weight_scale float [n_out, n_groups];
//                       weight_zero_point I32 [ceil(n_out · bits / 32), n_groups] packed along rows the same way
//                       (asymmetric only); weight_g_idx I32 [n_in] (actorder group); weight_shape I32/I64 [2]
//   int-quantized       weight I8 [n_out, n_in] (8-bit; or 4-bit values one a byte — W4A8 — repacked two a
//                       byte), weight_scale float [n_out, n_groups] / [n_out, 1] / [1], weight_zero_point I8
//                       (asymmetric); input_scale float [1] (static activations)
//   float-quantized /   weight F8_E4M3 [n_out, n_in], weight_scale float [1] | [n_out, 1] |
//   naive-quantized     [ceil(n_out / 128), ceil(n_in / 128)] (block); input_scale float [1] (static)
//   nvfp4-pack-quantized weight_packed U8 [n_out, n_in / 2] (E2M1 pairs, low nibble first), weight_scale
//                       F8_E4M3 [n_out, n_in / 16], weight_global_scale F32 [1]: w = e2m1 · scale / global
//   mxfp4-pack-quantized weight_packed U8 [n_out, n_in / 2], weight_scale U8 [n_out, n_in / 32] (E8M0)
//   mixed-precision     each config group names its own format (or it is inferred as compressed-tensors does)
// Activations: int8 or fp8, per token dynamic, per tensor static (input_scale), or per 128-column group
// dynamic (FP8 block); asymmetric activations and FP4 activations are refused.
// KV cache: kv_cache_scheme parsed and passed on; the scales are blk.{i}.attn_k_scale / attn_v_scale
// (kv_cache_scales).
//
// TP slicing (ct_load_slice): column-parallel takes rows with their scales (and unpacks the row-packed zero
// points); row-parallel takes input columns on whole groups / blocks, keeping each row's scales of those
// columns (per-channel and per-tensor scales replicated). An act-order (g_idx) weight may be cut anywhere:
// the slice keeps its columns' group ids, renumbered to the groups they use, with those groups' scales (every
// rank may hold most of the row's scales). A cut that falls inside a group is refused naming the tensor and
// the tp degrees whose cuts fit.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/packed_weight.h"
#include "rank/ct_config.h"
#include "parallel/tp_layout.h"
#include "rank/model_file.h"
#include "rank/weight_loader.h"

namespace tp {

// One rank's slice of quantized linear weights: rows `rows` of each part (canonical weight names
// "blk.0.attn_q.weight", all of scheme `s`) stacked, columns `cols` of [0, n_in). Several parts stack into
// one PackedWeight (per-tensor scales become per-row; FP8 blocks cut off their rows become per-row blocks).
// FormatError naming the tensor for a missing or mis-shaped tensor, a value out of range (g_idx, NaN / inf
// scales), a column cut inside a group (with the tp degrees that fit) or a combination of parts that cannot
// share one weight (different activation scales: the caller loads them apart).
PackedWeight ct_load_slice(const ModelFile& f, const CtScheme& s, int64_t n_in, Range cols,
                           const std::vector<RowSlice>& parts);
// Whether two modules' slices can share one PackedWeight (both of one scheme): equal static activation
// scale, NVFP4 global scale and g_idx.
bool ct_can_stack(const ModelFile& f, const std::string& a, const std::string& b);
// Whether canonical weight `name` is stored quantized: its module has a scheme and a weight_scale tensor
// (compressed-tensors leaves a targeted module it could not compress dense, without scales).
const CtScheme* ct_quantized_scheme(const ModelFile& f, const CtConfig& c, const std::string& name);

// The HF module name of a canonical weight name ("blk.0.attn_q.weight" -> "model.layers.0.self_attn.q_proj").
std::string ct_module_name(const std::string& canonical_weight);

// KV cache scales of layer `layer` (per-tensor k_scale / v_scale, F32) when the checkpoint has them:
// blk.{i}.attn_k_scale / attn_v_scale, or the older blk.{i}.attn_k.output_scale / attn_v.output_scale.
struct KvScales {
  float k_scale = 1.0f, v_scale = 1.0f;
};
std::optional<KvScales> kv_cache_scales(const ModelFile& f, int64_t layer);
// Every layer's scales ([n_layers] each), or nullopt when the checkpoint has none. A checkpoint with scales
// for some layers only is refused (FormatError naming the first layer without them).
std::optional<std::pair<std::vector<float>, std::vector<float>>> kv_cache_scales_all(const ModelFile& f,
                                                                                     int64_t n_layers);

}  // namespace tp
