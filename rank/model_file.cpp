#include "rank/model_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "rank/gguf_model.h"
#include "rank/hf_dir.h"

namespace tp {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + "]";
}

}  // namespace

const TensorView& ModelFile::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (!t) throw FormatError(path(), name, "missing tensor");
  if (t->shape != shape)
    throw FormatError(path(), name, "shape " + shape_str(t->shape) + ", expected " + shape_str(shape));
  if (t->raw != RawType::None)
    throw FormatError(path(), name,
                      "holds " + std::string(raw_type_name(t->raw)) + " data where a float tensor (F32, F16, BF16) is expected");
  return *t;
}

std::unique_ptr<ModelFile> open_model(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InputError("cannot open model '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return std::make_unique<HfDir>(path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw InputError("cannot open model '" + path + "': " + std::strerror(errno));
  uint32_t magic = 0;
  size_t got = std::fread(&magic, 1, sizeof magic, f);
  std::fclose(f);
  if (got != sizeof magic || magic != kGgufMagic)
    throw FormatError(path, "header.magic", "not a GGUF file (and not a directory with config.json)");
  return std::make_unique<GgufModel>(path);
}

}  // namespace tp
