// GGUF GEMM at prefill sizes: W dequantized to BF16 a slab at a time, oneDNN BF16 matmul (gemm_gguf_bf16.h).
#include "kernels/cpu/gemm_gguf_bf16.h"

#include <omp.h>

// GCC 12: see gemv.cpp (AVX-512 header intrinsics trip -Wuninitialized once inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/gguf_layout.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"

namespace tp::cpu::detail {

namespace {

// Measured on Zen 4 (AVX-512 BF16, no AMX), 1 thread, SmolLM2 shapes (bench/gemm_gguf_bench m = 32..512;
// bench/results/gguf-prefill-bf16-zen4-*.md): at m = 64 this path is 1.0-1.9x the int8 tile on every format
// and shape (Q5_0Quads 576×1536 and Q6_K the closest), at m = 32 it still loses on some (Q5_0Quads, Q6_K:
// 0.85-0.95x), at m = 512 1.7-2.8x. No AMX machine measured: the same threshold there (oneDNN's AMX BF16
// matmul is faster still, so it can only be lower).
constexpr int64_t kMinMAvx512Bf16 = 64;

constexpr int64_t kDequantRows = 16;  // rows a thread dequantizes at a time (the slab's parallel split)

#define TP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

// n floats rounded to BF16 (vcvtneps2bf16: round to nearest even).
TP_BF16 void to_bf16(const float* x, int64_t n, uint16_t* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + k)));
  for (; k < n; ++k) out[k] = f32_to_bf16(x[k]);
}

TP_BF16 inline void store16(uint16_t* o, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), (__m256i)_mm512_cvtneps_pbh(v));
}
TP_BF16 inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
TP_BF16 inline __m512i bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// One row in the file layout, n elements, to BF16: the products of common/dtype.cpp's dequantize_row in the
// same order (no fused multiply-add: -ffp-contract=off), then rounded. False for a format not written here.
TP_BF16 bool row_to_bf16(DType t, const uint8_t* p, int64_t n, uint16_t* o) {
  const __m512i f15 = _mm512_set1_epi32(15), three = _mm512_set1_epi32(3);
  switch (t) {
    case DType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34, o += 32) {
        const __m512 d = _mm512_set1_ps(half(p));
        for (int h = 0; h < 2; ++h) {
          const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 + 16 * h)));
          store16(o + 16 * h, _mm512_mul_ps(d, _mm512_cvtepi32_ps(q)));
        }
      }
      return true;
    case DType::Q4_0:
    case DType::Q4_1: {
      const bool q41 = t == DType::Q4_1;
      const int64_t bb = q41 ? 20 : 18, off = q41 ? 4 : 2;
      const __m512i eight = _mm512_set1_epi32(q41 ? 0 : 8);
      for (int64_t b = 0; b < n / 32; ++b, p += bb, o += 32) {
        const __m512 d = _mm512_set1_ps(half(p)), mn = _mm512_set1_ps(q41 ? half(p + 2) : 0.0f);
        const __m512i c = bytes16(p + off);
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(c, f15), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(c, 4), eight);
        if (q41) {
          store16(o, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), mn));
          store16(o + 16, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), mn));
        } else {
          store16(o, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)));
          store16(o + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)));
        }
      }
      return true;
    }
    case DType::Q5_0: {
      const __m512i sixteen = _mm512_set1_epi32(16);
      for (int64_t b = 0; b < n / 32; ++b, p += 22, o += 32) {
        const __m512 d = _mm512_set1_ps(half(p));
        uint32_t qh;
        std::memcpy(&qh, p + 2, 4);
        const __m512i c = bytes16(p + 6);
        // (code | the high bit · 16) − 16: the high bit set → code, else code − 16.
        const __m512i lo = _mm512_mask_sub_epi32(_mm512_and_si512(c, f15), __mmask16(~qh & 0xffff),
                                                 _mm512_and_si512(c, f15), sixteen);
        const __m512i hi = _mm512_mask_sub_epi32(_mm512_srli_epi32(c, 4), __mmask16(~qh >> 16),
                                                 _mm512_srli_epi32(c, 4), sixteen);
        store16(o, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        store16(o + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
      }
      return true;
    }
    case DType::Q4_K:
      for (int64_t b = 0; b < n / 256; ++b, p += 144) {
        const float d = half(p), dmin = half(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* q = p + 16;
        for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2, o += 64) {
          int sc, m;
          q4_k_scale_min(is + 0, scales, &sc, &m);
          const __m512 d1 = _mm512_set1_ps(d * float(sc)), m1 = _mm512_set1_ps(dmin * float(m));
          q4_k_scale_min(is + 1, scales, &sc, &m);
          const __m512 d2 = _mm512_set1_ps(d * float(sc)), m2 = _mm512_set1_ps(dmin * float(m));
          for (int h = 0; h < 2; ++h) {
            const __m512i c = bytes16(q + 16 * h);
            store16(o + 16 * h, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(_mm512_and_si512(c, f15))), m1));
            store16(o + 32 + 16 * h, _mm512_sub_ps(_mm512_mul_ps(d2, _mm512_cvtepi32_ps(_mm512_srli_epi32(c, 4))), m2));
          }
        }
      }
      return true;
    case DType::Q6_K: {
      const __m512i k32 = _mm512_set1_epi32(32);
      for (int64_t b = 0; b < n / 256; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = half(p + 208);
        for (int nn = 0; nn < 256; nn += 128, o += 128, ql += 64, qh += 32, sc += 8)
          for (int c = 0; c < 2; ++c) {
            const int l = 16 * c;
            const __m512i a = bytes16(ql + l), e = bytes16(ql + l + 32), h = bytes16(qh + l);
            const __m512i q1 = _mm512_or_si512(_mm512_and_si512(a, f15), _mm512_slli_epi32(_mm512_and_si512(h, three), 4));
            const __m512i q2 = _mm512_or_si512(_mm512_and_si512(e, f15),
                                               _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), three), 4));
            const __m512i q3 = _mm512_or_si512(_mm512_srli_epi32(a, 4),
                                               _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 4), three), 4));
            const __m512i q4 = _mm512_or_si512(_mm512_srli_epi32(e, 4), _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4));
            const __m512i qs[4] = {q1, q2, q3, q4};
            for (int k = 0; k < 4; ++k) {
              const __m512 s = _mm512_set1_ps(d * float(sc[c + 2 * k]));
              store16(o + l + 32 * k, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_sub_epi32(qs[k], k32))));
            }
          }
      }
      return true;
    }
    default: return false;
  }
}

}  // namespace

bool gguf_bf16_available() {
  static const bool has = cpu_has_avx512bf16() && onednn_supports(DType::BF16);
  return has;
}

namespace {
std::atomic<bool> g_enabled{false};
}  // namespace

void set_gguf_bf16_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool gguf_bf16_enabled() { return g_enabled.load(std::memory_order_relaxed); }

int64_t gguf_bf16_min_m() {
  return gguf_bf16_available() && gguf_bf16_enabled() ? kMinMAvx512Bf16 : std::numeric_limits<int64_t>::max();
}

bool gguf_bf16_preferred(const PackedWeight& w, int64_t m) {
  return m >= gguf_bf16_min_m() && w.gguf_layout != GgufLayout::Q8_0Groups;
}

void dequantize_gguf_bf16(const PackedWeight& w, int64_t r0, int64_t r1, uint16_t* out) {
  const int64_t n_in = w.n_in, rb = w.row_bytes();
  const DType t = gguf_block_dtype(w.format);
  thread_local std::vector<uint8_t> file_row;
  if (int64_t(file_row.size()) < rb) file_row.resize(size_t(rb));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data.data() + r * rb;
    if (w.gguf_layout != GgufLayout::File) {  // back to the file's blocks (a byte permutation)
      gguf_row_to_file_layout(w.gguf_layout, row, n_in, file_row.data());
      row = file_row.data();
    }
    uint16_t* o = out + (r - r0) * n_in;
    if (row_to_bf16(t, row, n_in, o)) continue;
    thread_local std::vector<float> f32;  // a format without a SIMD loop above: the F32 dequantization
    if (int64_t(f32.size()) < n_in) f32.resize(size_t(n_in));
    dequantize_row(t, row, f32.data(), n_in);
    to_bf16(f32.data(), n_in, o);
  }
}

void gemm_gguf_bf16(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, int64_t slab_rows) {
  if (!gguf_bf16_available())
    throw Error("gemm_gguf_bf16: this CPU has no AVX-512 BF16 (or oneDNN no BF16 matmul)");
  if (!is_gguf_format(w.format))
    throw Error("gemm_gguf_bf16: " + std::string(weight_format_name(w.format)) + " is not a GGUF block format");
  const int64_t n_in = w.n_in, n_out = w.n_out;
  if (m <= 0 || n_out == 0) return;
  if (slab_rows <= 0) slab_rows = kGgufBf16SlabRows;
  slab_rows = std::min(slab_rows, n_out);
  thread_local std::vector<uint16_t> xb, wb;
  if (int64_t(xb.size()) < m * n_in) xb.resize(size_t(m * n_in));
  if (int64_t(wb.size()) < slab_rows * n_in) wb.resize(size_t(slab_rows * n_in));
  uint16_t* const xs = xb.data();  // (thread_local: the pool's threads must use the caller's buffers)
  uint16_t* const slab = wb.data();
  const bool par = n_threads > 1 && m * n_in >= (int64_t(1) << 16);
#pragma omp parallel for schedule(static) num_threads(n_threads) if (par)
  for (int64_t i = 0; i < m; ++i) to_bf16(x + i * n_in, n_in, xs + i * n_in);
  for (int64_t s0 = 0; s0 < n_out; s0 += slab_rows) {
    const int64_t s1 = std::min(n_out, s0 + slab_rows), rows = s1 - s0;
    const int64_t n_parts = (rows + kDequantRows - 1) / kDequantRows;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1 && n_parts > 1)
    for (int64_t p = 0; p < n_parts; ++p) {
      const int64_t a = s0 + p * kDequantRows, b = std::min(s1, a + kDequantRows);
      dequantize_gguf_bf16(w, a, b, slab + (a - s0) * n_in);
    }
    onednn_matmul_bf16(xs, m, n_in, slab, rows, y + s0, n_out, n_threads);
  }
}

}  // namespace tp::cpu::detail
