// LlamaModel refuses a weight holding NaN or ±inf at load, naming the tensor (its HF name and canonical name)
// and the first bad element as [row, column] of that tensor: in a fused Q|K|V or gate|up part, a norm vector,
// the lm_head, the untied token embedding, a BF16 weight copied as is, a finite F32 value that overflows BF16,
// and on a tp rank whose slice starts mid-tensor (rank 1 of 2, a fake communicator: loading communicates
// nothing). A clean model loads. Models: `write_synthetic_model` with one element patched in the file.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "parallel/communicator.h"
#include "rank/hf_dir.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/synth.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rank `rank` of a group of `size` that must not communicate.
class SilentGroup : public Communicator {
 public:
  SilentGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void do_all_reduce_sum(float*, size_t, Stream) override { fail(); }
  void do_all_reduce_sum_bf16(uint16_t*, size_t, Stream) override { fail(); }
  void do_all_gather(const void*, size_t, void*, Stream) override { fail(); }
  void do_broadcast(void*, size_t, int, Stream) override { fail(); }
  void do_barrier() override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("loading a model must not communicate"); }
  int rank_, size_;
};

// 2 layers, hidden 64, 4 heads x 16 (2 KV heads), intermediate 96, vocab 300, untied lm_head.
std::string synth(const test::TempDir& dir, DType dtype) {
  SynthSpec s;
  s.n_layers = 2;
  s.hidden = 64;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.intermediate = 96;
  s.vocab = 300;
  s.seed = 11;
  s.dtype = dtype;
  const std::string out = dir.file("model");
  write_synthetic_model(out, s);
  return out;
}

// Sets element `index` (row-major) of tensor `canonical` in model_dir/model.safetensors to `value`.
void patch(const std::string& model_dir, const std::string& canonical, int64_t index, float value) {
  const std::string file = model_dir + "/model.safetensors";
  std::vector<uint8_t> bytes = test::read_bytes(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(header_len));
  const auto& t = header.at(canonical_to_hf_name(canonical));
  const size_t data = 8 + header_len + t.at("data_offsets")[0].get<size_t>();
  if (t.at("dtype") == "F32") {
    std::memcpy(bytes.data() + data + 4 * size_t(index), &value, 4);
  } else {
    ASSERT_EQ(t.at("dtype"), "BF16");
    const uint16_t h = f32_to_bf16(value);
    std::memcpy(bytes.data() + data + 2 * size_t(index), &h, 2);
  }
  test::write_bytes(file, bytes);
}

std::string load_error(const std::string& model_dir, DType runtime, Communicator* comm = nullptr) {
  const auto f = open_model(model_dir);
  try {
    LlamaModel m(*f, runtime, comm);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "<loaded>";
}

struct Case {
  const char* tensor;  // canonical name
  int64_t row, col, n_cols;
  float value;
  DType file_dtype, runtime;
  const char* expected;  // after "<dir>: "
};

TEST(LoadCheck, CleanModelsLoad) {
  for (DType dt : {DType::F32, DType::BF16}) {
    test::TempDir dir;
    const std::string m = synth(dir, dt);
    EXPECT_EQ(load_error(m, DType::BF16), "<loaded>");
    EXPECT_EQ(load_error(m, DType::F32), "<loaded>");
  }
}

TEST(LoadCheck, NonFiniteWeightIsRefusedNamingTensorAndElement) {
  const Case cases[] = {
      // the third part of the fused Q|K|V weight (staged through F32)
      {"blk.1.attn_v.weight", 5, 7, 64, kNan, DType::F32, DType::F32,
       "model.layers.1.self_attn.v_proj.weight (blk.1.attn_v.weight): holds NaN at [5, 7] (element 327): every "
       "weight must be finite"},
      // the second part of gate|up, a BF16 runtime
      {"blk.0.ffn_up.weight", 95, 63, 64, -kInf, DType::F32, DType::BF16,
       "model.layers.0.mlp.up_proj.weight (blk.0.ffn_up.weight): holds -inf at [95, 63] (element 6143)"},
      // a norm vector
      {"blk.0.ffn_norm.weight", 0, 10, 64, kInf, DType::F32, DType::F32,
       "model.layers.0.post_attention_layernorm.weight (blk.0.ffn_norm.weight): holds inf at [10]: every weight"},
      // the lm_head, converted straight from the file
      {"output.weight", 299, 0, 64, kNan, DType::F32, DType::BF16, "lm_head.weight (output.weight): holds NaN at [299, 0]"},
      // the untied token embedding, read through the mapping
      {"token_embd.weight", 3, 1, 64, kInf, DType::F32, DType::F32,
       "model.embed_tokens.weight (token_embd.weight): holds inf at [3, 1] (element 193)"},
      // BF16 in the file and at run time: copied, not converted
      {"blk.1.ffn_down.weight", 2, 90, 96, kNan, DType::BF16, DType::BF16,
       "model.layers.1.mlp.down_proj.weight (blk.1.ffn_down.weight): holds NaN at [2, 90] (element 282)"},
      // finite in the file, inf once rounded to BF16
      {"blk.0.attn_q.weight", 1, 2, 64, 3.4e38f, DType::F32, DType::BF16,
       "model.layers.0.self_attn.q_proj.weight (blk.0.attn_q.weight): holds 3.4e+38 at [1, 2] (element 66), which "
       "overflows bf16: every weight must be finite"},
  };
  for (const Case& c : cases) {
    test::TempDir dir;
    const std::string m = synth(dir, c.file_dtype);
    patch(m, c.tensor, c.row * c.n_cols + c.col, c.value);
    const std::string err = load_error(m, c.runtime);
    EXPECT_EQ(err.rfind(m + ": " + c.expected, 0), 0u) << c.tensor << "\n" << err;
  }
}

TEST(LoadCheck, TensorParallelRankNamesTheElementOfTheWholeTensor) {
  // tp 2: rank 1 holds Q heads [2, 4) (attn_output columns [32, 64)) and intermediate rows [48, 96).
  test::TempDir dir;
  const std::string m = synth(dir, DType::F32);
  patch(m, "blk.0.attn_output.weight", 9 * 64 + 40, kNan);
  patch(m, "blk.1.ffn_gate.weight", 10 * 64 + 5, kInf);  // row 10: rank 0's slice only
  SilentGroup r0(0, 2), r1(1, 2);
  EXPECT_EQ(load_error(m, DType::F32, &r1).rfind(m + ": model.layers.0.self_attn.o_proj.weight "
                                                     "(blk.0.attn_output.weight): holds NaN at [9, 40] (element 616)",
                                                 0),
            0u)
      << load_error(m, DType::F32, &r1);
  EXPECT_EQ(load_error(m, DType::F32, &r0).rfind(m + ": model.layers.1.mlp.gate_proj.weight (blk.1.ffn_gate.weight): "
                                                     "holds inf at [10, 5] (element 645)",
                                                 0),
            0u)
      << load_error(m, DType::F32, &r0);
}

}  // namespace
}  // namespace tp
