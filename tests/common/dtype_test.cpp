// Scalar conversions and block dequantization against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"

namespace tp {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0)
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf / nan
    const float f = f16_to_f32(uint16_t(h));
    ASSERT_EQ(f32_to_f16(f), uint16_t(h)) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

// The first rows of one tensor of each type from llama.cpp's files, decoded by llama.cpp's gguf-py: Q5_1 and Q5_K
// from its Q5_K_M of SmolLM2 (tests/peers/make_q5_fixture.sh), Q2_K, Q3_K, IQ4_NL and IQ4_XS from a synthetic model
// it quantized (tests/peers/make_lowbit_fixture.sh) — ours must give the same values: exactly, up to float rounding
// of d · sc · q − dmin · m in another order (bound 1e-6 of the row's largest value) [measured: exact].
void expect_rows_equal_gguf_py(const std::string& fixture, const std::vector<DType>& types) {
  std::ifstream in(std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/" + fixture);
  ASSERT_TRUE(in.good()) << "missing tests/peers/fixtures/" << fixture;
  const auto fx = nlohmann::json::parse(in);
  std::map<DType, int> seen;
  for (const auto& [name, sample] : fx.at("samples").items()) {
    SCOPED_TRACE(name);
    const DType t = parse_dtype(sample.at("type").get<std::string>());
    seen[t]++;
    const int64_t n = sample.at("row_len");
    for (const auto& row : sample.at("rows")) {
      const std::string hex = row.at("bytes");
      ASSERT_EQ(int64_t(hex.size()) / 2, dtype_row_bytes(t, n));
      std::vector<uint8_t> bytes(hex.size() / 2);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      const auto want = row.at("values").get<std::vector<float>>();
      std::vector<float> got(static_cast<size_t>(n), 0.0f);
      dequantize_row(t, bytes.data(), got.data(), n);
      float scale = 0, worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        scale = std::max(scale, std::fabs(want[size_t(i)]));
        worst = std::max(worst, std::fabs(got[size_t(i)] - want[size_t(i)]));
      }
      EXPECT_LE(worst, 1e-6f * scale) << "max |ours - gguf-py| " << worst << " of max " << scale;
    }
  }
  for (DType t : types) EXPECT_EQ(seen[t], 1) << dtype_name(t);
  EXPECT_EQ(seen.size(), types.size());
}

TEST(DType, DequantizeQ5TypesEqualGgufPy) {
  expect_rows_equal_gguf_py("quant_q5_k_m.json", {DType::Q5_1, DType::Q5_K});
  EXPECT_EQ(dtype_block_bytes(DType::Q5_1), 24);
  EXPECT_EQ(dtype_block_bytes(DType::Q5_K), 176);
  EXPECT_EQ(dtype_block_elems(DType::Q5_K), 256);
}

TEST(DType, DequantizeLowBitTypesEqualGgufPy) {
  expect_rows_equal_gguf_py("quant_lowbit.json", {DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS});
  for (auto [t, bytes, elems] : {std::tuple{DType::Q2_K, 84, 256},
                                 {DType::Q3_K, 110, 256},
                                 {DType::IQ4_NL, 18, 32},
                                 {DType::IQ4_XS, 136, 256}}) {
    EXPECT_EQ(dtype_block_bytes(t), bytes) << dtype_name(t);
    EXPECT_EQ(dtype_block_elems(t), elems) << dtype_name(t);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
}

TEST(DType, DequantizeQ4_1) {
  uint8_t block[20];
  const uint16_t d = f32_to_f16(0.5f), m = f32_to_f16(-1.0f);
  std::memcpy(block, &d, 2);
  std::memcpy(block + 2, &m, 2);
  for (int j = 0; j < 16; ++j) block[4 + j] = uint8_t((j & 0xf) | ((15 - j) << 4));
  float out[32];
  dequantize_row(DType::Q4_1, block, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 1.0f);
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j) - 1.0f);
  }
}

TEST(DType, DequantizeQ4_0AndQ8_0) {
  uint8_t q4[18];
  const uint16_t d = f32_to_f16(2.0f);
  std::memcpy(q4, &d, 2);
  for (int j = 0; j < 16; ++j) q4[2 + j] = uint8_t(j | (j << 4));
  float out[32];
  dequantize_row(DType::Q4_0, q4, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8));
    EXPECT_EQ(out[j + 16], 2.0f * (j - 8));
  }
  uint8_t q8[34];
  std::memcpy(q8, &d, 2);
  for (int j = 0; j < 32; ++j) q8[2 + j] = uint8_t(int8_t(j - 16));
  dequantize_row(DType::Q8_0, q8, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 2.0f * (j - 16));
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(parse_dtype("q5_k"), DType::Q5_K);
  EXPECT_THROW(parse_dtype("iq2_xxs"), InputError);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_1, 64), 40);
  EXPECT_EQ(dtype_row_bytes(DType::F16, 3), 6);
}

}  // namespace
}  // namespace tp
