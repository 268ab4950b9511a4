// rank/quant_vec.h: every vector loop gives the bits of its plain scalar statement (the order the header
// states), whichever clone (AVX-512, AVX2, baseline) the CPU picked; and GPTQ's batched Cholesky
// (rank/quant_gptq.h) gives the bits of the step-by-step one across batch boundaries and is a factor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "rank/quant_gptq.h"
#include "rank/quant_vec.h"

namespace tp {
namespace {

template <typename T>
std::vector<T> normal(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<T> d(0, 1);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = d(g);
  return v;
}

// The documented order of dot4, written out.
double dot4_ref(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(QuantVec, Dot4MatchesScalarOrder) {
  const std::vector<double> a = normal<double>(300, 1), b = normal<double>(300, 2);
  for (int64_t n = 0; n <= 70; ++n)
    EXPECT_TRUE(same_bits(quant_vec::dot4(a.data() + 3, b.data() + 1, n), dot4_ref(a.data() + 3, b.data() + 1, n)))
        << "n " << n;
}

TEST(QuantVec, Dot4ManyAndPrefixMatchDot4) {
  const std::vector<double> a = normal<double>(400, 3), b = normal<double>(400, 4);
  // 19 dots of different starts and lengths (more than one lockstep pass of 8, the shortest 0).
  std::vector<const double*> pa, pb;
  std::vector<int64_t> len;
  for (int i = 0; i < 19; ++i) {
    pa.push_back(a.data() + i);
    pb.push_back(b.data() + 2 * i);
    len.push_back(i == 5 ? 0 : 37 + 11 * i);
  }
  std::vector<double> out(pa.size());
  quant_vec::dot4_many(int(pa.size()), pa.data(), pb.data(), len.data(), out.data());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bits(out[i], dot4_ref(pa[i], pb[i], len[i]))) << "dot " << i;
  // One row against 11 rows: partial sums over the first 64, then each finished at its own length >= 64.
  double s[11][4] = {};
  quant_vec::dot4_prefix(11, a.data(), pb.data(), 64, s);
  for (int i = 0; i < 11; ++i) {
    const int64_t n = 64 + 3 * i;
    EXPECT_TRUE(same_bits(quant_vec::dot4_finish(s[i], a.data(), pb[size_t(i)], 64, n), dot4_ref(a.data(), pb[size_t(i)], n)))
        << "row " << i;
  }
}

TEST(QuantVec, F32LoopsMatchScalar) {
  const std::vector<float> x = normal<float>(203, 5), y0 = normal<float>(203, 6);
  for (int64_t n : {0, 7, 8, 9, 64, 203}) {
    float ref = 0, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += x[size_t(i + k)] * y0[size_t(i + k)];
    for (; i < n; ++i) ref += x[size_t(i)] * y0[size_t(i)];
    for (float v : acc) ref += v;
    const float got = quant_vec::dot8_f32(x.data(), y0.data(), n);
    EXPECT_EQ(std::memcmp(&got, &ref, sizeof ref), 0) << "n " << n;
  }
  std::vector<float> y = y0, z = y0, yr = y0, zr = y0;
  quant_vec::sub_scaled(y.data(), x.data(), 0.37f, 203);
  quant_vec::add_scaled(z.data(), x.data(), -1.9f, 203);
  for (size_t r = 0; r < 203; ++r) {
    const float p = x[r] * 0.37f, q = x[r] * -1.9f;  // rounded products, then the sums: no fused multiply-add
    yr[r] -= p;
    zr[r] += q;
  }
  EXPECT_EQ(std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(z.data(), zr.data(), z.size() * sizeof(float)), 0);
}

TEST(QuantVec, BatchedCholeskyEqualsStepByStep) {
  for (int64_t n : {1, 5, 31, 32, 33, 97}) {
    // A = X Xᵀ / m + I: symmetric positive definite.
    const int64_t m = 2 * n + 3;
    const std::vector<double> x = normal<double>(n * m, uint32_t(n));
    std::vector<double> a(size_t(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? 1.0 : 0.0;
        for (int64_t k = 0; k < m; ++k) s += x[size_t(i * m + k)] * x[size_t(j * m + k)] / double(m);
        a[size_t(i * n + j)] = s;
      }
    // Step by step (the textbook order, every sum a dot4).
    std::vector<double> ref = a;
    for (int64_t j = 0; j < n; ++j) {
      double* rj = ref.data() + j * n;
      const double d = std::sqrt(rj[j] - dot4_ref(rj, rj, j));
      rj[j] = d;
      for (int64_t i = j + 1; i < n; ++i) ref[size_t(i * n + j)] = (ref[size_t(i * n + j)] - dot4_ref(ref.data() + i * n, rj, j)) / d;
      for (int64_t k = j + 1; k < n; ++k) rj[k] = 0;
    }
    std::vector<double> l = a;
    ASSERT_TRUE(cholesky_lower(l, n));
    EXPECT_EQ(std::memcmp(l.data(), ref.data(), l.size() * sizeof(double)), 0) << "n " << n;
    double worst = 0;  // L Lᵀ = A
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += l[size_t(i * n + k)] * l[size_t(j * n + k)];
        worst = std::max(worst, std::fabs(s - a[size_t(i * n + j)]));
      }
    EXPECT_LT(worst, 1e-12) << "n " << n;
  }
}

}  // namespace
}  // namespace tp
