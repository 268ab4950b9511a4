// Model cards for `tpserve plan` and `tpserve simulate` (implemented in launch/plan_cmd.cpp): a YAML card in
// configs/models/ (by name or path), or a GGUF file / HF directory header.
#pragma once
#include <optional>
#include <string>

#include "kvstore/capacity.h"

namespace tp {

struct LoadedModel {
  ModelShape shape;
  std::string source;  // "card <path>" or "file <path>"
};

// spec: a card's name (looked up in `cards`, else ./configs/models, else configs/models above the binary),
// a card file, a GGUF file or an HF directory. Throws InputError / ConfigError naming the file and field.
LoadedModel load_model(const std::string& spec, const std::optional<std::string>& cards);

}  // namespace tp
