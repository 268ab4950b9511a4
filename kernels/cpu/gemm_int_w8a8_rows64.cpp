// W8A8 Int8 weights held in Rows64 (common/rows16_layout.h: oneDNN's AMX int8 weight order, tag BA16a64b4a of Wᵀ)
// below the prefill's m, on AVX-512 VNNI (packed_kernels.h: rows64_s8_gemv), and the choice of that layout at load
// (prepare_w8a8_weight). The prefill reads the layout through oneDNN as it is (onednn_s8_gemm, rows64): no copy of
// W into oneDNN's order a call. Measured on the AMX Xeon (2026-12-07, /tmp program, 1 thread, m = 512, the SmolLM2
// shapes, the int32 → F32 epilogue included): 576 → 960 0.54 → 0.34 ms, 576 → 3072 1.39 → 1.18, 1536 → 576 0.52 →
// 0.44, 576 → 576 0.22 → 0.19 against the row-major weights with oneDNN's per-call copy — measured with the GEMM run
// 128 rows of x at a time, each chunk's epilogue while its int32 sums are in L2; int_w8a8_linear runs 64-row chunks
// (its kRows64ChunkM: the fastest in the full prefill), one thread each.
// Decode: one 64-byte load holds 16 weight rows × 4 columns (an int32 lane a row); flipped to unsigned (q ^ 0x80 =
// q + 128) it feeds one vpdpbusd a row of x against x's 4 bytes of those columns, broadcast, adding Σ (q + 128) q_x
// into lane r — no horizontal sums; −128 Σ q_x after makes the exact Σ q qx of every other W8A8 path, and y =
// (w_scale · x_scale) · float(Σ) is the oneDNN path's epilogue: a row of a batch has the same bits at every m, on
// either path, with any threads. Up to 4 groups of 16 rows of one 64-row block a pass (their 256 bytes a 4 columns
// lie together), rows of x 4 at a time against them.
#include <algorithm>
#include <cstring>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,bmi2")))

constexpr int64_t kBlock = 64;  // rows and columns of a Rows64 block
constexpr int64_t kGroup = 16;  // rows of a 64-byte load
// W software-prefetched this far ahead (as the row-major kernel's, gemm_int_w8a8.cpp: into L2 on Intel)
const int64_t kPrefetchBytes = cpu_is_intel() ? 6144 : 16384;

TP_VNNI inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Groups j0 .. j0 + NG − 1 (of 16 rows) of the 64-row block at blk against MT rows of x (xq [MT, n_in], Σ q_x,
// scales); y: the groups' first row of x's first row (rows of y n_out apart), ws: the groups' first row's scale.
// One vpdpbusd chain a (row of x, group) where there are 4 or more, else two (even and odd 4-column steps).
template <int NG, int MT>
TP_VNNI void groups_s8(const int8_t* blk, int j0, int64_t n_in, const int8_t* xq, const int32_t* xsum, const float* ws,
                       const float* xs, float* y, int64_t n_out, bool prefetch) {
  constexpr int C = NG * MT >= 4 ? 1 : 2;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512i acc[MT][NG][C];
  for (int i = 0; i < MT; ++i)
    for (int s = 0; s < NG; ++s)
      for (int c = 0; c < C; ++c) acc[i][s][c] = _mm512_setzero_si512();
  for (int64_t kb = 0; kb < n_in / kBlock; ++kb) {
    const int8_t* p = blk + kb * kBlock * kBlock + j0 * 64;
    const int8_t* xk = xq + kb * kBlock;
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      const int8_t* q = p + t * 4 * kBlock;
      __m512i wv[NG];
      for (int s = 0; s < NG; ++s) {
        if (prefetch) prefetch_weights(q + s * 64 + kPrefetchBytes);
        wv[s] = _mm512_xor_si512(_mm512_loadu_si512(q + s * 64), flip);
      }
      for (int i = 0; i < MT; ++i) {
        const __m512i xb = _mm512_set1_epi32(load_i32(xk + i * n_in + 4 * t));
        for (int s = 0; s < NG; ++s) acc[i][s][t % C] = _mm512_dpbusd_epi32(acc[i][s][t % C], wv[s], xb);
      }
    }
  }
  for (int i = 0; i < MT; ++i) {
    const __m512 xv = _mm512_set1_ps(xs[i]);
    const __m512i off = _mm512_set1_epi32(int32_t(128u * uint32_t(xsum[i])));  // wrapping, as the exact sum is
    for (int s = 0; s < NG; ++s) {
      __m512i a = acc[i][s][0];
      if (C == 2) a = _mm512_add_epi32(a, acc[i][s][C - 1]);
      const __m512 d = _mm512_cvtepi32_ps(_mm512_sub_epi32(a, off));
      _mm512_storeu_ps(y + i * n_out + s * kGroup,
                       _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(ws + s * kGroup), xv), d));
    }
  }
}

template <int NG>
TP_VNNI void groups_rows_of_x(const int8_t* blk, int j0, int64_t n_in, int64_t m, const int8_t* xq, const int32_t* xsum,
                              const float* ws, const float* xs, float* y, int64_t n_out) {
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int8_t* xi = xq + i0 * n_in;
    float* yi = y + i0 * n_out;
    const bool pf = i0 == 0;  // the first pass reads W from memory, the next ones from cache
    switch (std::min<int64_t>(4, m - i0)) {
      case 1: groups_s8<NG, 1>(blk, j0, n_in, xi, xsum + i0, ws, xs + i0, yi, n_out, pf); break;
      case 2: groups_s8<NG, 2>(blk, j0, n_in, xi, xsum + i0, ws, xs + i0, yi, n_out, pf); break;
      case 3: groups_s8<NG, 3>(blk, j0, n_in, xi, xsum + i0, ws, xs + i0, yi, n_out, pf); break;
      default: groups_s8<NG, 4>(blk, j0, n_in, xi, xsum + i0, ws, xs + i0, yi, n_out, pf); break;
    }
  }
}

}  // namespace

bool rows64_s8_gemv(const PackedWeight& w, int64_t m, const int8_t* xq, const float* xs, const int32_t* xsum, float* y,
                    int n_threads) {
  if (w.rows_layout != RowsLayout::Rows64 || !cpu_has_avx512vnni()) return false;
  const int64_t n_in = w.n_in, n_out = w.n_out, n_groups = n_out / kGroup;
  const auto* data = reinterpret_cast<const int8_t*>(w.data.data());
  const bool parallel = n_threads > 1 && worth_parallel(n_out * n_in * m);
#pragma omp parallel num_threads(n_threads) if (parallel)
  {
    const auto [g0, g1] = thread_rows(n_groups, 1, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t g = g0; g < g1;) {
      const int j0 = int(g % 4);
      const int64_t ng = std::min<int64_t>(4 - j0, g1 - g), r0 = g * kGroup;
      const int8_t* blk = data + (g / 4) * kBlock * n_in;
      switch (ng) {
        case 1: groups_rows_of_x<1>(blk, j0, n_in, m, xq, xsum, w.scales.data() + r0, xs, y + r0, n_out); break;
        case 2: groups_rows_of_x<2>(blk, j0, n_in, m, xq, xsum, w.scales.data() + r0, xs, y + r0, n_out); break;
        case 3: groups_rows_of_x<3>(blk, j0, n_in, m, xq, xsum, w.scales.data() + r0, xs, y + r0, n_out); break;
        default: groups_rows_of_x<4>(blk, j0, n_in, m, xq, xsum, w.scales.data() + r0, xs, y + r0, n_out); break;
      }
      g += ng;
    }
  }
  return true;
}

void prepare_w8a8_weight(PackedWeight* w) {
  if (w->rows_layout != RowsLayout::Rows || !rows64_refusal(*w).empty()) return;
  if (!__builtin_cpu_supports("amx-int8") || !cpu_has_avx512vnni() || packed_best_isa() != PackedIsa::Avx512 ||
      !onednn_s8_rows64_supported())
    return;
  set_rows_layout(w, RowsLayout::Rows64);
}

}  // namespace tp::cpu::detail
