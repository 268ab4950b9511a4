// compressed-tensors' `quantization_config` (config.json, `quant_method: "compressed-tensors"`), parsed and checked
// field by field, and the scheme of each linear module (rank/compressed_tensors.h loads the tensors it describes).
//
// Config (every field is checked; an unknown format, strategy, type or value — the commonest failure, a
// checkpoint from a newer tool — is refused with a FormatError naming the field and the value):
//   quantization_config: {quant_method, format, quantization_status ("compressed"), config_groups: {name:
//     {targets: [...], weights: QuantArgs, input_activations: QuantArgs|null, output_activations: null,
//     format: str|null}}, ignore: [...], kv_cache_scheme: QuantArgs|null, sparsity_config (absent or empty),
//     transform_config (absent or null), global_compression_ratio, version}
//   QuantArgs: {num_bits, type: int|float, symmetric, strategy: tensor|channel|group|block|token|tensor_group,
//     group_size, block_structure [rows, cols], dynamic: bool|"local", actorder: null|group|weight|dynamic|
//     static|bool, observer, observer_kwargs (ignored: calibration only)}
// A module's scheme: compressed-tensors' own rule — targets are module names ("model.layers.0.mlp.down_proj"),
// "re:"-prefixed regular expressions matched at the start of the name (Python re.match), or class names
// ("Linear"); exact names win over regexes over classes; a module matching `ignore` stays dense.
//
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tp {

enum class CtFormat : uint8_t { Dense, PackQuantized, IntQuantized, FloatQuantized, NaiveQuantized, Nvfp4Pack, Mxfp4Pack };
enum class CtType : uint8_t { Int, Float };
enum class CtStrategy : uint8_t { Tensor, Channel, Group, Block, Token, TensorGroup };
enum class CtDynamic : uint8_t { Static, Dynamic, Local };
enum class CtActOrder : uint8_t { None, Group, Weight };

std::string_view ct_format_name(CtFormat f);  // as config.json spells it: "pack-quantized", ...

struct CtQuantArgs {
  int num_bits = 8;
  CtType type = CtType::Int;
  bool symmetric = true;
  CtStrategy strategy = CtStrategy::Tensor;
  int64_t group_size = 0;                // group / tensor_group: columns a scale
  int64_t block_rows = 0, block_cols = 0;  // block
  CtDynamic dynamic = CtDynamic::Static;
  CtActOrder actorder = CtActOrder::None;
};

struct CtScheme {
  std::string name;                      // the config group's name
  std::vector<std::string> targets;
  std::optional<CtQuantArgs> weights, input_activations;
  CtFormat format = CtFormat::Dense;     // the group's own, else the config's, else inferred
};

struct CtConfig {
  std::string file;                      // config.json, for errors
  CtFormat format = CtFormat::Dense;     // the global format (mixed-precision: each scheme has its own)
  bool mixed_precision = false;
  std::vector<CtScheme> schemes;
  std::vector<std::string> ignore;
  std::optional<CtQuantArgs> kv_cache_scheme;
};

// config.json's quantization_config of the HF directory `dir`: nullopt when there is none. FormatError for a
// quant_method other than compressed-tensors, and for any field it does not know or accept.
std::optional<CtConfig> read_ct_config(const std::string& dir);
// The same from the JSON text of a quantization_config object (tests); `file` names it in errors.
CtConfig parse_ct_config(const std::string& json_text, const std::string& file);

// The scheme of HF module `module` ("model.layers.0.self_attn.q_proj") of class `class_name` ("Linear"), or
// nullptr when no group targets it, it is ignored, or its weights are not quantized.
const CtScheme* ct_scheme_for(const CtConfig& c, const std::string& module, const std::string& class_name = "Linear");

}  // namespace tp
