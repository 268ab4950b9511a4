// GGUF block GEMM: activation quantization, the portable kernel, and the dispatch (see gemm_gguf.h).
#include "kernels/cpu/gemm_gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/gguf_layout.h"
#include "kernels/cpu/gemm_gguf_bf16.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/gemv.h"

namespace tp::cpu::detail {

namespace {

float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// Round half to even for |v| ≤ 2^22 (here |v| ≤ 127.5): llama.cpp's nearest_int, and what _mm256_round_ps
// (_MM_ROUND_NEAREST) gives; std::nearbyint would be a libm call per element without SSE4.1.
inline int round_even(float v) {
  const float t = v + 12582912.f;
  int i;
  std::memcpy(&i, &t, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q8_0 / Q8_1 of one row (llama.cpp's x86 quantize_row_q8_0 / q8_1: id = 127 / amax, round half to even).
void quantize_row_q8_32(const float* x, int64_t n, bool q8_1, int8_t* q, float* d, float* s, int32_t* qsum) {
  static const bool avx512 = gguf_kernel_available(GgufKernel::Avx512Vnni);
  if (avx512) {
    thread_local std::vector<float> amax;
    thread_local std::vector<int> sum;
    amax.resize(size_t(n / 32));
    sum.resize(size_t(n / 32));
    quantize_q8_32_elems_avx512(x, n, q, amax.data(), sum.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      const float db = amax[size_t(b)] / 127.f;
      d[b] = f16_round(db);
      s[b] = q8_1 ? f16_round(db * float(sum[size_t(b)])) : d[b] * float(sum[size_t(b)]);
      qsum[b] = sum[size_t(b)];
    }
    return;
  }
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float db = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = round_even(xb[j] * id);
      q[b * 32 + j] = int8_t(v);
      sum += v;
    }
    d[b] = f16_round(db);
    s[b] = q8_1 ? f16_round(db * float(sum)) : d[b] * float(sum);
    qsum[b] = sum;
  }
}

// Q8_K of one row (llama.cpp's quantize_row_q8_K_ref).
void quantize_row_q8_k(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums) {
  static const bool avx512 = gguf_kernel_available(GgufKernel::Avx512Vnni);
  if (avx512) {
    thread_local std::vector<float> vmax;
    vmax.resize(size_t(n / 256));
    quantize_q8_k_elems_avx512(x, n, q, vmax.data(), bsums);
    for (int64_t b = 0; b < n / 256; ++b) d[b] = vmax[size_t(b)] == 0.0f ? 0.0f : 1 / (-127.f / vmax[size_t(b)]);
    return;
  }
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + b * 256;
    int8_t* qb = q + b * 256;
    float max = 0, amax = 0;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0;
      std::memset(qb, 0, 256);
      std::fill(bsums + b * 16, bsums + b * 16 + 16, int16_t(0));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) qb[j] = int8_t(std::min(127, round_even(iscale * xb[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += qb[j * 16 + k];
      bsums[b * 16 + j] = int16_t(sum);
    }
    d[b] = 1 / iscale;
  }
}

// ------------------------------------------------------------------------------------------------ portable
// One output: weight row `wr` (row_bytes of blocks) · activation row g.
float dot_portable(WeightFormat f, const uint8_t* wr, const GgufActs& a, int64_t g) {
  const int64_t nb = a.n_blocks(), n = a.n_in;
  const int8_t* xq = a.q.data() + g * n;
  const float* xd = a.d.data() + g * nb;
  float acc = 0;
  switch (f) {
    case WeightFormat::GgufQ8_0:
      for (int64_t b = 0; b < nb; ++b, wr += 34) {
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += int(int8_t(wr[2 + j])) * xq[b * 32 + j];
        acc += f16_to_f32(u16(wr)) * xd[b] * float(sum);
      }
      return acc;
    case WeightFormat::GgufQ4_0:
    case WeightFormat::GgufQ4_1:
    case WeightFormat::GgufQ5_0:
    case WeightFormat::GgufQ5_1: {  // d, (m,) (fifth bits qh,) 16 nibble bytes; Q5_1 = Q5_0's codes + Q4_1's min
      const float* xs = a.s.data() + g * nb;
      const bool q5 = f == WeightFormat::GgufQ5_0 || f == WeightFormat::GgufQ5_1;
      const bool min = f == WeightFormat::GgufQ4_1 || f == WeightFormat::GgufQ5_1;
      const int64_t head = 2 + (min ? 2 : 0) + (q5 ? 4 : 0), bytes = head + 16;  // 18, 20, 22, 24
      for (int64_t b = 0; b < nb; ++b, wr += bytes) {
        const float dw = f16_to_f32(u16(wr));
        const uint8_t* qs = wr + head;
        uint32_t qh = 0;
        if (q5) std::memcpy(&qh, wr + head - 4, 4);
        int sum = 0;
        for (int j = 0; j < 16; ++j) {
          const int u0 = (qs[j] & 15) | int(((qh >> j) & 1) << 4), u1 = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
          sum += u0 * xq[b * 32 + j] + u1 * xq[b * 32 + j + 16];
        }
        acc += dw * xd[b] * float(sum);
        if (min)
          acc += f16_to_f32(u16(wr + 2)) * xs[b];
        else
          acc -= (f == WeightFormat::GgufQ4_0 ? 8.0f : 16.0f) * dw * xs[b];
      }
      return acc;
    }
    case WeightFormat::GgufIq4Nl:  // Q4_0's blocks, each code's value kIq4Values[q]: no offset
      for (int64_t b = 0; b < nb; ++b, wr += 18) {
        int sum = 0;
        for (int j = 0; j < 16; ++j)
          sum += kIq4Values[wr[2 + j] & 15] * xq[b * 32 + j] + kIq4Values[wr[2 + j] >> 4] * xq[b * 32 + j + 16];
        acc += f16_to_f32(u16(wr)) * xd[b] * float(sum);
      }
      return acc;
    case WeightFormat::GgufQ4_K:
    case WeightFormat::GgufQ5_K: {  // Q5_K: Q4_K's scales and mins, then 32 bytes of fifth bits (bit j: sub-block j)
      const bool q5 = f == WeightFormat::GgufQ5_K;
      const int16_t* bs = a.bsums.data() + g * (n / 16);
      for (int64_t b = 0; b < nb; ++b, wr += q5 ? 176 : 144) {
        const uint8_t* sc = wr + 4;
        const uint8_t* qh = wr + 16;  // Q5_K only
        const uint8_t* qs = wr + (q5 ? 48 : 16);
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; ++j) {
          const int s = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
          const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
          const uint8_t* q = qs + 32 * (j / 2);
          int sum = 0;
          for (int l = 0; l < 32; ++l)
            sum += ((j % 2 ? q[l] >> 4 : q[l] & 15) | (q5 ? ((qh[l] >> j) & 1) << 4 : 0)) * xq[b * 256 + 32 * j + l];
          sumi += s * sum;
          summ += m * (bs[b * 16 + 2 * j] + bs[b * 16 + 2 * j + 1]);
        }
        const float dx = xd[b];
        acc += f16_to_f32(u16(wr)) * dx * float(sumi) - f16_to_f32(u16(wr + 2)) * dx * float(summ);
      }
      return acc;
    }
    case WeightFormat::GgufQ2_K: {  // scales[16] (sc | m << 4 a 16 columns), 2-bit codes, d, dmin
      const int16_t* bs = a.bsums.data() + g * (n / 16);
      for (int64_t b = 0; b < nb; ++b, wr += 84) {
        int sumi = 0, summ = 0;
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int l = 0; l < 16; ++l) {
            const int c = 16 * s + l;
            sum += ((wr[16 + 32 * (c / 128) + c % 32] >> (2 * ((c % 128) / 32))) & 3) * xq[b * 256 + c];
          }
          sumi += (wr[s] & 15) * sum;
          summ += (wr[s] >> 4) * bs[b * 16 + s];
        }
        const float dx = xd[b];
        acc += f16_to_f32(u16(wr + 80)) * dx * float(sumi) - f16_to_f32(u16(wr + 82)) * dx * float(summ);
      }
      return acc;
    }
    case WeightFormat::GgufQ3_K: {  // x = d (sc − 32) (q − 4): the codes' −4 off Σq per 16 (as Q6_K's −32)
      const int16_t* bs = a.bsums.data() + g * (n / 16);
      for (int64_t b = 0; b < nb; ++b, wr += 110) {
        uint16_t d;
        int8_t sc[16], codes[256];
        q3_k_block_codes(wr, &d, sc, codes);
        int sumi = 0;
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int l = 0; l < 16; ++l) sum += (codes[16 * s + l] + 4) * xq[b * 256 + 16 * s + l];
          sumi += sc[s] * (sum - 4 * bs[b * 16 + s]);
        }
        acc += f16_to_f32(d) * xd[b] * float(sumi);
      }
      return acc;
    }
    case WeightFormat::GgufQ6_K: {
      const int16_t* bs = a.bsums.data() + g * (n / 16);
      for (int64_t b = 0; b < nb; ++b, wr += 210) {
        const auto* sc = reinterpret_cast<const int8_t*>(wr + 192);
        int sumi = 0, corr = 0;
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = wr + 64 * h;
          const uint8_t* qh = wr + 128 + 32 * h;
          for (int l = 0; l < 32; ++l) {
            const int u[4] = {(ql[l] & 15) | ((qh[l] & 3) << 4), (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4),
                              (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
            for (int k = 0; k < 4; ++k) {
              const int e = 128 * h + 32 * k + l;
              sumi += sc[e / 16] * u[k] * xq[b * 256 + e];
            }
          }
        }
        for (int k = 0; k < 16; ++k) corr += sc[k] * bs[b * 16 + k];
        acc += f16_to_f32(u16(wr + 208)) * xd[b] * float(sumi - 32 * corr);
      }
      return acc;
    }
    default: throw Error("gemm_gguf: " + std::string(weight_format_name(f)) + " is not a GGUF block format");
  }
}

}  // namespace

void gguf_rows_portable(const PackedWeight& w, const GgufActs& a, int64_t r0, int64_t r1, float* y) {
  const int64_t rb = w.row_bytes();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < a.m; ++g) y[g * w.n_out + r] = dot_portable(w.format, w.data.data() + r * rb, a, g);
}

const char* gguf_kernel_name(GgufKernel k) {
  switch (k) {
    case GgufKernel::Best: return "best";
    case GgufKernel::Avx512Vnni: return "avx512_vnni";
    case GgufKernel::Avx2: return "avx2";
    case GgufKernel::Portable: return "portable";
    case GgufKernel::DequantBf16: return "dequant_bf16";
  }
  return "?";
}

bool gguf_kernel_available(GgufKernel k) {
  static const bool avx2 = cpu_has_avx2() && __builtin_cpu_supports("f16c");
  static const bool vnni = avx2 && cpu_has_avx512f() && __builtin_cpu_supports("avx512vnni") &&
                           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  switch (k) {
    case GgufKernel::Avx512Vnni: return vnni;
    case GgufKernel::Avx2: return avx2;
    case GgufKernel::DequantBf16: return gguf_bf16_available();
    default: return true;
  }
}

GgufActType gguf_act_type(WeightFormat f) {
  switch (f) {
    case WeightFormat::GgufQ8_0:
    case WeightFormat::GgufQ4_0:
    case WeightFormat::GgufQ5_0:
    case WeightFormat::GgufIq4Nl: return GgufActType::Q8_0;
    case WeightFormat::GgufQ4_1:
    case WeightFormat::GgufQ5_1: return GgufActType::Q8_1;
    case WeightFormat::GgufQ2_K:
    case WeightFormat::GgufQ3_K:
    case WeightFormat::GgufQ4_K:
    case WeightFormat::GgufQ5_K:
    case WeightFormat::GgufQ6_K: return GgufActType::Q8_K;
    default: throw Error("gemm_gguf: " + std::string(weight_format_name(f)) + " is not a GGUF block format");
  }
}

void size_gguf_acts(int64_t m, int64_t n_in, GgufActType type, WeightFormat f, GgufPrep prep, GgufActs* a) {
  a->type = type;
  a->m = m;
  a->n_in = n_in;
  const int64_t nb = a->n_blocks();
  a->q.resize(size_t(m * n_in));
  a->d.resize(size_t(m * nb));
  if (type == GgufActType::Q8_K) {
    a->bsums.resize(size_t(m * n_in / 16));
  } else {
    a->s.resize(size_t(m * nb));
    a->qsum.resize(size_t(m * nb));
  }
  switch (prep) {
    case GgufPrep::None: break;
    case GgufPrep::Pairs: {
      const size_t n = size_t(m * ((nb + 1) / 2) * 16);
      a->pair_d.resize(n);
      a->pair_bias.resize(n);
      break;
    }
    case GgufPrep::Quads: {
      const size_t n = size_t(m * ((nb + 3) / 4));
      a->quad_x.resize(n * 128);
      a->quad_d.resize(n * 16);
      a->quad_bias.resize(n * 16);
      a->quad_s.resize(f == WeightFormat::GgufQ4_1 ? n * 16 : 0);
      break;
    }
    case GgufPrep::Groups: {
      const size_t n = size_t(m * ((nb + 15) / 16));
      a->grp_x.resize(n * 512);
      a->grp_d.resize(n * 16);
      a->grp_bias.resize(n * 16);
      break;
    }
    case GgufPrep::K4: a->k4_x.resize(a->q.size()); break;
  }
}

namespace {

// The weights' offset k of the −k · Σx bias (Q8_0 codes held as q + 128, Q5_0's 16, Q4_0's 8; none for Q4_1).
int bias_k(WeightFormat f) {
  return f == WeightFormat::GgufQ8_0 ? 128 : f == WeightFormat::GgufQ4_0 ? 8 : f == WeightFormat::GgufQ5_0 ? 16 : 0;
}

void pairs_rows(WeightFormat f, int64_t g0, int64_t g1, GgufActs* a) {
  const int64_t nb = a->n_blocks(), np = (nb + 1) / 2;
  const int k = bias_k(f);
  std::fill(a->pair_d.begin() + g0 * np * 16, a->pair_d.begin() + g1 * np * 16, 0.0f);
  std::fill(a->pair_bias.begin() + g0 * np * 16, a->pair_bias.begin() + g1 * np * 16, 0);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      const size_t o = size_t((g * np + b / 2) * 16 + (b % 2) * 8);
      std::fill(a->pair_d.begin() + o, a->pair_d.begin() + o + 8, a->d[size_t(g * nb + b)]);
      if (k != 0) a->pair_bias[o] = -k * a->qsum[size_t(g * nb + b)];
    }
}

void quads_rows(WeightFormat f, int64_t g0, int64_t g1, GgufActs* a) {
  const int k = bias_k(f);
  const int64_t nb = a->n_blocks(), nq = (nb + 3) / 4;
  std::fill(a->quad_x.begin() + g0 * nq * 128, a->quad_x.begin() + g1 * nq * 128, int8_t(0));
  std::fill(a->quad_d.begin() + g0 * nq * 16, a->quad_d.begin() + g1 * nq * 16, 0.0f);
  std::fill(a->quad_bias.begin() + g0 * nq * 16, a->quad_bias.begin() + g1 * nq * 16, 0);
  const bool q4_1 = f == WeightFormat::GgufQ4_1;
  if (q4_1) std::fill(a->quad_s.begin() + g0 * nq * 16, a->quad_s.begin() + g1 * nq * 16, 0.0f);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t q = g * nq + b / 4, j = b % 4;
      const int8_t* xb = a->q.data() + g * a->n_in + b * 32;
      std::memcpy(a->quad_x.data() + q * 128 + 16 * j, xb, 16);
      std::memcpy(a->quad_x.data() + q * 128 + 64 + 16 * j, xb + 16, 16);
      std::fill(a->quad_d.begin() + q * 16 + 4 * j, a->quad_d.begin() + q * 16 + 4 * j + 4, a->d[size_t(g * nb + b)]);
      a->quad_bias[size_t(q * 16 + 4 * j)] = -k * a->qsum[size_t(g * nb + b)];
      if (q4_1) a->quad_s[size_t(q * 16 + 4 * j)] = a->s[size_t(g * nb + b)];
    }
}

void groups_rows(WeightFormat f, int64_t g0, int64_t g1, GgufActs* a) {
  const int k = bias_k(f);
  const int64_t nb = a->n_blocks(), ng = (nb + 15) / 16;
  if (nb % 16 != 0)  // the last group's lanes past the row's end stay zero
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o = g * ng + ng - 1;
      std::memset(a->grp_x.data() + o * 512, 0, 512);
      std::fill(a->grp_d.begin() + o * 16, a->grp_d.begin() + o * 16 + 16, 0.0f);
      std::fill(a->grp_bias.begin() + o * 16, a->grp_bias.begin() + o * 16 + 16, 0);
    }
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t o = g * ng + b / 16, j = b % 16;
      const int8_t* xb = a->q.data() + g * a->n_in + b * 32;
      int8_t* dst = a->grp_x.data() + o * 512 + 4 * j;
      for (int t = 0; t < 8; ++t) std::memcpy(dst + 64 * t, xb + 4 * t, 4);
      a->grp_d[size_t(o * 16 + j)] = a->d[size_t(g * nb + b)];
      a->grp_bias[size_t(o * 16 + j)] = -k * a->qsum[size_t(g * nb + b)];
    }
}

void k4_rows(int64_t g0, int64_t g1, GgufActs* a) {
  const int64_t nb = a->n_blocks();
  for (int64_t b = g0 * nb; b < g1 * nb; ++b)
    for (int h = 0; h < 2; ++h) {
      const int8_t* src = a->q.data() + 256 * b + 128 * h;
      int8_t* dst = a->k4_x.data() + 256 * b + 128 * h;
      std::memcpy(dst, src, 32);
      std::memcpy(dst + 32, src + 64, 32);
      std::memcpy(dst + 64, src + 32, 32);
      std::memcpy(dst + 96, src + 96, 32);
    }
}

}  // namespace

void fill_gguf_acts(const float* x, int64_t g0, int64_t g1, WeightFormat f, GgufPrep prep, GgufActs* a) {
  const int64_t nb = a->n_blocks(), n_in = a->n_in;
  for (int64_t g = g0; g < g1; ++g) {
    if (a->type == GgufActType::Q8_K)
      quantize_row_q8_k(x + g * n_in, n_in, a->q.data() + g * n_in, a->d.data() + g * nb, a->bsums.data() + g * (n_in / 16));
    else
      quantize_row_q8_32(x + g * n_in, n_in, a->type == GgufActType::Q8_1, a->q.data() + g * n_in, a->d.data() + g * nb,
                         a->s.data() + g * nb, a->qsum.data() + g * nb);
  }
  switch (prep) {
    case GgufPrep::None: break;
    case GgufPrep::Pairs: pairs_rows(f, g0, g1, a); break;
    case GgufPrep::Quads: quads_rows(f, g0, g1, a); break;
    case GgufPrep::Groups: groups_rows(f, g0, g1, a); break;
    case GgufPrep::K4: k4_rows(g0, g1, a); break;
  }
}

void quantize_gguf_acts(const float* x, int64_t m, int64_t n_in, GgufActType type, GgufActs* out) {
  size_gguf_acts(m, n_in, type, WeightFormat::GgufQ8_0, GgufPrep::None, out);
  fill_gguf_acts(x, 0, m, WeightFormat::GgufQ8_0, GgufPrep::None, out);
}

GgufPrep gguf_prep(GgufKernel k, const PackedWeight& w) {
  if (k != GgufKernel::Avx512Vnni || gguf_rows16_only(w.format)) return GgufPrep::None;
  if (w.gguf_layout == GgufLayout::Q4_0Groups || w.gguf_layout == GgufLayout::Q8_0Groups || w.gguf_layout == GgufLayout::Q5_0Groups)
    return GgufPrep::Groups;
  if (w.format == WeightFormat::GgufQ4_0 || w.format == WeightFormat::GgufQ4_1 || w.gguf_layout != GgufLayout::File)
    return GgufPrep::Quads;
  if (w.format == WeightFormat::GgufQ4_K) return GgufPrep::K4;
  if (gguf_act_type(w.format) != GgufActType::Q8_K) return GgufPrep::Pairs;
  return GgufPrep::None;
}

void prepare_gguf_weight(PackedWeight* w) {
  // Measured on a loaded Zen 4 (bench/results/gguf-vnni-zen4-20261203-0030.md, gemm_gguf_bench): Q8_0Groups
  // where a row is whole groups: prefill ~1.9x, decode 1.4x from cache and even-to-mixed from DRAM; a last
  // group of a few blocks (576 inputs = 16 + 2) costs nearly a whole one, so those rows keep the file layout.
  // Q4_0Groups: prefill 1.75x but decode 0.7-0.95x, so not chosen (the file layout's quad tile runs).
  // Q5_0Quads: decode even to 1.1x, prefill 1.15-1.4x.
  // On Intel (a Xeon with AMX, 2026-12-03, gemm_gguf_bench 1 thread, two runs; µs a call, file / groups / quads)
  // Q8_0Quads is the fastest Q8_0 layout at every shape, where Zen 4 decoded it 2x slower from DRAM: decode
  // 576x576 37 / 37 / 28, 1536x576 95-100 / 100-102 / 77-78, 576x1536 98-102 / 78 / 76, 49152x576 2352-2408 /
  // 3100-3128 / 2046-2060; prefill m = 512 (ms) 3.1 / 3.0 / 2.1, 8.0-8.3 / 7.5-8.2 / 5.2-5.5, 8.1 / 4.3-4.5 / 4.5.
  const bool whole_groups = w->n_in % 512 == 0;
  const GgufLayout q8_0 = cpu_is_intel() ? GgufLayout::Q8_0Quads : whole_groups ? GgufLayout::Q8_0Groups : GgufLayout::File;
  const GgufLayout to = w->format == WeightFormat::GgufQ8_0   ? q8_0
                        : w->format == WeightFormat::GgufQ5_0 ? GgufLayout::Q5_0Quads
                                                              : GgufLayout::File;
  if (to == GgufLayout::File || w->gguf_layout != GgufLayout::File || w->rows_layout != RowsLayout::Rows ||
      !gguf_kernel_available(GgufKernel::Avx512Vnni))
    return;
  const int64_t rb = w->row_bytes();
  std::vector<uint8_t> row(static_cast<size_t>(rb));
  for (int64_t r = 0; r < w->n_out; ++r) {
    uint8_t* p = w->data.data() + r * rb;
    std::memcpy(row.data(), p, size_t(rb));
    gguf_row_from_file_layout(to, row.data(), w->n_in, p);
  }
  w->gguf_layout = to;
}

namespace {

// A copy of w with its rows back in the file layout (the kernels other than AVX-512 VNNI read only that).
PackedWeight file_layout_copy(const PackedWeight& w) {
  PackedWeight c;
  c.format = w.format;
  c.n_out = w.n_out;
  c.n_in = w.n_in;
  c.data = AlignedBytes(w.data.size());
  const int64_t rb = w.row_bytes();
  for (int64_t r = 0; r < w.n_out; ++r) gguf_row_to_file_layout(w.gguf_layout, w.data.data() + r * rb, w.n_in, c.data.data() + r * rb);
  return c;
}

}  // namespace

GgufKernel gguf_best_tile() {
  return gguf_kernel_available(GgufKernel::Avx512Vnni) ? GgufKernel::Avx512Vnni
         : gguf_kernel_available(GgufKernel::Avx2)     ? GgufKernel::Avx2
                                                       : GgufKernel::Portable;
}

void gemm_gguf(const float* x, int64_t m, const PackedWeight& w, float* y, int n_threads, GgufKernel kernel) {
  if (w.rows_layout == RowsLayout::Rows16) {  // 16-row blocks (rows16.h): the GEMM-form kernels at every m
    if (kernel == GgufKernel::Best && rows16_linear(x, m, w, y, n_threads)) return;
    PackedWeight f = copy_packed_weight(w);  // tests and the reference paths: the file's blocks again
    set_rows_layout(&f, RowsLayout::Rows);
    f.act_bf16 = false;  // x as given (packed_linear rounds it to BF16 for w)
    gemm_gguf(x, m, f, y, n_threads, kernel);
    return;
  }
  const GgufActType act = gguf_act_type(w.format);
  if (kernel == GgufKernel::Best) kernel = gguf_bf16_preferred(w, m) ? GgufKernel::DequantBf16 : gguf_best_tile();
  if (!gguf_kernel_available(kernel))
    throw Error(std::string("gemm_gguf: this CPU has no ") + gguf_kernel_name(kernel) + " kernel");
  if (kernel == GgufKernel::DequantBf16) {
    gemm_gguf_bf16(x, m, w, y, n_threads);
    return;
  }
  if (w.gguf_layout != GgufLayout::File && kernel != GgufKernel::Avx512Vnni) {
    // Tests and the reference paths only: the regrouped rows are made where the VNNI kernel runs.
    const PackedWeight f = file_layout_copy(w);
    gemm_gguf(x, m, f, y, n_threads, kernel);
    return;
  }
  const GgufRowsFn rows = gguf_rows16_only(w.format)         ? gguf_rows_portable
                          : kernel == GgufKernel::Avx512Vnni ? gguf_rows_vnni
                          : kernel == GgufKernel::Avx2       ? gguf_rows_avx2
                                                             : gguf_rows_portable;
  thread_local GgufActs a;
  const GgufPrep prep = gguf_prep(kernel, w);
  size_gguf_acts(m, w.n_in, act, w.format, prep, &a);
  // Serial: split over the threads (fill_gguf_acts takes row ranges) it was slower — pp512 Q4_0 on 2 threads
  // with a third process on one of the 2 cores 126 vs 160-179 tok/s: a second parallel region per GEMM.
  fill_gguf_acts(x, 0, m, w.format, prep, &a);
  // Chunks of 8 rows (the SIMD kernels take rows in pairs), split statically over the threads: each thread
  // gets one contiguous run of whole chunks and makes one rows() call for it (a call per chunk cost ~3-5% of a
  // Q4_0 decode step on Zen 3 in per-call set-up: row_bytes(), the block counts' divisions). A run starts on a
  // chunk boundary, so every output's operations are those of its chunk whatever the thread count.
  constexpr int64_t kChunk = 8;
  const int64_t n_chunks = (w.n_out + kChunk - 1) / kChunk;
  const bool parallel = n_threads > 1 && n_chunks > 1 && worth_parallel(w.n_out * w.row_bytes() * ((m + 3) / 4));
  const int64_t n_runs = parallel ? std::min<int64_t>(n_threads, n_chunks) : 1;
  const GgufActs& acts = a;
#pragma omp parallel for schedule(static, 1) num_threads(int(n_runs)) if (parallel)
  for (int64_t t = 0; t < n_runs; ++t) {
    const int64_t c0 = n_chunks * t / n_runs, c1 = n_chunks * (t + 1) / n_runs;
    if (c0 < c1) rows(w, acts, c0 * kChunk, std::min(w.n_out, c1 * kChunk), y);
  }
}

}  // namespace tp::cpu::detail
