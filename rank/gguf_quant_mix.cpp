// llama-quantize's per-tensor type choice for the mixes tpserve convert writes (see gguf_quant_mix.h).
#include "rank/gguf_quant_mix.h"

#include <cstdio>

namespace tp {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int layer_of(const std::string& name) {
  int i = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &i) == 1 ? i : -1;
}

// llama.cpp's use_more_bits(i_layer, n_layers).
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

DType base_type(GgufQuantMix mix) {
  switch (mix) {
    case GgufQuantMix::Q8_0: return DType::Q8_0;
    case GgufQuantMix::Q4_0: return DType::Q4_0;
    case GgufQuantMix::Q4_1: return DType::Q4_1;
    case GgufQuantMix::Q6_K: return DType::Q6_K;
    case GgufQuantMix::Q4_K:
    case GgufQuantMix::Q4_K_M: return DType::Q4_K;
  }
  return DType::Q8_0;
}

}  // namespace

DType gguf_mix_type(GgufQuantMix mix, const std::string& name, int64_t cols, int64_t n_layers, bool output_tensor) {
  DType t = base_type(mix);
  const bool pure = mix == GgufQuantMix::Q4_K || mix == GgufQuantMix::Q6_K;
  if (!pure) {
    if (output_tensor) {
      // llama_tensor_get_type_impl: the output (or tied embedding) gets Q8_0 when its rows are not whole blocks
      // of the base type, else Q6_K unless the base is Q8_0.
      if (cols % dtype_block_elems(t) != 0)
        t = DType::Q8_0;
      else if (t != DType::Q8_0)
        t = DType::Q6_K;
    } else if (mix == GgufQuantMix::Q4_K_M) {
      const int layer = layer_of(name);
      if ((ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) && layer >= 0 &&
          use_more_bits(layer, n_layers))
        t = DType::Q6_K;
    }
  }
  // tensor_type_fallback: rows that are not whole blocks of the type.
  if (cols % dtype_block_elems(t) != 0) {
    if (t == DType::Q4_K) t = DType::Q5_0;
    if (t == DType::Q6_K) t = DType::Q8_0;
    if (cols % dtype_block_elems(t) != 0) t = DType::F16;
  }
  return t;
}

uint32_t gguf_mix_file_type(GgufQuantMix mix) {
  switch (mix) {
    case GgufQuantMix::Q8_0: return 7;
    case GgufQuantMix::Q4_0: return 2;
    case GgufQuantMix::Q4_1: return 3;
    case GgufQuantMix::Q4_K: return 14;
    case GgufQuantMix::Q6_K: return 18;
    case GgufQuantMix::Q4_K_M: return 15;
  }
  return 0;
}

}  // namespace tp
