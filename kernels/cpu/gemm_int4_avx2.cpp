// W4A16 decode on AVX2 + FMA (packed_kernels.h: int4_avx2_linear): Int4 weights (groups a multiple of 32 columns
// or per channel, zero points, no g_idx) against F32 x, for m < kInt4Avx2MaxM rows of x.
// Each 32-column block of x is permuted once a call into the order the weight bytes unpack in without shuffles
// across lanes: the block's 16 bytes are broadcast to both 128-bit lanes and vpshufb zero-extends bytes 0..7
// (then 8..15) into 8 int32 lanes; the low nibbles (& 15) are the even columns, the high ones (>> 4) the odd.
// So x's block is stored [x(2k), x(2k + 1), x(16 + 2k), x(17 + 2k)] for k = 0..7. Per 8 columns: q − zero =
// nibble − (8 + zero) in int32, vcvtdq2ps, one FMA with x; per group the row's sum × the group's scale is added to
// its total (one FMA), and y = the total's lane sum. Weight rows 4 at a time (contiguous, software-prefetched
// ahead), each against every row of x (the 4 rows stay in L1 for the next rows of x).
// Products are the A16 kernels' (F32 (q − z) · x, exact), summed in F32 in another order: within the A16 bound.
#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

constexpr int kRw = 4;                    // weight rows a block
constexpr int64_t kPrefetchBytes = 2048;  // how far ahead of the block being read W is prefetched

// x row [n_in] -> the permuted blocks [n_in] (n_in a multiple of 32).
void permute_x(const float* x, int64_t n_in, float* xp) {
  for (int64_t b = 0; b < n_in; b += 32)
    for (int k = 0; k < 8; ++k) {
      xp[b + k] = x[b + 2 * k];
      xp[b + 8 + k] = x[b + 2 * k + 1];
      xp[b + 16 + k] = x[b + 16 + 2 * k];
      xp[b + 24 + k] = x[b + 17 + 2 * k];
    }
}

template <int RW>
__attribute__((target("avx2,fma"))) void rows_int4(const PackedWeight& w, int64_t ng, int64_t gs, int64_t r,
                                                   const float* xp, float* y, bool prefetch) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const uint8_t* row0 = w.data.data() + r * rb;
  const __m256i sh0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 4, -1, -1, -1, 5,
                                       -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
  const __m256i sh1 = _mm256_setr_epi8(8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1, 12, -1, -1, -1,
                                       13, -1, -1, -1, 14, -1, -1, -1, 15, -1, -1, -1);
  const __m256i m15 = _mm256_set1_epi32(15);
  const char* pf = reinterpret_cast<const char*>(row0) + RW * rb + kPrefetchBytes;
  const bool zeros = !w.zeros.empty();
  __m256 total[RW];
  for (int j = 0; j < RW; ++j) total[j] = _mm256_setzero_ps();
  for (int64_t g = 0, c0 = 0; c0 < n_in; ++g, c0 += gs) {
    const int64_t c1 = std::min(n_in, c0 + gs);
    __m256 acc[RW];
    __m256i zoff[RW];
    for (int j = 0; j < RW; ++j) {
      acc[j] = _mm256_setzero_ps();
      zoff[j] = _mm256_set1_epi32(8 + (zeros ? int(w.zeros[size_t((r + j) * ng + g)]) : 0));
    }
    for (int64_t c = c0; c < c1; c += 32) {
      if (prefetch) {
        for (int64_t k = 0; k < RW * 16; k += 64) _mm_prefetch(pf + k, _MM_HINT_T0);
        pf += RW * 16;
      }
      const float* xb = xp + c;
      for (int j = 0; j < RW; ++j) {
        const __m256i b =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row0 + j * rb + c / 2)));
        const __m256i d0 = _mm256_shuffle_epi8(b, sh0), d1 = _mm256_shuffle_epi8(b, sh1);
        const __m256 e0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d0, m15), zoff[j]));
        const __m256 o0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d0, 4), zoff[j]));
        const __m256 e1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d1, m15), zoff[j]));
        const __m256 o1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d1, 4), zoff[j]));
        acc[j] = _mm256_fmadd_ps(e0, _mm256_loadu_ps(xb), acc[j]);
        acc[j] = _mm256_fmadd_ps(o0, _mm256_loadu_ps(xb + 8), acc[j]);
        acc[j] = _mm256_fmadd_ps(e1, _mm256_loadu_ps(xb + 16), acc[j]);
        acc[j] = _mm256_fmadd_ps(o1, _mm256_loadu_ps(xb + 24), acc[j]);
      }
    }
    for (int j = 0; j < RW; ++j)
      total[j] = _mm256_fmadd_ps(acc[j], _mm256_set1_ps(w.scales[size_t((r + j) * ng + g)]), total[j]);
  }
  for (int j = 0; j < RW; ++j) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(total[j]), _mm256_extractf128_ps(total[j], 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    y[r + j] = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }
}

}  // namespace

bool int4_avx2_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if (w.format != WeightFormat::Int4 || w.act != ActQuant::None || !w.g_idx.empty()) return false;
  if (m >= kInt4Avx2MaxM || w.n_in % 32 != 0 || w.group_size % 32 != 0) return false;
  const int64_t n_in = w.n_in, ng = w.n_groups(), gs = w.group_size;
  thread_local std::vector<float> xp;
  xp.resize(size_t(m * n_in));
  for (int64_t i = 0; i < m; ++i) permute_x(x + i * n_in, n_in, xp.data() + i * n_in);
  const float* xpd = xp.data();
  const int64_t n_blocks = (w.n_out + kRw - 1) / kRw;
  const bool parallel = n_threads > 1 && worth_parallel(w.n_out * w.row_bytes() * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n_blocks + nt - 1) / nt;
    const int64_t r0 = std::min(w.n_out, t * per * kRw), r1 = std::min(w.n_out, r0 + per * kRw);
    int64_t r = r0;
    for (; r + kRw <= r1; r += kRw)
      for (int64_t i = 0; i < m; ++i) rows_int4<kRw>(w, ng, gs, r, xpd + i * n_in, y + i * w.n_out, i == 0);
    for (; r < r1; ++r)
      for (int64_t i = 0; i < m; ++i) rows_int4<1>(w, ng, gs, r, xpd + i * n_in, y + i * w.n_out, false);
  }
  return true;
}

}  // namespace tp::cpu::detail
