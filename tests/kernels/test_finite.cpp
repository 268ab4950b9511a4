// first_non_finite against a naive scan: NaN, +inf, -inf at every kind of position (first, last, chunk
// boundaries, two bad elements in different chunks of a buffer scanned by several threads), for F32, BF16 and
// F16 buffers; finite extremes (max, denormals, -0) are not reported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/cpu/finite.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The buffer in `type`: F32 as is, BF16 / F16 converted (NaN and inf survive both conversions).
std::vector<uint8_t> encode(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * (type == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < x.size(); ++i) {
    if (type == DType::F32) {
      std::memcpy(out.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = type == DType::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

int64_t naive(const std::vector<float>& x) {
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return int64_t(i);
  return -1;
}

TEST(FirstNonFinite, AgreesWithANaiveScan) {
  set_num_threads(2);
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(65536), int64_t(65537), int64_t(3) << 20}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float((i * 37) % 101) * 0.01f - 0.5f;
      x[0] = -0.0f;
      if (n > 3) x[size_t(n / 2)] = type == DType::F16 ? 65504.0f : 1e30f * (type == DType::F32 ? 1e8f : 1.0f);
      EXPECT_EQ(first_non_finite(type, encode(type, x).data(), n), -1) << dtype_name(type) << " n " << n;
      std::vector<int64_t> positions = {0, n - 1, n / 2, n / 3};
      if (n > 65536) positions.insert(positions.end(), {65535, 65536, n - 65536});
      for (int64_t p : positions) {
        for (float bad : {kNan, kInf, -kInf}) {
          std::vector<float> y = x;
          y[size_t(p)] = bad;
          if (p + 70000 < n) y[size_t(p + 70000)] = kNan;  // a later one, in another chunk: the first is reported
          EXPECT_EQ(first_non_finite(type, encode(type, y).data(), n), naive(y))
              << dtype_name(type) << " n " << n << " at " << p << " value " << bad;
          EXPECT_EQ(naive(y), p);
        }
      }
    }
  }
}

TEST(FirstNonFinite, QuantizedTypesAreRefused) {
  const uint8_t block[34] = {};
  EXPECT_THROW(first_non_finite(DType::Q8_0, block, 32), InputError);
  EXPECT_EQ(first_non_finite(DType::F32, block, 0), -1);
}

}  // namespace
}  // namespace tp::cpu
