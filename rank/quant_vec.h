// The quantizers' vector loops (GPTQ's Cholesky and triangular inverse, its error-feedback updates, the
// calibration forward's attention), each compiled for AVX-512, AVX2 and baseline x86-64 and picked at load
// time for the CPU (GCC target_clones). Results are bit-identical on every CPU: the sums keep one fixed order
// (dots: lane k % 4, or k % 8 for F32, then a fixed combination; elementwise updates are lane-independent) and
// the file is built with -ffp-contract=off, so no clone fuses a multiply and an add.
#pragma once
#include <cstdint>

namespace tp::quant_vec {

// Σ_{k<n} a_k·b_k in double: s_l = Σ over k ≡ l (mod 4) of the whole groups of 4, in order; the last n % 4
// products go to s_0; result (s_0 + s_1) + (s_2 + s_3).
double dot4(const double* a, const double* b, int64_t n);

// out[i] = dot4(a[i], b[i], n[i]) for i < count, several dots in lockstep (independent sums overlap, so the
// adds' latency is hidden); each equals dot4's bits.
void dot4_many(int count, const double* const* a, const double* const* b, const int64_t* n, double* out);

// The partial sums of dot4 over the first `len` elements (len % 4 == 0) of a·b[i] for i < count, added to
// s[i][0..3]: dot4_finish continues them from element len. One row a against several rows b[i].
void dot4_prefix(int count, const double* a, const double* const* b, int64_t len, double (*s)[4]);
// dot4(a, b, n) given s: the partial sums over the first `done` elements (done % 4 == 0, done <= n).
double dot4_finish(const double* s, const double* a, const double* b, int64_t done, int64_t n);

// y[r] -= x[r]·a for r < n (F32; the product rounded, then the difference).
void sub_scaled(float* y, const float* x, float a, int64_t n);
// y[r] += x[r]·a for r < n (F32).
void add_scaled(float* y, const float* x, float a, int64_t n);

// Σ a_i·b_i in F32 over 8 lanes (lane i % 8 for the whole groups of 8, in order); the last n % 8 products
// summed first in order, then lanes 0..7 added in order.
float dot8_f32(const float* a, const float* b, int64_t n);

}  // namespace tp::quant_vec
