// detail::round_bf16 and round_bf16_f32 (kernels/cpu/bf16_round.h) against the scalar f32_to_bf16 (the latter
// widened back to F32, also in place), bit for bit: ties to even,
// carries into the exponent and to infinity, NaNs (quieted), infinities, ±0, subnormals (kept, where vcvtneps2bf16
// would flush them: a fast path with it measured no faster in a BF16 prefill, the conversion being memory-bound),
// each at every position of a 16-lane vector and in the scalar tail, and random values — on the path this CPU takes
// (AVX-512, AVX2 or the scalar loop).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/bf16_round.h"

namespace tp::cpu {
namespace {

TEST(RoundBf16, MatchesScalarRuleOnSpecialValues) {
  const std::vector<uint32_t> specials = {
      0x00000000u, 0x80000000u,                            // ±0
      0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u,  // subnormals, ties among them
      0x007fffffu, 0x807fffffu, 0x00400000u,               // the largest subnormal, rounding up to the smallest normal
      0x00800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,  // normals: ties to even down and up, round up
      0x3f7fffffu, 0x7f7fffffu, 0xff7fffffu,               // carry into the exponent, to ±infinity
      0x7f800000u, 0xff800000u,                            // ±infinity
      0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fa5a5a5u,  // quiet and signalling NaNs with payloads
  };
  for (size_t lane = 0; lane < 17; ++lane)  // each special at each vector lane, then in a tail
    for (uint32_t bits : specials) {
      std::vector<float> x(33, 1.5f);
      x[lane] = std::bit_cast<float>(bits);
      x[32] = std::bit_cast<float>(bits);
      std::vector<uint16_t> got(x.size());
      detail::round_bf16(x.data(), int64_t(x.size()), got.data());
      std::vector<float> wide = x;
      detail::round_bf16_f32(wide.data(), int64_t(wide.size()), wide.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(got[i], f32_to_bf16(x[i])) << std::hex << "input 0x" << bits << " lane " << std::dec << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), uint32_t(f32_to_bf16(x[i])) << 16)
            << std::hex << "input 0x" << bits << " lane " << std::dec << i;
      }
    }
}

TEST(RoundBf16, MatchesScalarRuleOnRandomBits) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 15, 16, 17, 1000, 4099}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = std::bit_cast<float>(uint32_t(rng()));
    std::vector<uint16_t> got(x.size());
    detail::round_bf16(x.data(), n, got.data());
    std::vector<float> wide(x.size());
    detail::round_bf16_f32(x.data(), n, wide.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], f32_to_bf16(x[i])) << "n " << n << " i " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), uint32_t(f32_to_bf16(x[i])) << 16) << "n " << n << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tp::cpu
