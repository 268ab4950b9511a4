// Writes the tiny valid seed files of tests/fuzz/corpus/{gguf,safetensors,step_plan}/ (regenerate with
// `make_seed_corpus <corpus dir>`; run_fuzz.sh does not need it, the outputs are committed). The
// openai_request and config seeds are hand-written text files.
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/step_plan.h"
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

// A step_plan_fuzz input: the selector byte (see step_plan_fuzz.cpp) then the serialized buffer.
void write_step_seed(const std::string& path, uint8_t selector, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.put(char(selector));
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_step_plan_seeds(const std::string& dir) {
  using namespace tp;
  constexpr uint8_t kPlan = 0, kResult = 1, kFixFrame = 2;
  StepPlan run;
  run.step_id = 41;
  SeqPlan prefill;  // a prompt chunk, no sampling this step
  prefill.seq_id = 7;
  prefill.tokens = {1, 17, 300, 4095};
  prefill.start_pos = 16;
  prefill.block_table = {3, 9};
  prefill.prompt_logprobs = 2;  // every row also yields a prompt logprob
  prefill.prompt_targets = {17, 300, 4095, 6};
  SeqPlan decode;  // one token, sampled with every knob, penalties with their history
  decode.seq_id = 2;
  decode.tokens = {88};
  decode.start_pos = 5;
  decode.block_table = {0};
  decode.want_logits = true;
  decode.sampling = {.temperature = 0.7f, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f, .seed = 1234567,
                     .presence_penalty = 0.5f, .frequency_penalty = -0.25f, .repetition_penalty = 1.1f,
                     .logprobs = 5};
  decode.history = {1, 2, 3, 88, 42};
  decode.n_history_prompt = 3;
  decode.logit_bias = {{50256, -100.0f}, {7, 2.5f}};
  decode.token_bitmask = {-1, 0x0f0f0f0f, 0, 1};  // structured output: the tokens its grammar allows next
  SeqPlan greedy;  // want_logits without penalties: no history
  greedy.seq_id = 1000000000000;
  greedy.tokens = {5};
  greedy.start_pos = 0;
  greedy.block_table = {1};
  greedy.want_logits = true;
  greedy.sampling.temperature = 0.0f;
  greedy.sampling.logprobs = 0;
  run.seqs = {prefill, decode, greedy};
  run.block_copies = {{3, 4}, {0, 12}};
  write_step_seed(dir + "/step_plan/plan_run.bin", kPlan | kFixFrame, serialize(run));
  write_step_seed(dir + "/step_plan/plan_run_raw.bin", kPlan, serialize(run));
  StepPlan shutdown;
  shutdown.step_id = 42;
  shutdown.kind = StepKind::Shutdown;
  write_step_seed(dir + "/step_plan/plan_shutdown.bin", kPlan, serialize(shutdown));

  StepResult lp;
  lp.step_id = 41;
  lp.seq_ids = {2, 1000000000000, 9};
  lp.tokens = {17, 5, 0};
  lp.logprobs.resize(3);
  lp.logprobs[0] = TokenLogprobs{-0.5f, {17, 3, 99}, {-0.5f, -1.25f, -std::numeric_limits<float>::infinity()}};
  lp.logprobs[1] = TokenLogprobs{0.0f, {}, {}};
  lp.prompt_logprobs = {{7, 17, {TokenLogprobs{-2.0f, {4, 5}, {-0.25f, -0.5f}, 9}, TokenLogprobs{-0.1f, {}, {}, 1}}}};
  write_step_seed(dir + "/step_plan/result_logprobs.bin", kResult | kFixFrame, serialize(lp));
  StepResult plain;
  plain.step_id = 3;
  plain.seq_ids = {0, 1};
  plain.tokens = {12, 13};
  write_step_seed(dir + "/step_plan/result_plain.bin", kResult, serialize(plain));
  write_step_seed(dir + "/step_plan/result_empty.bin", kResult | kFixFrame, serialize(StepResult{}));
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
  write_step_plan_seeds(dir);
  return 0;
}
