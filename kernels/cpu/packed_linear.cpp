#include "kernels/cpu/packed_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/fp_formats.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/packed_kernels.h"

#include <immintrin.h>

#include "kernels/cpu/gemv.h"

namespace tp::cpu::detail {

namespace {

// E4M3 fake quantization of n values on AVX2, bit for bit the scalar rule below (f32_to_fp8_e4m3 then
// fp8_e4m3_to_f32, × s; s > 0; ±inf saturates to ±448, NaN stays NaN): a = |x / s|; the E4M3 grid step of a's binade (binades below 2^-6
// share its step: subnormals) is 2^(max(⌊log2 a⌋, −6) − 3), a power of 2, so a / step and × step are exact and
// the rounding is vroundps's nearest-even, as nearbyint's; a ≥ 448 gives 448 (min). Returns the values done.
__attribute__((target("avx2,fma"))) int64_t fake_quantize_fp8_avx2(const float* x, int64_t n, float s, float* o) {
  const __m256 sv = _mm256_set1_ps(s), sign = _mm256_set1_ps(-0.0f), qmax = _mm256_set1_ps(kFp8E4M3Max);
  const __m256i lo = _mm256_set1_epi32(127 - 6);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + c), sv);
    const __m256 a = _mm256_andnot_ps(sign, v);
    const __m256i e = _mm256_max_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 23), lo);  // biased, ≥ 2^-6's
    const __m256 step = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(3)), 23));
    const __m256 inv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254 + 3), e), 23));
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(a, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 q = _mm256_min_ps(qmax, _mm256_mul_ps(r, step));  // NaN stays NaN (minps returns its 2nd operand)
    _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_or_ps(q, _mm256_and_ps(v, sign)), sv));
  }
  return c;
}

}  // namespace

void fake_quantize_activations(const float* x, int64_t m, int64_t n_in, ActQuant act, float act_scale,
                               int64_t act_group, float* out) {
  const bool fp8 = act == ActQuant::Fp8Dynamic || act == ActQuant::Fp8Static;
  const float qmax = fp8 ? kFp8E4M3Max : 127.0f;
  const bool dynamic = act == ActQuant::Int8Dynamic || act == ActQuant::Fp8Dynamic;
  const int64_t group = dynamic && act_group > 0 ? act_group : std::max<int64_t>(n_in, 1);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c0 = 0; c0 < n_in; c0 += group) {
    const int64_t c1 = std::min(n_in, c0 + group);
    const float* xr = x + r * n_in;
    float* o = out + r * n_in;
    if (act == ActQuant::None) {
      std::copy(xr + c0, xr + c1, o + c0);
      continue;
    }
    float s = act_scale;
    if (dynamic) {
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xr[c]));
      s = amax / qmax;
    }
    int64_t c = c0;
    if (fp8 && s != 0.0f && cpu_has_avx2()) c += fake_quantize_fp8_avx2(xr + c0, c1 - c0, s, o + c0);
    for (; c < c1; ++c) {
      if (s == 0.0f) {
        o[c] = 0.0f;
      } else if (fp8) {
        o[c] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(xr[c] / s)) * s;
      } else {
        o[c] = std::clamp(std::nearbyint(xr[c] / s), -127.0f, 127.0f) * s;
      }
    }
  }
}

void packed_linear_reference(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  const int64_t n_in = w.n_in;
  std::vector<float> xq(size_t(m * n_in));
  fake_quantize_activations(x, m, n_in, w.act, w.act_scale, w.act_group, xq.data());
  if (w.act_bf16) round_bf16_f32(xq.data(), m * n_in, xq.data());
  constexpr int64_t kTile = 16;  // rows of W dequantized at a time
  const int64_t n_tiles = (w.n_out + kTile - 1) / kTile;
#pragma omp parallel num_threads(n_threads) if (n_threads > 1 && w.n_out * n_in >= (int64_t(1) << 16))
  {
    std::vector<float> tile(size_t(kTile * n_in));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t r0 = t * kTile, r1 = std::min(w.n_out, r0 + kTile);
      dequantize_rows(w, r0, r1, tile.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = r0; r < r1; ++r) {
          const float* a = xq.data() + i * n_in;
          const float* b = tile.data() + (r - r0) * n_in;
          double s = 0;
          for (int64_t c = 0; c < n_in; ++c) s += double(a[c]) * double(b[c]);
          y[i * w.n_out + r] = float(s);
        }
    }
  }
}

bool packed_linear_isa(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, PackedIsa isa) {
  // BF16 activations: every kernel takes x already rounded (those with a one-part path, w.act_bf16, then skip
  // the low part, which is 0; the others compute on the rounded values as they are).
  thread_local std::vector<float> xr;
  if (w.act_bf16) {
    xr.resize(size_t(m * w.n_in));
    round_bf16_f32(x, m * w.n_in, xr.data());
    x = xr.data();
  }
  bool ran = false;
  switch (w.format) {
    case WeightFormat::Int8:
    case WeightFormat::Int4:
      ran = w.act == ActQuant::None ? int_a16_linear(x, m, w, y, n_threads, isa)
                                    : int_w8a8_linear(x, m, w, y, n_threads, isa);
      break;
    case WeightFormat::Fp8E4M3: ran = fp8_linear(x, m, w, y, n_threads, isa); break;
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4: ran = fp4_linear(x, m, w, y, n_threads, isa); break;
    case WeightFormat::GgufQ8_0:
    case WeightFormat::GgufQ4_0:
    case WeightFormat::GgufQ4_1:
    case WeightFormat::GgufQ5_0:
    case WeightFormat::GgufQ4_K:
    case WeightFormat::GgufQ6_K:
    case WeightFormat::GgufIq4Nl:
    case WeightFormat::GgufQ5_1:
    case WeightFormat::GgufQ5_K:
    case WeightFormat::GgufQ2_K:
    case WeightFormat::GgufQ3_K:  // kernels/cpu/gemm_gguf.h: int8 dot products on the blocks
      gemm_gguf(x, m, w, y, n_threads, isa == PackedIsa::Portable ? GgufKernel::Portable : GgufKernel::Best);
      ran = true;
      break;
    default: break;
  }
  if (!ran) packed_linear_reference(x, m, w, y, n_threads);
  return ran;
}

void packed_linear(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads) {
  packed_linear_isa(x, m, w, y, n_threads, packed_best_isa());
}

}  // namespace tp::cpu::detail
