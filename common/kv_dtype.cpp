#include "common/kv_dtype.h"

#include "common/error.h"

namespace tp {

std::string_view kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::F32: return "f32";
    case KvDType::BF16: return "bf16";
    case KvDType::FP8_E4M3: return "fp8_e4m3";
    case KvDType::INT8: return "int8";
  }
  return "?";
}

KvDType parse_kv_dtype(std::string_view name, std::string_view what) {
  std::string list;
  for (KvDType t : kKvDTypes) {
    if (kv_dtype_name(t) == name) return t;
    list += (list.empty() ? "" : ", ") + std::string(kv_dtype_name(t));
  }
  throw InputError(std::string(what) + ": '" + std::string(name) + "' is not one of: " + list);
}

int64_t kv_dtype_bytes(KvDType t) {
  switch (t) {
    case KvDType::F32: return 4;
    case KvDType::BF16: return 2;
    case KvDType::FP8_E4M3: return 1;
    case KvDType::INT8: return 1;
  }
  return 0;
}

}  // namespace tp
