// Helpers shared by the loader tests: the real model's path, temp dirs, raw file writing.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tp::test {

// The real model. Tests that need it fail (not skip) when it is missing.
inline std::string real_model_path() { return std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }
#define TP_REQUIRE_REAL_MODEL()                                                                   \
  ASSERT_TRUE(std::filesystem::exists(::tp::test::real_model_path()))                             \
      << ::tp::test::real_model_path() << " is missing: run launch/setup to download the model"

// A fresh directory under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/tp_rank_test_XXXXXX";
    char* p = mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}
inline void write_string(const std::string& path, const std::string& s) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << s;
}
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace tp::test
