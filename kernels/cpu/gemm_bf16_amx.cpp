// BF16 GEMM on AMX tiles for the batched decode step (gemm_bf16_amx.h).
//
// Work: units of 32 output columns (half a 64-column block of W), split evenly over the threads (SmolLM2's o and
// down projections have 9 blocks: whole blocks would leave one thread 5 and the other 4). A unit runs its rows in
// groups of 32: C tiles 0-3 = rows [g, g + 16) / [g + 16, g + 32) × columns [0, 16) / [16, 32) of the unit, A tiles
// 4-5 = the two 16-row halves of x's 32 inputs, B tiles 6-7 = the unit's two 16-column tiles of W's 32 inputs
// (rows 256 bytes apart in the block). Each step is 4 tile products of 2 + 2 loads.
// The weights: while a unit runs, its steps prefetch the next unit's W into L2 (prefetcht1), spread over the unit's
// row groups (group g of G: pair rows [16 g / G, 16 (g + 1) / G) of each block, 2 lines a row), so W streams from
// DRAM while the tiles multiply. On the AMX Xeon (gemv_bench --sweep, cold W, alternated twice, GFLOP/s at m = 64,
// 2 threads) that took 1536 × 576 from 1089-1163 without prefetches to 1323-1394 (prefetcht0: 1223-1250; two units
// ahead: 1307-1400), 576 × 1536 from 1030-1135 to 1211-1238; oneDNN's matmul: 989-1089 and 842-988.
// x is rounded to BF16 into a per-call buffer padded with zero rows to a multiple of 32; the C tiles of the last
// row group go through a small buffer when the group has rows past m.
// Tiles: palette 1, all eight 16 rows × 64 bytes, configured per call on each thread and released after.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/gemm_bf16_amx.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/paged_attention.h"

#define TP_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

namespace tp::cpu::detail {
namespace {

constexpr int64_t kBlockIn = 32, kBlockOut = 64;       // oneDNN's BA16a64b2a block: inputs × outputs
constexpr int64_t kBlockElems = kBlockIn * kBlockOut;  // BF16 values a block (4 KiB)
constexpr int64_t kUnitOut = 32;                       // output columns a unit: half a block
constexpr int64_t kGroupRows = 32;                     // rows of x a C group (two 16-row tiles)
constexpr int64_t kPairStride = kBlockOut * 2 * 2;     // bytes between a block's input pairs (256)
constexpr int64_t kPrefetchUnits = 1;                  // how far ahead W is prefetched, in units

std::atomic<bool> g_enabled{true};

// Unit u's 16-column tile j (0, 1) of input block kb: its first pair row.
inline const uint16_t* b_tile(const uint16_t* wb, int64_t n_kb, int64_t u, int64_t kb, int j) {
  return wb + ((u / 2) * n_kb + kb) * kBlockElems + ((u % 2) * 2 + j) * 32;
}

// The unit's 32 columns for rows [r0, r0 + 32) of xb (rows ldx values apart), into C at y (rows ldy floats apart).
// half: the group's second 16 rows are all padding (only tiles 0-1 are computed and stored). pf: W of the unit
// to prefetch (nullptr: none): pair rows [pf_r0, pf_r1) of its block kb, 2 lines each, a step.
TP_AMX_TARGET void unit_group(const uint16_t* xb, int64_t ldx, const uint16_t* wb, int64_t n_kb, int64_t u, float* y,
                              int64_t ldy, bool half, const uint16_t* pf, int pf_r0, int pf_r1) {
  _tile_zero(0);
  _tile_zero(1);
  if (!half) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t a_stride = ldx * 2;
  for (int64_t kb = 0; kb < n_kb; ++kb) {
    const uint16_t* b = b_tile(wb, n_kb, u, kb, 0);
    _tile_loadd(6, b, kPairStride);
    _tile_loadd(7, b + 32, kPairStride);  // the next 16 outputs: 32 values on
    _tile_loadd(4, xb + kb * kBlockIn, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (!half) {
      _tile_loadd(5, xb + 16 * ldx + kb * kBlockIn, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if (pf != nullptr) {
      const char* p = reinterpret_cast<const char*>(pf + kb * kBlockElems);
      for (int r = pf_r0; r < pf_r1; ++r) {
        _mm_prefetch(p + r * kPairStride, _MM_HINT_T1);
        _mm_prefetch(p + r * kPairStride + 64, _MM_HINT_T1);
      }
    }
  }
  const int64_t c_stride = ldy * 4;
  _tile_stored(0, y, c_stride);
  _tile_stored(1, y + 16, c_stride);
  if (!half) {
    _tile_stored(2, y + 16 * ldy, c_stride);
    _tile_stored(3, y + 16 * ldy + 16, c_stride);
  }
}

TP_AMX_TARGET void release_tiles() { _tile_release(); }

}  // namespace

bool amx_gemm_enabled() {
  static const bool has = attention_has_amx();  // AMX tile + bf16, tile state granted to the process
  return has && g_enabled.load(std::memory_order_relaxed);
}

void set_amx_gemm(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void gemm_bf16_amx(const float* x, int64_t m, int64_t n_in, const uint16_t* wb, int64_t n_out, float* y,
                   int n_threads) {
  if (!amx_gemm_enabled() || m < 1 || m > kAmxGemmMaxM || n_in % kBlockIn != 0 || n_out % kBlockOut != 0)
    throw Error("gemm_bf16_amx: m " + std::to_string(m) + ", n_in " + std::to_string(n_in) + ", n_out " +
                std::to_string(n_out) + " (needs AMX, 1 <= m <= 128, n_in % 32 == 0, n_out % 64 == 0)");
  const int64_t n_groups = (m + kGroupRows - 1) / kGroupRows, m_pad = n_groups * kGroupRows;
  const int64_t n_kb = n_in / kBlockIn, n_units = n_out / kUnitOut;
  thread_local std::vector<uint16_t> xb_buf;
  if (int64_t(xb_buf.size()) < m_pad * n_in) xb_buf.resize(size_t(m_pad * n_in));
  uint16_t* const xb = xb_buf.data();
  std::memset(xb + m * n_in, 0, size_t((m_pad - m) * n_in) * sizeof(uint16_t));
#pragma omp parallel num_threads(n_threads) if (n_threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const auto [r0, r1] = thread_rows(m, 1, t, nt);
    round_bf16(x + r0 * n_in, (r1 - r0) * n_in, xb + r0 * n_in);
#pragma omp barrier
    const int64_t u0 = n_units * t / nt, u1 = n_units * (t + 1) / nt;
    if (u0 < u1) {
      configure_amx_tiles();
      alignas(64) float tail[kGroupRows * kUnitOut];
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t ahead = u + kPrefetchUnits;
        const uint16_t* pf = ahead < u1 ? b_tile(wb, n_kb, ahead, 0, 0) : nullptr;
        for (int64_t g = 0; g < n_groups; ++g) {
          const int64_t rows = std::min(kGroupRows, m - g * kGroupRows);
          const int pr0 = int(16 * g / n_groups), pr1 = int(16 * (g + 1) / n_groups);
          const uint16_t* xg = xb + g * kGroupRows * n_in;
          float* yg = y + g * kGroupRows * n_out + u * kUnitOut;
          if (rows == kGroupRows) {
            unit_group(xg, n_in, wb, n_kb, u, yg, n_out, false, pf, pr0, pr1);
          } else {  // rows past m: C through `tail`, then the real rows
            unit_group(xg, n_in, wb, n_kb, u, tail, kUnitOut, rows <= 16, pf, pr0, pr1);
            for (int64_t r = 0; r < rows; ++r)
              std::memcpy(yg + r * n_out, tail + r * kUnitOut, size_t(kUnitOut) * sizeof(float));
          }
        }
      }
      release_tiles();
    }
  }
}

}  // namespace tp::cpu::detail
