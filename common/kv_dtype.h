// The element types of the paged KV cache (cache.dtype) and the byte layout of one KV block: the one statement
// of how many bytes an element and a block's scales take. kvstore (the pool, the capacity arithmetic behind the
// start-up report, `tpserve plan` and /metrics) and kernels/cpu (write_kv, paged attention) both read it here,
// because kernels may not include kvstore (DESIGN §2).
//
// Element types, and what a stored element x̂ means:
//   f32       4 B  x̂ = x
//   bf16      2 B  x̂ = bf16(x), round to nearest even
//   fp8_e4m3  1 B  x̂ = e4m3(x / s) · s, saturating at ±448 · s; s = the layer's tensor scale (1 unless the
//                  checkpoint gives k_scale / v_scale)
//   int8      1 B  x̂ = q · s, q in [-127, 127]; s = one F32 scale per (block, KV head) of K and of V, kept
//                  beside the block (below), or the layer's tensor scale when the checkpoint gives one
//
// One block of one layer's K (or V), block_bytes() bytes, blocks back to back:
//   [block_size, n_kv_heads, head_dim] elements (token-major, as the F32 pool always was), then, for int8
//   with block scales only, [n_kv_heads] F32 scales (unaligned; read with memcpy). A block copy (copy-on-write)
//   is one memcpy of block_bytes() per layer and tensor and moves the scales with the data.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tp {

enum class KvDType : uint8_t { F32, BF16, FP8_E4M3, INT8 };

// The names cache.dtype accepts, the default (bf16) first.
inline constexpr const char* kKvDTypeNames[] = {"bf16", "f32", "fp8_e4m3", "int8"};
inline constexpr KvDType kKvDTypes[] = {KvDType::BF16, KvDType::F32, KvDType::FP8_E4M3, KvDType::INT8};

std::string_view kv_dtype_name(KvDType t);
// Parses a name of kKvDTypeNames (exact, lower case). Throws InputError "<what>: '<name>' is not one of: bf16,
// f32, fp8_e4m3, int8".
KvDType parse_kv_dtype(std::string_view name, std::string_view what);
// Bytes of one stored element: 4, 2, 1, 1.
int64_t kv_dtype_bytes(KvDType t);

inline constexpr int64_t kKvScaleBytes = 4;  // one F32 scale

// Whether a dtype keeps scales per (block, KV head): int8, unless the layer has a tensor scale.
inline bool kv_block_scales(KvDType t, bool tensor_scales) { return t == KvDType::INT8 && !tensor_scales; }
// Whether a dtype can take per-layer tensor scales (k_scale / v_scale): fp8_e4m3 and int8.
inline bool kv_takes_tensor_scales(KvDType t) { return t == KvDType::FP8_E4M3 || t == KvDType::INT8; }

// The layout of one block of one layer's K or V (see the header comment). Counts >= 0, block_size > 0.
struct KvBlockLayout {
  KvDType dtype = KvDType::F32;
  int64_t block_size = 16;     // tokens
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  bool tensor_scales = false;  // fp8 / int8: one scale per layer tensor, none per block

  bool block_scales() const { return kv_block_scales(dtype, tensor_scales); }
  int64_t row_bytes() const { return n_kv_heads * head_dim * kv_dtype_bytes(dtype); }  // one token
  int64_t data_bytes() const { return block_size * row_bytes(); }
  int64_t scale_bytes() const { return block_scales() ? n_kv_heads * kKvScaleBytes : 0; }
  int64_t block_bytes() const { return data_bytes() + scale_bytes(); }
};

// One layer's K (or V): n_blocks blocks of layout.block_bytes() bytes from `blocks`. A view: it owns nothing.
// tensor_scale: fp8_e4m3 always, int8 when layout.tensor_scales (x̂ = stored · tensor_scale); 1 otherwise.
struct KvTensorView {
  uint8_t* blocks = nullptr;
  int64_t n_blocks = 0;
  KvBlockLayout layout;
  float tensor_scale = 1.0f;

  uint8_t* block(int64_t b) const { return blocks + b * layout.block_bytes(); }
};

}  // namespace tp
