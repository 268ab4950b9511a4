// Our GGUF quantization against llama-quantize's (tests/peers/fixtures/quant_*.json, made by
// tests/peers/make_fixtures.sh from the F32 GGUF): for every tensor of every mix, the type we choose equals
// llama-quantize's (rank/gguf_quant_mix), and the bytes our reference quantizers write (kernels/cpu/
// gguf_quantize) equal llama-quantize's — compared by CRC-32 over the whole tensor and byte for byte on the
// fixture's sample rows. Where they differ, the test counts the differing tensors and blocks and the largest
// difference of the dequantized values, and holds them to what was measured: every one of the 211 quantized
// tensors of every mix (Q8_0, Q4_0, Q4_1, Q4_K_M, pure Q4_K, pure Q6_K) is bit-identical, so the bound is 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/gguf_quantize.h"
#include "rank/gguf_file.h"
#include "rank/gguf_quant_mix.h"
#include "rank/model_file.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::crc32;

std::vector<uint8_t> from_hex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

struct Mix {
  const char* fixture;  // tests/peers/fixtures/quant_<fixture>.json
  GgufQuantMix mix;
  int max_tensors_differing;  // measured 0 for every mix
};

void PrintTo(const Mix& m, std::ostream* os) { *os << m.fixture; }

class QuantPeer : public ::testing::TestWithParam<Mix> {};

TEST_P(QuantPeer, TypesAndBlocksEqualLlamaQuantize) {
  const Mix& mx = GetParam();
  const std::string fx_path = std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/quant_" + mx.fixture + ".json";
  std::ifstream in(fx_path);
  ASSERT_TRUE(in) << "missing " << fx_path << ": run tests/peers/make_fixtures.sh";
  const nlohmann::json fx = nlohmann::json::parse(in);
  const std::string f32_path = std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.F32.gguf";
  ASSERT_TRUE(std::filesystem::exists(f32_path)) << f32_path << " is missing: run launch/setup";
  auto f = open_model(f32_path);
  const bool has_output = f->find("output.weight") != nullptr;

  int n_tensors = 0, n_differ = 0, n_sample_blocks = 0, n_sample_blocks_differ = 0;
  float worst = 0;
  for (const auto& [name, e] : fx.at("tensors").items()) {
    const TensorView* t = f->find(name);
    ASSERT_NE(t, nullptr) << name;
    const DType theirs = ggml_to_dtype(GgmlType(e.at("type").get<uint32_t>()));
    if (t->shape.size() < 2) {
      EXPECT_EQ(theirs, DType::F32) << name;
      continue;
    }
    const int64_t cols = t->shape.back(), rows = t->n_elems() / cols;
    const bool output = name == "output.weight" || (!has_output && name == "token_embd.weight");
    const DType ours = gguf_mix_type(mx.mix, name, cols, f->config().n_layers, output);
    ASSERT_EQ(ours, theirs) << name << ": we choose " << dtype_name(ours) << ", llama-quantize " << dtype_name(theirs);
    if (!is_quantized(ours)) continue;
    ++n_tensors;
    const int64_t rb = dtype_row_bytes(ours, cols);
    std::vector<uint8_t> q(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r)
      cpu::quantize_row_gguf(ours, reinterpret_cast<const float*>(t->data) + r * cols, q.data() + r * rb, cols);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32(q.data(), q.size()));
    if (crc != e.at("crc32").get<std::string>()) ++n_differ;
    if (e.contains("sample_hex")) {
      const std::vector<uint8_t> ref = from_hex(e.at("sample_hex"));
      const int64_t n_rows = e.at("sample_rows").get<int64_t>();
      ASSERT_EQ(int64_t(ref.size()), n_rows * rb) << name;
      const int64_t bb = dtype_block_bytes(ours), be = dtype_block_elems(ours);
      std::vector<float> a(static_cast<size_t>(be)), b(static_cast<size_t>(be));
      for (int64_t k = 0; k < int64_t(ref.size()) / bb; ++k) {
        ++n_sample_blocks;
        if (std::memcmp(q.data() + k * bb, ref.data() + k * bb, size_t(bb)) == 0) continue;
        ++n_sample_blocks_differ;
        dequantize_row(ours, q.data() + k * bb, a.data(), be);
        dequantize_row(ours, ref.data() + k * bb, b.data(), be);
        for (int64_t i = 0; i < be; ++i) worst = std::max(worst, std::fabs(a[size_t(i)] - b[size_t(i)]));
      }
    }
  }
  std::printf("[quant_peer] %s: %d quantized tensors, %d differ from llama-quantize's (CRC-32); sample rows: %d of %d "
              "blocks differ, max |dequantized difference| %.3g\n",
              mx.fixture, n_tensors, n_differ, n_sample_blocks_differ, n_sample_blocks, double(worst));
  EXPECT_GT(n_tensors, 200);
  EXPECT_LE(n_differ, mx.max_tensors_differing);
}

INSTANTIATE_TEST_SUITE_P(LlamaQuantize, QuantPeer,
                         ::testing::Values(Mix{"q8_0", GgufQuantMix::Q8_0, 0}, Mix{"q4_0", GgufQuantMix::Q4_0, 0},
                                           Mix{"q4_1", GgufQuantMix::Q4_1, 0},
                                           Mix{"q4_k_m", GgufQuantMix::Q4_K_M, 0},
                                           Mix{"q4_k_pure", GgufQuantMix::Q4_K, 0},
                                           Mix{"q6_k_pure", GgufQuantMix::Q6_K, 0}),
                         [](const auto& info) { return std::string(info.param.fixture); });

}  // namespace
}  // namespace tp
