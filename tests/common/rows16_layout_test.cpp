// FP4 weight layouts (common/fp4_layout.h): Rows16's bytes where its comment puts them, read back by an index
// computed here from that comment; to Rows16 and back gives the checkpoint's bytes; dequantize_rows reads both
// layouts alike; the refusals (set_fp4_layout, check_packed_weight).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fp4_layout.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

PackedWeight random_fp4(WeightFormat f, int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  PackedWeight w;
  w.format = f;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * n_in / 2);
  for (int64_t i = 0; i < w.data.size(); ++i) w.data.data()[i] = uint8_t(rng());
  const bool mx = f == WeightFormat::Mxfp4;
  w.scale_bytes.resize(size_t(n_out * (n_in / (mx ? 32 : 16))));
  for (uint8_t& b : w.scale_bytes) b = mx ? uint8_t(110 + rng() % 30) : uint8_t(rng() % 0x7f);  // no edge bytes
  w.global_scale = 0.75f;
  check_packed_weight(w);
  return w;
}

std::vector<float> dequant(const PackedWeight& w, int64_t r0, int64_t r1) {
  std::vector<float> d(size_t((r1 - r0) * w.n_in));
  dequantize_rows(w, r0, r1, d.data());
  return d;
}

TEST(Fp4Layout, Rows16HoldsEachCodeAndScaleWhereDocumentedAndComesBack) {
  struct Shape {
    WeightFormat f;
    int64_t n_out, n_in;
  };
  for (const Shape s : {Shape{WeightFormat::Nvfp4, 35, 96}, Shape{WeightFormat::Mxfp4, 16, 64},
                        Shape{WeightFormat::Mxfp4, 1, 32}, Shape{WeightFormat::Nvfp4, 19, 576}}) {
    const std::string name = std::string(weight_format_name(s.f)) + " [" + std::to_string(s.n_out) + ", " +
                             std::to_string(s.n_in) + "]";
    const bool mx = s.f == WeightFormat::Mxfp4;
    const PackedWeight given = random_fp4(s.f, s.n_out, s.n_in, uint32_t(s.n_out * s.n_in));
    PackedWeight w = copy_packed_weight(given);
    set_fp4_layout(&w, Fp4Layout::Rows16);
    EXPECT_EQ(w.fp4_layout, Fp4Layout::Rows16);
    check_packed_weight(w);
    const int64_t held = (s.n_out + 15) / 16 * 16, nb = s.n_in / (mx ? 32 : 16), chunks = s.n_in / 8;
    ASSERT_EQ(w.data.size(), held * s.n_in / 2) << name;
    ASSERT_EQ(int64_t(w.scale_bytes.size()), held * nb) << name;
    EXPECT_EQ(w.n_bytes(), given.n_bytes() + (held - s.n_out) * (s.n_in / 2 + nb)) << name;
    for (int64_t r = 0; r < held; ++r) {
      const int64_t rb = r / 16, i = r % 16;
      for (int64_t k = 0; k < s.n_in; ++k) {  // word 2i + t of chunk k / 8, nibble n: column k0 + 2n + t
        const int64_t n = (k % 8) / 2, t = k % 2;
        const uint8_t* word = w.data.data() + (rb * chunks + k / 8) * 64 + 2 * (2 * i + t);
        const int code = ((word[0] | word[1] << 8) >> (4 * n)) & 15;
        const int want = r < s.n_out ? (given.data.data()[r * s.n_in / 2 + k / 2] >> (4 * (k % 2))) & 15 : 0;
        ASSERT_EQ(code, want) << name << " row " << r << " column " << k;
      }
      for (int64_t b = 0; b < nb; ++b)
        ASSERT_EQ(w.scale_bytes[size_t((rb * nb + b) * 16 + i)],
                  r < s.n_out ? given.scale_bytes[size_t(r * nb + b)] : (mx ? 127 : 0))
            << name << " row " << r << " block " << b;
    }
    EXPECT_EQ(dequant(w, 0, s.n_out), dequant(given, 0, s.n_out)) << name;
    if (s.n_out > 3) {
      EXPECT_EQ(dequant(w, 2, s.n_out - 1), dequant(given, 2, s.n_out - 1)) << name;
    }
    set_fp4_layout(&w, Fp4Layout::Rows);
    EXPECT_EQ(w.fp4_layout, Fp4Layout::Rows);
    check_packed_weight(w);
    ASSERT_EQ(w.data.size(), given.data.size()) << name;
    EXPECT_EQ(0, std::memcmp(w.data.data(), given.data.data(), size_t(given.data.size()))) << name;
    EXPECT_EQ(w.scale_bytes, given.scale_bytes) << name;
  }
  EXPECT_STREQ(fp4_layout_name(Fp4Layout::Rows16), "rows16");
  EXPECT_STREQ(fp4_layout_name(Fp4Layout::Rows), "rows");
}

// What Rows16 cannot hold is refused, naming why, and the weight is left as it was; check_packed_weight refuses a
// Rows16 weight that does not fit it.
TEST(Fp4Layout, RefusesWhatRows16CannotHold) {
  auto refused = [](PackedWeight w, const std::string& needle) {
    const PackedWeight before = copy_packed_weight(w);
    try {
      set_fp4_layout(&w, Fp4Layout::Rows16);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(w.fp4_layout, Fp4Layout::Rows);
    EXPECT_EQ(w.scale_bytes, before.scale_bytes);
    EXPECT_EQ(0, std::memcmp(w.data.data(), before.data.data(), size_t(w.data.size())));
  };
  refused(random_fp4(WeightFormat::Nvfp4, 4, 48, 1), "n_in is not a multiple of 32");
  for (const uint8_t b : {uint8_t(0x7f), uint8_t(0xff)}) {
    PackedWeight w = random_fp4(WeightFormat::Nvfp4, 4, 64, 2);
    w.scale_bytes[5] = b;
    refused(std::move(w), "an E4M3 scale byte that is NaN");
  }
  for (const uint8_t b : {uint8_t(0), uint8_t(255)}) {
    PackedWeight w = random_fp4(WeightFormat::Mxfp4, 4, 64, 3);
    w.scale_bytes[2] = b;
    refused(std::move(w), "an E8M0 scale byte 0 or 255");
  }
  PackedWeight int8;
  int8.format = WeightFormat::Int8;
  EXPECT_THROW(set_fp4_layout(&int8, Fp4Layout::Rows16), Error);

  auto check_refuses = [](const PackedWeight& w, const std::string& needle) {
    try {
      check_packed_weight(w);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PackedWeight w = random_fp4(WeightFormat::Nvfp4, 5, 64, 4);
  PackedWeight unpadded = copy_packed_weight(w);
  unpadded.fp4_layout = Fp4Layout::Rows16;  // Rows' sizes: 5 rows, not 16
  check_refuses(unpadded, "data holds 160 bytes, expected 512");
  set_fp4_layout(&w, Fp4Layout::Rows16);
  PackedWeight nan = copy_packed_weight(w);
  nan.scale_bytes[7] = 0x7f;
  check_refuses(nan, "holds a scale byte its decode does not take");
  PackedWeight bf16;
  bf16.format = WeightFormat::BF16;
  bf16.n_out = 1;
  bf16.n_in = 32;
  bf16.data = AlignedBytes(64);
  bf16.fp4_layout = Fp4Layout::Rows16;
  check_refuses(bf16, "FP4 layout rows16 is for weight-only MXFP4 / NVFP4");
}

}  // namespace
}  // namespace tp
