#include "rank/quant_rtn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"

namespace tp {

namespace {

int qmin(const QuantSpec& s) { return -(1 << (s.bits - 1)); }
int qmax(const QuantSpec& s) { return (1 << (s.bits - 1)) - 1; }

float absmax(const float* v, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

}  // namespace

uint8_t mx_exponent_byte(float amax) {
  if (!(amax > 0)) return 0;  // 2^-127: every code 0
  // amax rounded to a power of two at E2M1's one mantissa bit (1.75·2^k and above round up to 2^(k+1)), as
  // compressed-tensors 0.19's generate_mx_scales does; then 2^-2 of it (E2M1's largest power, 4, maps to it).
  // The plain floor(log2 amax) − 2 clips every block maximum in [1.5, 2)·2^k to 6; this clips only [1.5, 1.75).
  uint32_t bits;
  std::memcpy(&bits, &amax, sizeof bits);
  bits = (bits + (1u << 21)) & 0xFF800000u;
  float p;
  std::memcpy(&p, &bits, sizeof p);
  const int e = std::isfinite(p) ? std::clamp(std::ilogb(p) - 2, -127, 127) : 127;
  return uint8_t(e + 127);
}

void check_quant_spec(const QuantSpec& s, int64_t n_in, const std::string& what) {
  auto divisors = [&](int64_t limit) {
    std::string d;
    for (int64_t g = 8; g <= std::min<int64_t>(limit, n_in); ++g)
      if (n_in % g == 0) d += (d.empty() ? "" : ", ") + std::to_string(g);
    return d.empty() ? std::string("none") : d;
  };
  switch (s.kind) {
    case QuantKind::Int:
      if (s.bits != 3 && s.bits != 4 && s.bits != 8)
        throw InputError(what + ": " + std::to_string(s.bits) + "-bit integers are not supported (3, 4 or 8)");
      if (s.group_size < 0 || (s.group_size > 0 && n_in % s.group_size != 0))
        throw InputError(what + ": group size " + std::to_string(s.group_size) + " does not divide its " +
                         std::to_string(n_in) + " input columns (group sizes that do, up to 256: " + divisors(256) +
                         "; or 0: per channel)");
      break;
    case QuantKind::Fp8:
      if ((s.group_size > 0) != (s.block_rows > 0) || s.group_size < 0 || s.block_rows < 0)
        throw InputError(what + ": FP8 scale blocks need both their rows and columns (" + std::to_string(s.block_rows) +
                         " x " + std::to_string(s.group_size) + "; 0 x 0: per channel)");
      break;
    case QuantKind::Mxfp4:
    case QuantKind::Nvfp4: {
      const int64_t b = s.kind == QuantKind::Mxfp4 ? 32 : 16;
      if (n_in % b != 0)
        throw InputError(what + ": " + std::to_string(n_in) + " input columns are not a multiple of the " +
                         (s.kind == QuantKind::Mxfp4 ? "MXFP4" : "NVFP4") + " block of " + std::to_string(b));
      break;
    }
  }
}

IntParams int_params(const QuantSpec& s, const float* v, int64_t n, bool bf16_scale) {
  float lo = 0, hi = 0;  // min(min, 0), max(max, 0)
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  IntParams p;
  const float range = float(qmax(s) - qmin(s));
  if (s.symmetric) {
    p.scale = std::max(-lo, hi) / (range / 2);
    if (!(p.scale > 0)) p.scale = 1.0f;
    if (bf16_scale) p.scale = bf16_to_f32(f32_to_bf16(p.scale));
    return p;
  }
  p.scale = (hi - lo) / range;
  if (!(p.scale > 0)) p.scale = 1.0f;
  if (bf16_scale) p.scale = bf16_to_f32(f32_to_bf16(p.scale));
  p.zero = std::clamp(qmin(s) - int(std::nearbyint(lo / p.scale)), qmin(s), qmax(s));
  return p;
}

int int_quant(const QuantSpec& s, const IntParams& p, float w) {
  return std::clamp(int(std::nearbyint(w / p.scale)) + p.zero, qmin(s), qmax(s));
}

int64_t QuantizedLinear::n_groups() const {
  if (spec.kind == QuantKind::Fp8 && spec.group_size > 0) return (n_in + spec.group_size - 1) / spec.group_size;
  return spec.kind == QuantKind::Int ? n_in / spec.group(n_in) : 1;
}

namespace {
// Index into QuantizedLinear::scales of an FP8 weight's value (r, c): its row, or its block's.
int64_t fp8_scale_index(const QuantSpec& s, int64_t n_groups, int64_t r, int64_t c) {
  return s.group_size > 0 ? (r / s.block_rows) * n_groups + c / s.group_size : r;
}
}  // namespace

std::vector<float> QuantizedLinear::dequantize() const {
  std::vector<float> out(static_cast<size_t>(n_out * n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    float* o = out.data() + r * n_in;
    switch (spec.kind) {
      case QuantKind::Int: {
        const int64_t g = spec.group(n_in), ng = n_groups();
        for (int64_t c = 0; c < n_in; ++c) {
          const int64_t gi = g_idx.empty() ? c / g : g_idx[size_t(c)];
          IntParams p{scales[size_t(r * ng + gi)], zeros.empty() ? 0 : zeros[size_t(r * ng + gi)]};
          o[c] = int_dequant(p, q[size_t(r * n_in + c)]);
        }
        break;
      }
      case QuantKind::Fp8: {
        const int64_t ng = n_groups();
        for (int64_t c = 0; c < n_in; ++c)
          o[c] = fp8_e4m3_to_f32(codes[size_t(r * n_in + c)]) * scales[size_t(fp8_scale_index(spec, ng, r, c))];
        break;
      }
      case QuantKind::Mxfp4:
        for (int64_t c = 0; c < n_in; ++c)
          o[c] = e2m1_to_f32(codes[size_t(r * n_in + c)]) * e8m0_to_f32(scale_bytes[size_t(r * (n_in / 32) + c / 32)]);
        break;
      case QuantKind::Nvfp4:
        for (int64_t c = 0; c < n_in; ++c)
          o[c] = e2m1_to_f32(codes[size_t(r * n_in + c)]) *
                 fp8_e4m3_to_f32(scale_bytes[size_t(r * (n_in / 16) + c / 16)]) / global_scale;
        break;
    }
  }
  return out;
}

float nvfp4_global_scale(float amax) {
  // (1 / amax) · 2688 rounded twice, not 2688 / amax: compressed-tensors' generate_gparam divides a Python number
  // by a tensor, which torch computes as reciprocal-then-multiply (1 ulp off the quotient for some amax, enough
  // to move a block scale across an E4M3 rounding tie).
  return amax > 0 ? (1.0f / amax) * (kFp8E4M3Max * kE2M1Max) : 1.0f;
}

QuantizedLinear quantize_rtn(const QuantSpec& s, const float* w, int64_t n_out, int64_t n_in, float nvfp4_amax) {
  check_quant_spec(s, n_in, "weight");
  QuantizedLinear ql;
  ql.spec = s;
  ql.n_out = n_out;
  ql.n_in = n_in;
  switch (s.kind) {
    case QuantKind::Int: {
      const int64_t g = s.group(n_in), ng = n_in / g;
      ql.q.resize(size_t(n_out * n_in));
      ql.scales.resize(size_t(n_out * ng));
      if (!s.symmetric) ql.zeros.resize(size_t(n_out * ng));
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t gi = 0; gi < ng; ++gi) {
          const float* v = w + r * n_in + gi * g;
          const IntParams p = int_params(s, v, g);
          ql.scales[size_t(r * ng + gi)] = p.scale;
          if (!s.symmetric) ql.zeros[size_t(r * ng + gi)] = int8_t(p.zero);
          for (int64_t c = 0; c < g; ++c) ql.q[size_t(r * n_in + gi * g + c)] = int8_t(int_quant(s, p, v[c]));
        }
      break;
    }
    case QuantKind::Fp8: {
      ql.codes.resize(size_t(n_out * n_in));
      if (s.group_size > 0) {  // blocks: max|w| over each block_rows × group_size (partial at the edges)
        const int64_t br = s.block_rows, bc = s.group_size, nbc = ql.n_groups(), nbr = (n_out + br - 1) / br;
        ql.scales.resize(size_t(nbr * nbc));
        for (int64_t bi = 0; bi < nbr; ++bi)
          for (int64_t bj = 0; bj < nbc; ++bj) {
            const int64_t r0 = bi * br, r1 = std::min(n_out, r0 + br), c0 = bj * bc, c1 = std::min(n_in, c0 + bc);
            float am = 0;
            for (int64_t r = r0; r < r1; ++r) am = std::max(am, absmax(w + r * n_in + c0, c1 - c0));
            float sc = am / kFp8E4M3Max;
            if (!(sc > 0)) sc = 1.0f;
            ql.scales[size_t(bi * nbc + bj)] = sc;
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t c = c0; c < c1; ++c) ql.codes[size_t(r * n_in + c)] = f32_to_fp8_e4m3(w[r * n_in + c] / sc);
          }
        break;
      }
      ql.scales.resize(size_t(n_out));
      for (int64_t r = 0; r < n_out; ++r) {
        float sc = absmax(w + r * n_in, n_in) / kFp8E4M3Max;
        if (!(sc > 0)) sc = 1.0f;
        ql.scales[size_t(r)] = sc;
        for (int64_t c = 0; c < n_in; ++c) ql.codes[size_t(r * n_in + c)] = f32_to_fp8_e4m3(w[r * n_in + c] / sc);
      }
      break;
    }
    case QuantKind::Mxfp4:
    case QuantKind::Nvfp4: {
      const bool nv = s.kind == QuantKind::Nvfp4;
      const int64_t b = nv ? 16 : 32, nb = n_in / b;
      ql.codes.resize(size_t(n_out * n_in));
      ql.scale_bytes.resize(size_t(n_out * nb));
      if (nv) ql.global_scale = nvfp4_global_scale(std::max(nvfp4_amax, absmax(w, n_out * n_in)));
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t bi = 0; bi < nb; ++bi) {
          const float* v = w + r * n_in + bi * b;
          const float amax = absmax(v, b);
          float step;  // w = e2m1 · step
          if (nv) {
            const uint8_t s8 = f32_to_fp8_e4m3(amax / kE2M1Max * ql.global_scale);
            ql.scale_bytes[size_t(r * nb + bi)] = s8;
            step = fp8_e4m3_to_f32(s8) / ql.global_scale;
          } else {
            const uint8_t e = mx_exponent_byte(amax);
            ql.scale_bytes[size_t(r * nb + bi)] = e;
            step = e8m0_to_f32(e);
          }
          for (int64_t c = 0; c < b; ++c)
            ql.codes[size_t(r * n_in + bi * b + c)] = step > 0 ? f32_to_e2m1(v[c] / step) : 0;
        }
      break;
    }
  }
  return ql;
}

double relative_output_error(const float* x, int64_t n_tok, const float* w, const float* w_q, int64_t n_out,
                             int64_t n_in) {
  double num = 0, den = 0;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double a = 0, b = 0;
      const float* xr = x + t * n_in;
      const float* wr = w + o * n_in;
      const float* qr = w_q + o * n_in;
      for (int64_t c = 0; c < n_in; ++c) {
        a += double(xr[c]) * wr[c];
        b += double(xr[c]) * qr[c];
      }
      num += (b - a) * (b - a);
      den += a * a;
    }
  return den > 0 ? num / den : num;
}

}  // namespace tp
