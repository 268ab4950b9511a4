#include "rank/safetensors_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tp {
namespace {

using json = nlohmann::json;

constexpr RawType kRawTypes[] = {RawType::I8, RawType::U8, RawType::I16, RawType::I32,
                                 RawType::I64, RawType::F8E4M3, RawType::F8E5M2};

bool parse_dtype_name(const std::string& s, DType* out, RawType* raw) {
  *raw = RawType::None;
  if (s == "F32") *out = DType::F32;
  else if (s == "F16") *out = DType::F16;
  else if (s == "BF16") *out = DType::BF16;
  else {
    for (RawType r : kRawTypes)
      if (s == raw_type_name(r)) {
        *raw = r;
        return true;
      }
    return false;
  }
  return true;
}

int64_t element_bytes(const SafetensorsTensor& t) { return t.raw != RawType::None ? raw_type_bytes(t.raw) : dtype_block_bytes(t.dtype); }

const char* dtype_st_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: throw Error("safetensors cannot hold dtype " + std::string(dtype_name(t)));
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path) { parse(); }

SafetensorsFile::SafetensorsFile(std::string name, const uint8_t* data, size_t size)
    : path_(std::move(name)), map_(data, size) {
  parse();
}

void SafetensorsFile::parse() {
  const std::string& file = path_;
  const size_t size = map_.size();
  if (size < 8) throw FormatError(file, "header_length", "truncated: file size " + std::to_string(size) + " < 8");
  uint64_t n = 0;
  std::memcpy(&n, map_.data(), 8);
  if (n > kSafetensorsMaxHeader || n > size - 8)
    throw FormatError(file, "header_length",
                      "header length " + std::to_string(n) + " beyond end of file (size " + std::to_string(size) + ")");
  const char* hb = reinterpret_cast<const char*>(map_.data() + 8);
  json h = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) throw FormatError(file, "header", "invalid JSON");
  if (!h.is_object()) throw FormatError(file, "header", "not a JSON object");
  const uint8_t* data = map_.data() + 8 + n;
  const uint64_t data_size = size - 8 - n;

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw FormatError(file, "__metadata__", "not a JSON object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) throw FormatError(file, "__metadata__." + m.key(), "not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) throw FormatError(file, name, "not a JSON object");
    SafetensorsTensor t;
    t.name = name;
    auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) throw FormatError(file, name + ".dtype", "missing or not a string");
    if (!parse_dtype_name(dt->get<std::string>(), &t.dtype, &t.raw))
      throw FormatError(file, name + ".dtype",
                        "unsupported dtype '" + dt->get<std::string>() +
                            "' (supported: F32, F16, BF16, I8, U8, I16, I32, I64, F8_E4M3, F8_E5M2)");
    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array() || sh->size() > 8)
      throw FormatError(file, name + ".shape", "missing, not an array, or more than 8 dims");
    int64_t n_elems = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX) ||
          __builtin_mul_overflow(n_elems, int64_t(d.get<uint64_t>()), &n_elems))
        throw FormatError(file, name + ".shape", "dimension is not a non-negative integer or overflows");
      t.shape.push_back(int64_t(d.get<uint64_t>()));
    }
    auto off = e.find("data_offsets");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      throw FormatError(file, name + ".data_offsets", "missing or not two non-negative integers");
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw FormatError(file, name + ".data_offsets",
                        "data range [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") invalid or beyond end of data (size " + std::to_string(data_size) + ")");
    int64_t n_bytes = 0;
    if (__builtin_mul_overflow(n_elems, element_bytes(t), &n_bytes) || uint64_t(n_bytes) != end - begin)
      throw FormatError(file, name + ".data_offsets",
                        "data range of " + std::to_string(end - begin) + " bytes does not match shape and dtype");
    t.n_bytes = n_bytes;
    t.data = data + begin;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.data < b.data; });
  for (size_t k = 0; k < tensors_.size(); ++k) {
    if (k > 0 && tensors_[k].data < tensors_[k - 1].data + tensors_[k - 1].n_bytes)
      throw FormatError(file, tensors_[k].name + ".data_offsets", "overlaps tensor '" + tensors_[k - 1].name + "'");
    index_.emplace(tensors_[k].name, k);
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::map<std::string, std::string> read_safetensors_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw FormatError(path, "(root)", "invalid JSON or not an object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) throw FormatError(path, "weight_map", "missing or not an object");
  std::map<std::string, std::string> r;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) throw FormatError(path, "weight_map." + it.key(), "not a string");
    std::string f = it.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw FormatError(path, "weight_map." + it.key(), "shard '" + f + "' is not a plain file name");
    r[it.key()] = f;
  }
  return r;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const bool raw = t.raw != RawType::None;
    uint64_t bytes = uint64_t(n * (raw ? raw_type_bytes(t.raw) : dtype_block_bytes(t.dtype)));
    const std::string type = raw ? std::string(raw_type_name(t.raw)) : std::string(dtype_st_name(t.dtype));
    h[t.name] = {{"dtype", type}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs.push_back(' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) {
      int e = errno;
      std::fclose(f);
      throw InputError("cannot write '" + path + "': " + std::strerror(e));
    }
  };
  uint64_t hn = hs.size();
  put(&hn, 8);
  put(hs.data(), hs.size());
  std::vector<uint8_t> buf;
  for (size_t k = 0; k < tensors.size(); ++k) {
    buf.assign(size_t(sizes[k]), 0);
    tensors[k].fill(buf.data());
    put(buf.data(), buf.size());
  }
  if (std::fclose(f) != 0) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace tp
