// Prefill of packed weights whose rows decode exactly to BF16 parts (packed_kernels.h: bf16_slab_gemm): FP8 E4M3
// with tensor / channel scales (gemm_fp8_bf16.cpp); Int8 / Int4 per channel (codes − zero, ≤ 8 significant bits,
// the row scale after) and with scale groups ((q − zero) · scale as hi + lo, exact for BF16 / F16 checkpoint
// scales) — a16_bf16_prefill below; MXFP4 / NVFP4 (e2m1 · block scale, ≤ 6 bits, the global scale after) —
// fp4_bf16_prefill below. W is decoded a slab of kSlabRows rows at a time into a per-thread BF16 scratch and
// multiplied by every row of x with oneDNN's BF16 matmul (AMX tiles where the CPU has them), F32 accumulation;
// then, where the decode left them out, y × the row's scale (× x's row scale). x comes as BF16 parts side by side:
// one part where x is already exact in BF16 (E4M3 activations; BF16 activations, w.act_bf16), two for F32 x (x ≈
// hi + lo, 16 significant bits: the BF16 tiles' rule), each part zero-padded to ps columns; each weight part is
// repeated so that the matmul sums every x part against every weight part. Every product is exact in F32; only the order of the sums differs from
// the tiles (a row's last bits differ between the tiles and this path, as BF16 GEMV vs oneDNN do).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include "common/fp_formats.h"
#include "kernels/cpu/bf16_parts.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2")))

constexpr int64_t kSlabRows = 256;  // rows of W decoded at a time (256 × 1152 BF16 = 576 KiB at 576 inputs, 2 parts)

// The 4-bit values of `bytes` (≤ 8) bytes at p as 16 int32 lanes in column order (byte j: the low nibble is
// column 2j, the high one 2j + 1); lanes past 2 · bytes are 0.
TP_BF16 inline __m512i nibbles16(const uint8_t* p, unsigned bytes) {
  const __m128i b = _mm_maskz_loadu_epi8(__mmask16(_bzhi_u32(~0u, bytes)), p);
  const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
}

// Row r's codes of columns [c, c + n) (n ≤ 16; lanes ≥ n zero) as int32: Int8 q, Int4 u − 8 (c even).
TP_BF16 inline __m512i codes16(const PackedWeight& w, int64_t r, int64_t c, int64_t n) {
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(n)));
  if (w.format == WeightFormat::Int8)
    return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, reinterpret_cast<const int8_t*>(row) + c));
  return _mm512_maskz_sub_epi32(k, nibbles16(row + c / 2, unsigned((n + 1) / 2)), _mm512_set1_epi32(8));
}

// One scale group a row (per channel, no g_idx): row r's n_in values q − zero as BF16 (exact: |q − zero| ≤ 255).
TP_BF16 void channel_row(const PackedWeight& w, int64_t r, uint16_t* out, int64_t) {
  const __m512i z = _mm512_set1_epi32(w.zeros.empty() ? 0 : int(w.zeros[size_t(r)]));
  for (int64_t c = 0; c < w.n_in; c += 16) {
    const int64_t n = std::min<int64_t>(16, w.n_in - c);
    const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(n)));
    _mm256_mask_storeu_epi16(out + c, k, bf16_of(_mm512_cvtepi32_ps(_mm512_sub_epi32(codes16(w, r, c, n), z))));
  }
}

// Scale groups (group_size columns, or g_idx): row r's n_in values (q − zero) · scale (exact in F32: ≤ 8 + 11
// significant bits) as WP BF16 parts: hi at out and (WP = 2) lo = the rest at out + stride — exact when the group
// scale's significant bits + the codes' fit 16 (grouped_exact; hi + lo then holds all of them: hi the top 8 after
// rounding to nearest, lo ≤ 8 more); WP = 1: hi alone, the weight rounded to BF16.
template <int WP>
TP_BF16 void grouped_row(const PackedWeight& w, int64_t r, uint16_t* out, int64_t stride) {
  const int64_t ng = w.n_groups(), gs = w.group_size;
  const float* srow = w.scales.data() + r * ng;
  thread_local std::vector<int32_t> zrow;  // the row's zero points as int32 (gathered by group)
  const bool zeros = !w.zeros.empty();
  if (zeros) {
    zrow.resize(size_t(ng));
    for (int64_t g = 0; g < ng; ++g) zrow[size_t(g)] = w.zeros[size_t(r * ng + g)];
  }
  alignas(64) int32_t lane_group[16];
  for (int64_t c = 0; c < w.n_in; c += 16) {
    const int64_t n = std::min<int64_t>(16, w.n_in - c);
    const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(n)));
    __m512i q = codes16(w, r, c, n);
    __m512 sc;
    if (w.g_idx.empty() && gs % 16 == 0) {  // the 16 columns in one group: its scale and zero broadcast
      const int64_t g = c / gs;
      if (zeros) q = _mm512_sub_epi32(q, _mm512_set1_epi32(zrow[size_t(g)]));
      sc = _mm512_set1_ps(srow[g]);
    } else {
      __m512i g;
      if (!w.g_idx.empty()) {
        g = _mm512_maskz_loadu_epi32(k, w.g_idx.data() + c);
      } else {
        for (int64_t i = 0; i < 16; ++i) lane_group[i] = i < n ? int32_t((c + i) / gs) : 0;
        g = _mm512_load_si512(lane_group);
      }
      if (zeros) q = _mm512_sub_epi32(q, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, g, zrow.data(), 4));
      sc = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, g, srow, 4);
    }
    const __m512 p = _mm512_maskz_mul_ps(k, _mm512_cvtepi32_ps(q), sc);
    const __m256i hi = bf16_of(p);
    _mm256_mask_storeu_epi16(out + c, k, hi);
    if constexpr (WP == 2) _mm256_mask_storeu_epi16(out + stride + c, k, bf16_of(_mm512_sub_ps(p, f32_of(hi))));
  }
}

// Significant bits of |v| (normal floats; 0 for 0).
int significant_bits(float v) {
  const uint32_t b = std::bit_cast<uint32_t>(v) & 0x7FFFFFu;
  return v == 0.0f ? 0 : 24 - std::countr_zero(b | 0x800000u);
}

// Whether every (q − zero) · scale of w is hi + lo exactly (grouped_row): each scale normal (≥ 2^-100, no
// subnormal lo part) with at most 16 − code bits significant bits (Int4 |q − zero| ≤ 15: 4 bits, so F16 and
// BF16 scales pass; Int8 ≤ 255: 8 bits, BF16 scales pass, F16 ones do not). F32 scales with long mantissas fail:
// those weights keep the F32 path.
bool grouped_exact(const PackedWeight& w) {
  const int code_bits = w.format == WeightFormat::Int4 ? 4 : 8;
  for (float s : w.scales)
    if (!(s == 0.0f || (std::fabs(s) >= 0x1p-100f && std::fabs(s) <= 0x1p100f && significant_bits(s) <= 16 - code_bits)))
      return false;
  return true;
}

// MXFP4 / NVFP4 row r: n_in values e2m1 · block scale (2^(e − 127), or the E4M3 scale) as BF16 — exact: E2M1 has
// ≤ 2 significant bits, E4M3 ≤ 4, a power of two none (fp4_exact keeps the products normal). NVFP4's global scale
// is applied after the matmul. n_in is a multiple of the block (16 or 32 columns), so 16 columns share one scale.
TP_BF16 void fp4_row(const PackedWeight& w, int64_t r, uint16_t* out, int64_t) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  const int64_t blk = mx ? 32 : 16, nb = w.n_in / blk;
  const uint8_t* row = w.data.data() + r * w.row_bytes();
  const uint8_t* sb = w.scale_bytes.data() + r * nb;
  static const std::array<float, 16> table = [] {  // E2M1 code -> value
    std::array<float, 16> t{};
    for (int i = 0; i < 16; ++i) t[size_t(i)] = e2m1_to_f32(uint8_t(i));
    return t;
  }();
  const __m512 values = _mm512_loadu_ps(table.data());
  for (int64_t c = 0; c + 16 <= w.n_in; c += 16) {
    const __m512 e2m1 = _mm512_permutexvar_ps(nibbles16(row + c / 2, 8), values);
    const uint8_t s = sb[c / blk];
    const float scale = mx ? e8m0_to_f32(s) : fp8_e4m3_to_f32(s);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), bf16_of(_mm512_mul_ps(e2m1, _mm512_set1_ps(scale))));
  }
}

// Whether fp4_row is exact for w: E8M0 exponents in [2, 254] (products ≥ 2^-126: no subnormal that the matmul
// would flush; 255 is NaN), E4M3 scales not NaN.
bool fp4_exact(const PackedWeight& w) {
  const bool mx = w.format == WeightFormat::Mxfp4;
  if (w.n_in % (mx ? 32 : 16) != 0) return false;
  for (uint8_t s : w.scale_bytes)
    if (mx ? (s < 2 || s > 254) : (s & 0x7F) == 0x7F) return false;
  return true;
}

}  // namespace

TP_BF16 void split_bf16_parts(const float* x, int64_t m, int64_t n_in, int64_t ps, uint16_t* out, int n_threads,
                              int reps, int parts) {
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = out + i * parts * reps * ps;
    std::memset(row, 0, size_t(parts * ps) * 2);
    for (int64_t c = 0; c < n_in; c += 16) {
      const __mmask16 k = __mmask16(_bzhi_u32(~0u, unsigned(std::min<int64_t>(16, n_in - c))));
      const __m512 v = _mm512_maskz_loadu_ps(k, x + i * n_in + c);
      __m256i p0, p1;
      bf16_parts(v, p0, p1);
      _mm256_mask_storeu_epi16(row + c, k, p0);
      if (parts == 2) _mm256_mask_storeu_epi16(row + ps + c, k, p1);
    }
    for (int r = 1; r < reps; ++r) std::memcpy(row + r * parts * ps, row, size_t(parts * ps) * 2);
  }
}

void bf16_slab_gemm(const uint16_t* xk, int64_t m, int64_t ps, int np, const PackedWeight& w, Bf16RowDecode decode,
                    const float* xs, float* y, int n_threads, int w_parts, bool row_scales) {
  const int64_t n_in = w.n_in, n_out = w.n_out, k = np * ps, slab_rows = std::min(kSlabRows, n_out);
  const int copies = np / w_parts;  // each decoded part side by side this many times
  thread_local std::vector<uint16_t> wb;
  if (int64_t(wb.size()) < slab_rows * k) wb.resize(size_t(slab_rows * k));
  uint16_t* const slab = wb.data();  // (thread_local: the pool's threads must use the caller's buffer)
  for (int64_t s0 = 0; s0 < n_out; s0 += slab_rows) {
    const int64_t rows = std::min(n_out, s0 + slab_rows) - s0;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* out = slab + r * k;
      decode(w, s0 + r, out, copies * ps);
      for (int q = w_parts - 1; q >= 0; --q) {
        uint16_t* part = out + q * copies * ps;
        std::fill(part + n_in, part + ps, uint16_t(0));
        for (int p = 1; p < copies; ++p) std::memcpy(part + p * ps, part, size_t(ps) * 2);
      }
    }
    onednn_matmul_bf16(xk, m, k, slab, rows, y + s0, n_out, n_threads);
  }
  if (!row_scales) return;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      const float s = y[i * n_out + r] * (w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)]);
      y[i * n_out + r] = xs ? s * xs[i] : s;
    }
}

bool a16_bf16_prefill(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4) || w.act != ActQuant::None ||
      w.rows_layout != RowsLayout::Rows || m < kA16Bf16MinM || !cpu_has_avx512bf16() || !onednn_supports(DType::BF16))
    return false;
  const bool channel = w.g_idx.empty() && w.n_groups() == 1;
  // Grouped weights at the BF16 runtime (w.act_bf16): (q − zero) · scale rounded to BF16, one part — the BF16
  // weights transformers and vLLM's A16 kernels compute with; else two exact parts (needs grouped_exact).
  const bool w_one = !channel && w.act_bf16;
  if (!channel && !w_one && !grouped_exact(w)) return false;
  if (w_one && !std::all_of(w.scales.begin(), w.scales.end(), [](float sc) { return std::isfinite(sc); }))
    return false;  // one part: any finite scale (the products rounded anyway)
  const int64_t ps = (w.n_in + 31) / 32 * 32;
  // x's parts (hi, lo; hi alone with BF16 activations), once a part of W (grouped, F32 x: W's hi and lo)
  const int xp = w.act_bf16 ? 1 : 2, wp = channel || w_one ? 1 : 2, np = xp * wp;
  thread_local std::vector<uint16_t> xb;
  xb.resize(size_t(m * np * ps));
  split_bf16_parts(x, m, w.n_in, ps, xb.data(), n_threads, wp, xp);
  if (channel) {
    bf16_slab_gemm(xb.data(), m, ps, np, w, channel_row, nullptr, y, n_threads);
    return true;
  }
  bf16_slab_gemm(xb.data(), m, ps, np, w, w_one ? grouped_row<1> : grouped_row<2>, nullptr, y, n_threads, wp, false);
  return true;
}

bool fp4_bf16_prefill(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  if ((w.format != WeightFormat::Mxfp4 && w.format != WeightFormat::Nvfp4) || w.act != ActQuant::None ||
      w.rows_layout != RowsLayout::Rows || m < kA16Bf16MinM || !cpu_has_avx512bf16() ||
      !onednn_supports(DType::BF16) || !fp4_exact(w))
    return false;
  const int64_t ps = (w.n_in + 31) / 32 * 32;
  const int np = w.act_bf16 ? 1 : 2;  // x's parts: hi, lo (hi alone with BF16 activations)
  thread_local std::vector<uint16_t> xb;
  xb.resize(size_t(m * np * ps));
  split_bf16_parts(x, m, w.n_in, ps, xb.data(), n_threads, 1, np);
  bf16_slab_gemm(xb.data(), m, ps, np, w, fp4_row, nullptr, y, n_threads, 1, false);
  const float g = w.format == WeightFormat::Nvfp4 ? w.global_scale : 1.0f;
  if (g != 1.0f) {
    const int64_t n = m * w.n_out;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t i = 0; i < n; ++i) y[i] *= g;
  }
  return true;
}

}  // namespace tp::cpu::detail
