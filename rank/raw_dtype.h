// Element types of the non-float tensors quantized checkpoints hold, which DType (the types of dense weights
// and activations) does not: compressed-tensors stores 4/8-bit values packed in int32 words, int8 weights
// and zero points, uint8 FP4 pairs and E8M0 scales, E4M3 weights and scales, and int32/int64 shapes.
// A tensor whose RawType is not None holds such bytes; only the code that asks for them (the
// compressed-tensors loader) reads them (ModelFile::require refuses them).
#pragma once
#include <cstdint>
#include <string_view>

namespace tp {

enum class RawType : uint8_t { None, I8, U8, I16, I32, I64, F8E4M3, F8E5M2 };

// The safetensors spelling: "I8", "U8", "I16", "I32", "I64", "F8_E4M3", "F8_E5M2" ("" for None).
inline std::string_view raw_type_name(RawType t) {
  switch (t) {
    case RawType::None: return "";
    case RawType::I8: return "I8";
    case RawType::U8: return "U8";
    case RawType::I16: return "I16";
    case RawType::I32: return "I32";
    case RawType::I64: return "I64";
    case RawType::F8E4M3: return "F8_E4M3";
    case RawType::F8E5M2: return "F8_E5M2";
  }
  return "?";
}

// Bytes of one element (0 for None).
inline int64_t raw_type_bytes(RawType t) {
  switch (t) {
    case RawType::I16: return 2;
    case RawType::I32: return 4;
    case RawType::I64: return 8;
    case RawType::None: return 0;
    default: return 1;
  }
}

}  // namespace tp
