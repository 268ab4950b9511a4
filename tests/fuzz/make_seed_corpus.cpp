// Writes the tiny valid seed files of tests/fuzz/corpus/{gguf,safetensors}/ (regenerate with
// `make_seed_corpus <corpus dir>`; run_fuzz.sh does not need it, the outputs are committed).
#include <cstring>
#include <iostream>
#include <string>

#include "rank/gguf_writer.h"
#include "rank/safetensors_file.h"

namespace {

void fill_pattern(uint8_t* d, int64_t n) {
  for (int64_t k = 0; k < n; ++k) d[k] = uint8_t(k * 13 + 5);
}

void write_gguf(const std::string& path, bool with_tokenizer) {
  using namespace tp;
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("llama.block_count", GgufValue::make_u32(1));
  w.set("llama.embedding_length", GgufValue::make_u32(32));
  w.set("llama.feed_forward_length", GgufValue::make_u32(32));
  w.set("llama.attention.head_count", GgufValue::make_u32(2));
  w.set("llama.attention.head_count_kv", GgufValue::make_u32(1));
  w.set("llama.rope.freq_base", GgufValue::make_f32(10000.0f));
  if (with_tokenizer) {
    w.set("tokenizer.ggml.model", GgufValue::make_string("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufValue::make_string_array({"a", "b", "ab", "<s>"}));
    w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array({1, 1, 1, 3}));
    w.set("tokenizer.ggml.merges", GgufValue::make_string_array({"a b"}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::make_u32(3));
    GgufValue nested;
    nested.type = GgufType::Array;
    nested.elem_type = GgufType::Array;
    nested.arr = {GgufValue::make_i32_array({1, 2})};
    w.set("x.nested", nested);
  } else {
    w.set("llama.vocab_size", GgufValue::make_u32(4));
  }
  auto pat = [](int64_t n) { return [n](uint8_t* d) { fill_pattern(d, n); }; };
  w.add_tensor("token_embd.weight", GgmlType::Q8_0, {32, 4}, pat(4 * 34));
  w.add_tensor("output_norm.weight", GgmlType::F32, {32}, pat(32 * 4));
  w.add_tensor("blk.0.attn_q.weight", GgmlType::F16, {32, 2}, pat(64 * 2));
  w.add_tensor("blk.0.attn_k.weight", GgmlType::BF16, {32, 1}, pat(32 * 2));
  w.add_tensor("blk.0.attn_v.weight", GgmlType::Q4_0, {32, 1}, pat(18));
  w.add_tensor("blk.0.ffn_up.weight", GgmlType::Q4_1, {32, 1}, pat(20));
  w.write(path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seed_corpus <corpus dir>\n";
    return 2;
  }
  const std::string dir = argv[1];
  write_gguf(dir + "/gguf/tiny_llama_tokenizer.gguf", true);
  write_gguf(dir + "/gguf/tiny_llama.gguf", false);
  using tp::DType;
  auto pat = [](int64_t n) { return [n](uint8_t* d) { fill_pattern(d, n); }; };
  tp::write_safetensors(dir + "/safetensors/three.safetensors",
                        {{"model.embed_tokens.weight", DType::F32, {2, 4}, pat(32)},
                         {"model.norm.weight", DType::BF16, {4}, pat(8)},
                         {"lm_head.weight", DType::F16, {2, 2}, pat(8)}},
                        {{"format", "pt"}});
  tp::write_safetensors(dir + "/safetensors/scalar.safetensors", {{"s", DType::F32, {}, pat(4)}});
  return 0;
}
