// llama.cpp's reference GGUF quantizers (ggml-quants.c), transcribed (see gguf_quantize.h).
#include "kernels/cpu/gguf_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"

namespace tp::cpu {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // GROUP_MAX_EPS

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// llama.cpp's nearest_int: round half to even via the 1.5 · 2^23 trick (|v| ≤ 4194303).
int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

void q8_0(const float* x, uint8_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 32; ++j) y[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

void q4_0(const float* x, uint8_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 18) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 16; ++j) {
      const uint8_t xi0 = uint8_t(std::min<int>(15, int8_t(x[j] * id + 8.5f)));
      const uint8_t xi1 = uint8_t(std::min<int>(15, int8_t(x[16 + j] * id + 8.5f)));
      y[2 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void q4_1(const float* x, uint8_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 20) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    put_f16(y + 2, min);
    for (int j = 0; j < 16; ++j) {
      const uint8_t xi0 = uint8_t(std::min<int>(15, int8_t((x[j] - min) * id + 0.5f)));
      const uint8_t xi1 = uint8_t(std::min<int>(15, int8_t((x[16 + j] - min) * id + 0.5f)));
      y[4 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void q5_0(const float* x, uint8_t* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, y += 22) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t xi0 = uint8_t(std::min<int>(31, int8_t(x[j] * id + 16.5f)));
      const uint8_t xi1 = uint8_t(std::min<int>(31, int8_t(x[16 + j] * id + 16.5f)));
      y[6 + j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= uint32_t((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= uint32_t((xi1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(y + 2, &qh, 4);
  }
}

// make_qkx2_quants (ggml-quants.c): scale and -min of n values with weights, codes in [0, nmax].
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

void q4_k(const float* x, uint8_t* y, int64_t nb) {
  uint8_t L[256], Laux[32];
  float weights[32], mins[8], scales[8];
  for (int64_t i = 0; i < nb; ++i, x += 256, y += 144) {
    uint8_t* sc = y + 4;
    uint8_t* qs = y + 16;
    std::memset(sc, 0, 12);
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
      uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
      uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
      ls = std::min<uint8_t>(63, ls);
      lm = std::min<uint8_t>(63, lm);
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
        sc[j - 4] |= uint8_t((ls >> 4) << 6);
        sc[j - 0] |= uint8_t((lm >> 4) << 6);
      }
    }
    put_f16(y, max_scale / 63.f);
    put_f16(y + 2, max_min / 63.f);
    uint8_t s, m;
    for (int j = 0; j < 8; ++j) {
      get_scale_min_k4(j, sc, &s, &m);
      const float d = get_f16(y) * s;
      if (d == 0.0f) continue;
      const float dm = get_f16(y + 2) * m;
      for (int ii = 0; ii < 32; ++ii) {
        int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = uint8_t(std::max(0, std::min(15, l)));
      }
    }
    for (int j = 0; j < 256; j += 64, qs += 32)
      for (int l = 0; l < 32; ++l) qs[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

// make_qx_quants with rmse_type 1 and no weights (what quantize_row_q6_K_ref uses).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void q6_k(const float* x, uint8_t* y, int64_t nb) {
  int8_t L[256];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += 256, y += 210) {
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    auto* sc = reinterpret_cast<int8_t*>(y + 192);
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(y, 0, 210);
      put_f16(y + 208, 0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    put_f16(y + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = get_f16(y + 208) * float(sc[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = int8_t(l + 32);
      }
    }
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                      q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6));
      }
  }
}

}  // namespace

void quantize_row_gguf(DType t, const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  const int64_t nb = n / dtype_block_elems(t);
  switch (t) {
    case DType::Q8_0: q8_0(x, y, nb); return;
    case DType::Q4_0: q4_0(x, y, nb); return;
    case DType::Q4_1: q4_1(x, y, nb); return;
    case DType::Q5_0: q5_0(x, y, nb); return;
    case DType::Q4_K: q4_k(x, y, nb); return;
    case DType::Q6_K: q6_k(x, y, nb); return;
    default: throw Error("quantize_row_gguf: " + std::string(dtype_name(t)) + " is not a GGUF block type");
  }
}

}  // namespace tp::cpu
