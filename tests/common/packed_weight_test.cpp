// PackedWeight: the small float formats bit for bit, the reference dequantization of every format against
// values written by hand, and check_packed_weight's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

TEST(FpFormats, E4M3EveryCodeRoundTrips) {
  int n_nan = 0;
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e4m3_to_f32(uint8_t(v));
    if (std::isnan(f)) {
      ++n_nan;
      continue;
    }
    const uint8_t back = f32_to_fp8_e4m3(f);
    EXPECT_EQ(fp8_e4m3_to_f32(back), f) << v;  // -0 and +0 both decode to 0
  }
  EXPECT_EQ(n_nan, 2);  // S.1111.111
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xC0), -2.0f);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7E);  // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xFE);
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1.0625f)), 1.0f);   // halfway between 1 and 1.125: to even
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1.1875f)), 1.25f);  // halfway between 1.125 and 1.25: to even
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(FpFormats, E2M1AndE8M0) {
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint8_t i = 0; i < 16; ++i) {
    EXPECT_EQ(e2m1_to_f32(i), (i & 8 ? -1.0f : 1.0f) * values[i & 7]) << int(i);
    if (i != 8) {  // -0 encodes as +0
      EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(i)), i) << int(i);
    }
  }
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);   // saturates to 6
  EXPECT_EQ(f32_to_e2m1(2.5f), 4);     // halfway 2 / 3: the even code (2)
  EXPECT_EQ(f32_to_e2m1(0.7f), 1);
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

std::vector<float> dequant(const PackedWeight& w) {
  std::vector<float> out(size_t(w.n_out * w.n_in));
  dequantize_rows(w, 0, w.n_out, out.data());
  return out;
}

TEST(PackedWeight, Int4GroupsZerosAndActOrder) {
  PackedWeight w;
  w.format = WeightFormat::Int4;
  w.n_out = 2;
  w.n_in = 4;
  w.group_size = 2;
  w.data = AlignedBytes(2 * 2);
  // Row 0: q = -8, 7, 0, 1 (u = q + 8: 0, 15, 8, 9; column 2j in the low nibble).
  w.data.data()[0] = uint8_t(0 | 15 << 4);
  w.data.data()[1] = uint8_t(8 | 9 << 4);
  // Row 1: q = 1, 2, 3, 4.
  w.data.data()[2] = uint8_t(9 | 10 << 4);
  w.data.data()[3] = uint8_t(11 | 12 << 4);
  w.scales = {0.5f, 2.0f, 1.0f, 0.25f};
  check_packed_weight(w);
  EXPECT_EQ(dequant(w), (std::vector<float>{-4, 3.5f, 0, 2, 1, 2, 0.75f, 1}));
  w.zeros = {1, 0, -1, 2};  // w = (q - zero) * scale
  EXPECT_EQ(dequant(w), (std::vector<float>{-4.5f, 3, 0, 2, 2, 3, 0.25f, 0.5f}));
  w.zeros.clear();
  w.g_idx = {1, 0, 0, 1};  // act-order: column c uses group g_idx[c]
  EXPECT_EQ(dequant(w), (std::vector<float>{-16, 3.5f, 0, 2, 0.25f, 2, 3, 1}));
  EXPECT_EQ(w.n_bytes(), 4 + 4 * 4 + 4 * 4);
}

TEST(PackedWeight, Fp8ScalesPerTensorChannelAndBlock) {
  PackedWeight w;
  w.format = WeightFormat::Fp8E4M3;
  w.n_out = 3;
  w.n_in = 4;
  w.data = AlignedBytes(12);
  for (int i = 0; i < 12; ++i) w.data.data()[i] = f32_to_fp8_e4m3(float(i % 4) - 1.5f);  // -1.5 -0.5 0.5 1.5
  w.scales = {2.0f};
  check_packed_weight(w);
  EXPECT_EQ(dequant(w)[3], 3.0f);
  w.scales = {1.0f, 2.0f, 4.0f};
  EXPECT_EQ(dequant(w)[4 * 2 + 0], -6.0f);
  w.block_out = 2;
  w.group_size = 2;
  w.scales = {1, 10, 100, 1000};  // blocks of 2 x 2: [rows 0-1 | row 2] x [cols 0-1 | cols 2-3]
  check_packed_weight(w);
  const std::vector<float> d = dequant(w);
  EXPECT_EQ(d[1 * 4 + 3], 15.0f);
  EXPECT_EQ(d[2 * 4 + 0], -150.0f);
  EXPECT_EQ(d[2 * 4 + 2], 500.0f);
}

TEST(PackedWeight, MxAndNvFp4Blocks) {
  PackedWeight mx;
  mx.format = WeightFormat::Mxfp4;
  mx.n_out = 1;
  mx.n_in = 32;
  mx.data = AlignedBytes(16);
  for (int j = 0; j < 16; ++j) mx.data.data()[j] = uint8_t(f32_to_e2m1(1.5f) | f32_to_e2m1(-6.0f) << 4);
  mx.scale_bytes = {129};  // 2^2
  check_packed_weight(mx);
  const std::vector<float> m = dequant(mx);
  EXPECT_EQ(m[0], 6.0f);
  EXPECT_EQ(m[1], -24.0f);
  PackedWeight nv;
  nv.format = WeightFormat::Nvfp4;
  nv.n_out = 1;
  nv.n_in = 32;
  nv.data = AlignedBytes(16);
  for (int j = 0; j < 16; ++j) nv.data.data()[j] = uint8_t(f32_to_e2m1(3.0f) | f32_to_e2m1(0.5f) << 4);
  nv.scale_bytes = {f32_to_fp8_e4m3(2.0f), f32_to_fp8_e4m3(0.25f)};  // one per 16 columns
  nv.global_scale = 0.5f;
  check_packed_weight(nv);
  const std::vector<float> v = dequant(nv);
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[1], 0.5f);
  EXPECT_EQ(v[16], 0.375f);
}

TEST(PackedWeight, GgufBlocksDequantizeAsTheirDtype) {
  PackedWeight w;
  w.format = WeightFormat::GgufQ8_0;
  w.n_out = 2;
  w.n_in = 32;
  w.data = AlignedBytes(2 * 34);
  for (int r = 0; r < 2; ++r) {
    const uint16_t d = f32_to_f16(0.5f * float(r + 1));
    std::memcpy(w.data.data() + r * 34, &d, 2);
    for (int j = 0; j < 32; ++j) w.data.data()[r * 34 + 2 + j] = uint8_t(int8_t(j - 16));
  }
  check_packed_weight(w);
  const std::vector<float> d = dequant(w);
  EXPECT_EQ(d[0], -8.0f);
  EXPECT_EQ(d[32 + 31], 15.0f);
  EXPECT_EQ(w.row_bytes(), 34);
}

TEST(PackedWeight, CheckRefusesWhatDoesNotFit) {
  auto refused = [](auto mutate, const char* needle) {
    PackedWeight w;
    w.format = WeightFormat::Int8;
    w.n_out = 2;
    w.n_in = 4;
    w.group_size = 4;
    w.data = AlignedBytes(8);
    w.scales = {1, 1};
    check_packed_weight(w);  // valid before the mutation
    mutate(w);
    try {
      check_packed_weight(w);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([](PackedWeight& w) { w.scales.push_back(1); }, "3 scales, expected 2");
  refused([](PackedWeight& w) { w.data = AlignedBytes(7); }, "data holds 7 bytes, expected 8");
  refused([](PackedWeight& w) { w.zeros = {0}; }, "1 zero points");
  refused([](PackedWeight& w) { w.g_idx = {0, 0, 1, 0}; }, "g_idx value 1 is not a group");
  refused([](PackedWeight& w) { w.group_size = 0; }, "group_size 0");
  refused([](PackedWeight& w) { w.act = ActQuant::Int8Static; }, "positive act_scale");
  refused([](PackedWeight& w) { w.act_group = 2; }, "act_group 2 is for dynamic");
  refused([](PackedWeight& w) { w.g_idx_groups = 3; }, "g_idx_groups without g_idx");
  refused([](PackedWeight& w) { w.act = ActQuant::Int8Dynamic, w.act_bf16 = true; },
          "BF16 activations (act_bf16) are for weight-only formats (GGUF's in layout rows16 only), not int8 in layout "
          "rows with activation quantization int8_dynamic");
  refused([](PackedWeight& w) { w.format = WeightFormat::GgufQ8_0, w.n_in = 32, w.data = AlignedBytes(68),
                                w.scales.clear(), w.act_bf16 = true; }, "not q8_0 in layout rows with activation quantization none");
  refused([](PackedWeight& w) { w.format = WeightFormat::Mxfp4, w.data = AlignedBytes(4), w.scales.clear(),
                                w.scale_bytes = {127, 127}, w.act = ActQuant::Int8Dynamic; }, "not a multiple of the 32");
  refused([](PackedWeight& w) { w.format = WeightFormat::BF16, w.data = AlignedBytes(16); }, "scales on a format");
  refused([](PackedWeight& w) { w.format = WeightFormat::Fp8E4M3, w.zeros = {0, 0}; }, "zero points or g_idx");
  refused([](PackedWeight& w) {
    w.format = WeightFormat::GgufQ4_0;
    w.scales.clear();
  }, "not a multiple of the 32-column block");
}

// An act-order slice holds the groups its columns use (g_idx_groups), which may exceed n_in / group_size.
TEST(PackedWeight, ActOrderSliceGroups) {
  PackedWeight w;
  w.format = WeightFormat::Int8;
  w.n_out = 1;
  w.n_in = 2;
  w.group_size = 2;
  w.data = AlignedBytes(2);
  w.data.data()[0] = 3;
  w.data.data()[1] = uint8_t(int8_t(-2));
  w.g_idx = {2, 0};
  w.g_idx_groups = 3;
  w.scales = {0.5f, 7.0f, 0.25f};
  check_packed_weight(w);
  EXPECT_EQ(w.n_groups(), 3);
  std::vector<float> d(2);
  dequantize_rows(w, 0, 1, d.data());
  EXPECT_EQ(d, (std::vector<float>{0.75f, -1.0f}));
}

// copy_packed_weight: every field equal, the bytes equal in a buffer of their own.
TEST(PackedWeight, CopyHasEveryFieldAndItsOwnBytes) {
  PackedWeight w;
  w.format = WeightFormat::Int4;
  w.n_out = 2;
  w.n_in = 4;
  w.group_size = 2;
  w.block_out = 3;
  w.data = AlignedBytes(4);
  for (int i = 0; i < 4; ++i) w.data.data()[i] = uint8_t(17 * i + 1);
  w.scales = {0.5f, 2.0f, 1.0f, 0.25f, 4.0f, 8.0f};
  w.zeros = {1, 0, -1, 2, 3, 4};
  w.g_idx = {2, 0, 1, 1};
  w.g_idx_groups = 3;
  w.scale_bytes = {7, 9};
  w.global_scale = 0.125f;
  w.act = ActQuant::Int8Static;
  w.act_scale = 0.03f;
  w.act_group = 2;
  w.act_bf16 = true;
  w.gguf_layout = GgufLayout::Q8_0Quads;
  w.rows_layout = RowsLayout::Rows16;
  const PackedWeight c = copy_packed_weight(w);
  EXPECT_EQ(c.format, w.format);
  EXPECT_EQ(c.n_out, w.n_out);
  EXPECT_EQ(c.n_in, w.n_in);
  EXPECT_EQ(c.group_size, w.group_size);
  EXPECT_EQ(c.block_out, w.block_out);
  ASSERT_EQ(c.data.size(), w.data.size());
  EXPECT_NE(c.data.data(), w.data.data());
  EXPECT_EQ(std::memcmp(c.data.data(), w.data.data(), 4), 0);
  EXPECT_EQ(c.scales, w.scales);
  EXPECT_EQ(c.zeros, w.zeros);
  EXPECT_EQ(c.g_idx, w.g_idx);
  EXPECT_EQ(c.g_idx_groups, w.g_idx_groups);
  EXPECT_EQ(c.scale_bytes, w.scale_bytes);
  EXPECT_EQ(c.global_scale, w.global_scale);
  EXPECT_EQ(c.act, w.act);
  EXPECT_EQ(c.act_scale, w.act_scale);
  EXPECT_EQ(c.act_group, w.act_group);
  EXPECT_EQ(c.act_bf16, w.act_bf16);
  EXPECT_EQ(c.gguf_layout, w.gguf_layout);
  EXPECT_EQ(c.rows_layout, w.rows_layout);
  const PackedWeight e = copy_packed_weight(PackedWeight{});  // no bytes: nothing to copy
  EXPECT_EQ(e.data.size(), 0);
}

TEST(PackedWeight, NamesBitsAndAlignment) {
  EXPECT_EQ(weight_format_name(WeightFormat::Nvfp4), "nvfp4");
  EXPECT_EQ(act_quant_name(ActQuant::Fp8Dynamic), "fp8_dynamic");
  EXPECT_EQ(weight_format_bits(WeightFormat::Int4, 64), 4.5);
  EXPECT_EQ(weight_format_bits(WeightFormat::GgufQ8_0, 0), 8.5);
  EXPECT_EQ(weight_column_align(WeightFormat::Int4, 128), 128);
  EXPECT_EQ(weight_column_align(WeightFormat::GgufQ4_K, 0), 256);
  EXPECT_EQ(weight_column_align(WeightFormat::Mxfp4, 0), 32);
  EXPECT_EQ(weight_column_align(WeightFormat::BF16, 0), 1);
}

}  // namespace
}  // namespace tp
