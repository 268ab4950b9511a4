// libFuzzer target: arbitrary bytes as one of a Hugging Face model directory's JSON files (rank/hf_dir.h), picked by
// the first byte: config.json (read_hf_config, then its quantization_config: read_ct_config), tokenizer.json or
// tokenizer_config.json (read_hf_tokenizer; the latter beside a valid tokenizer.json and a config.json with token
// ids). Each run writes its files into this process's scratch directory. Seeds: a synthetic model's files,
// SmolLM2's config.json and tokenizer_config.json, an llm-compressor fixture's config.json, a list-form chat
// template. Any tp::Error is an accepted outcome; a crash, sanitizer report or other exception is a bug.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "rank/ct_config.h"
#include "rank/hf_dir.h"

namespace {

const std::string& scratch() {
  static const std::string dir = [] {
    const std::string d = std::filesystem::temp_directory_path().string() + "/tp_hf_fuzz_" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const std::string& name, const char* data, size_t size) {
  std::ofstream(scratch() + "/" + name, std::ios::binary | std::ios::trunc).write(data, std::streamsize(size));
}

// A tokenizer.json that reads (two bytes and their merge), for the tokenizer_config.json runs.
constexpr char kTokenizer[] =
    R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "added_tokens": [)"
    R"({"id": 3, "content": "<|im_end|>", "special": true}]})";

constexpr char kConfigIds[] = R"({"bos_token_id": 0, "eos_token_id": [3, 1], "pad_token_id": null})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* text = reinterpret_cast<const char*>(data + 1);
  const int which = data[0] % 3;
  for (const char* f : {"/config.json", "/tokenizer_config.json"}) std::filesystem::remove(scratch() + f);  // no state
  try {
    if (which == 0) {
      write("config.json", text, size - 1);
      (void)tp::read_hf_config(scratch());
      (void)tp::read_ct_config(scratch());
    } else if (which == 1) {
      write("tokenizer.json", text, size - 1);
      (void)tp::read_hf_tokenizer(scratch());
    } else {
      write("tokenizer.json", kTokenizer, sizeof kTokenizer - 1);
      write("config.json", kConfigIds, sizeof kConfigIds - 1);  // the ids a tokenizer_config.json may leave out
      write("tokenizer_config.json", text, size - 1);
      (void)tp::read_hf_tokenizer(scratch());
    }
  } catch (const tp::Error&) {
  }
  return 0;
}
