// Prefill of packed weights whose rows decode exactly to BF16 with one scale a row (packed_kernels.h:
// bf16_slab_gemm): FP8 E4M3 with tensor / channel scales (gemm_fp8_bf16.cpp) and Int8 per channel (codes − zero,
// |·| ≤ 255: 8 significant bits, exact in BF16; a16_int8_bf16_prefill below). W is decoded a slab of kSlabRows
// rows at a time into a per-thread BF16 scratch and multiplied by every row of x with oneDNN's BF16 matmul (AMX
// tiles where the CPU has them), F32 accumulation; then y × the row's scale (× x's row scale). x comes as BF16
// parts side by side: one part where x is already exact in BF16 (E4M3 activations), two for F32 x (x ≈ hi + lo,
// 16 significant bits: the BF16 tiles' rule), each part zero-padded to ps columns; W's row is repeated once a
// part, so the matmul sums hi·w + lo·w. Every product is exact in F32; only the order of the sums differs from
// the tiles (a row's last bits differ between the tiles and this path, as BF16 GEMV vs oneDNN do).
#include <algorithm>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2")))

constexpr int64_t kSlabRows = 256;  // rows of W decoded at a time (256 × 1152 BF16 = 576 KiB at 576 inputs, 2 parts)

// 16 F32 -> BF16 (round to nearest even) and back.
TP_BF16 inline __m256i bf16_of(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
TP_BF16 inline __m512 f32_of(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }

// Int8 row r: n_in values q − zero as BF16 (exact: |q − zero| ≤ 255).
TP_BF16 void int8_row(const PackedWeight& w, int64_t r, uint16_t* out) {
  const auto* p = reinterpret_cast<const int8_t*>(w.data.data() + r * w.row_bytes());
  const __m512i z = _mm512_set1_epi32(w.zeros.empty() ? 0 : int(w.zeros[size_t(r)]));
  for (int64_t c = 0; c < w.n_in; c += 16) {
    const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, w.n_in - c))));
    const __m512i q = _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, p + c)), z);
    _mm256_mask_storeu_epi16(out + c, k, bf16_of(_mm512_cvtepi32_ps(q)));
  }
}

}  // namespace

TP_BF16 void split_bf16_parts(const float* x, int64_t m, int64_t n_in, int64_t ps, uint16_t* out, int n_threads) {
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
  for (int64_t i = 0; i < m; ++i) {
    std::memset(out + i * 2 * ps, 0, size_t(2 * ps) * 2);
    for (int64_t c = 0; c < n_in; c += 16) {
      const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n_in - c))));
      const __m512 v = _mm512_maskz_loadu_ps(k, x + i * n_in + c);
      const __m256i p0 = bf16_of(v);
      _mm256_mask_storeu_epi16(out + (i * 2) * ps + c, k, p0);
      _mm256_mask_storeu_epi16(out + (i * 2 + 1) * ps + c, k, bf16_of(_mm512_sub_ps(v, f32_of(p0))));
    }
  }
}

void bf16_slab_gemm(const uint16_t* xk, int64_t m, int64_t ps, int np, const PackedWeight& w, Bf16RowDecode decode,
                    const float* xs, float* y, int n_threads) {
  const int64_t n_in = w.n_in, n_out = w.n_out, k = np * ps, slab_rows = std::min(kSlabRows, n_out);
  thread_local std::vector<uint16_t> wb;
  if (int64_t(wb.size()) < slab_rows * k) wb.resize(size_t(slab_rows * k));
  uint16_t* const slab = wb.data();  // (thread_local: the pool's threads must use the caller's buffer)
  for (int64_t s0 = 0; s0 < n_out; s0 += slab_rows) {
    const int64_t rows = std::min(n_out, s0 + slab_rows) - s0;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* out = slab + r * k;
      decode(w, s0 + r, out);
      std::fill(out + n_in, out + ps, uint16_t(0));
      for (int p = 1; p < np; ++p) std::memcpy(out + p * ps, out, size_t(ps) * 2);
    }
    onednn_matmul_bf16(xk, m, k, slab, rows, y + s0, n_out, n_threads);
  }
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      const float s = y[i * n_out + r] * (w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)]);
      y[i * n_out + r] = xs ? s * xs[i] : s;
    }
}

bool a16_int8_bf16_prefill(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Int8 || w.act != ActQuant::None || !w.g_idx.empty() || w.n_groups() != 1 ||
      m < kA16Bf16MinM || !cpu_has_avx512bf16() || !onednn_supports(DType::BF16))
    return false;
  const int64_t ps = (w.n_in + 31) / 32 * 32;
  thread_local std::vector<uint16_t> xb;
  xb.resize(size_t(m * 2 * ps));
  split_bf16_parts(x, m, w.n_in, ps, xb.data(), n_threads);
  bf16_slab_gemm(xb.data(), m, ps, 2, w, int8_row, nullptr, y, n_threads);
  return true;
}

}  // namespace tp::cpu::detail
