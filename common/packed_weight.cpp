// PackedWeight: names, sizes, checks and the reference dequantization (see packed_weight.h).
#include "common/packed_weight.h"

#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"

namespace tp {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

DType gguf_dtype(WeightFormat f) { return gguf_block_dtype(f); }
bool is_gguf(WeightFormat f) { return is_gguf_format(f); }

int64_t fp4_block(WeightFormat f) { return f == WeightFormat::Mxfp4 ? 32 : 16; }

}  // namespace

bool is_gguf_format(WeightFormat f) {
  return f == WeightFormat::GgufQ8_0 || f == WeightFormat::GgufQ4_0 || f == WeightFormat::GgufQ4_1 ||
         f == WeightFormat::GgufQ5_0 || f == WeightFormat::GgufQ4_K || f == WeightFormat::GgufQ6_K ||
         f == WeightFormat::GgufIq4Nl || f == WeightFormat::GgufQ5_1 || f == WeightFormat::GgufQ5_K ||
         f == WeightFormat::GgufQ2_K || f == WeightFormat::GgufQ3_K;
}

// The GGUF block dtype of a GGUF format (its blocks are what dtype.h dequantizes).
DType gguf_block_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::GgufQ8_0: return DType::Q8_0;
    case WeightFormat::GgufQ4_0: return DType::Q4_0;
    case WeightFormat::GgufQ4_1: return DType::Q4_1;
    case WeightFormat::GgufQ5_0: return DType::Q5_0;
    case WeightFormat::GgufQ4_K: return DType::Q4_K;
    case WeightFormat::GgufQ6_K: return DType::Q6_K;
    case WeightFormat::GgufIq4Nl: return DType::IQ4_NL;
    case WeightFormat::GgufQ5_1: return DType::Q5_1;
    case WeightFormat::GgufQ5_K: return DType::Q5_K;
    case WeightFormat::GgufQ2_K: return DType::Q2_K;
    case WeightFormat::GgufQ3_K: return DType::Q3_K;
    default: throw Error("gguf_block_dtype: " + std::string(weight_format_name(f)) + " is not a GGUF block format");
  }
}

bool is_gguf_block_dtype(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q4_K ||
         t == DType::Q6_K || t == DType::IQ4_NL || t == DType::Q5_1 || t == DType::Q5_K || t == DType::Q2_K ||
         t == DType::Q3_K;
}

DType gguf_held_dtype(DType t) {
  if (!is_quantized(t) || is_gguf_block_dtype(t)) return t;
  return DType::IQ4_NL;  // IQ4_XS
}

WeightFormat gguf_weight_format(DType t) {
  switch (t) {
    case DType::Q8_0: return WeightFormat::GgufQ8_0;
    case DType::Q4_0: return WeightFormat::GgufQ4_0;
    case DType::Q4_1: return WeightFormat::GgufQ4_1;
    case DType::Q5_0: return WeightFormat::GgufQ5_0;
    case DType::Q4_K: return WeightFormat::GgufQ4_K;
    case DType::Q6_K: return WeightFormat::GgufQ6_K;
    case DType::IQ4_NL: return WeightFormat::GgufIq4Nl;
    case DType::Q5_1: return WeightFormat::GgufQ5_1;
    case DType::Q5_K: return WeightFormat::GgufQ5_K;
    case DType::Q2_K: return WeightFormat::GgufQ2_K;
    case DType::Q3_K: return WeightFormat::GgufQ3_K;
    default: throw Error("gguf_weight_format: " + std::string(dtype_name(t)) + " is not a GGUF block type");
  }
}

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::GgufQ8_0: return "q8_0";
    case WeightFormat::GgufQ4_0: return "q4_0";
    case WeightFormat::GgufQ4_1: return "q4_1";
    case WeightFormat::GgufQ5_0: return "q5_0";
    case WeightFormat::GgufQ4_K: return "q4_k";
    case WeightFormat::GgufQ6_K: return "q6_k";
    case WeightFormat::Int8: return "int8";
    case WeightFormat::Int4: return "int4";
    case WeightFormat::Fp8E4M3: return "fp8_e4m3";
    case WeightFormat::Mxfp4: return "mxfp4";
    case WeightFormat::Nvfp4: return "nvfp4";
    case WeightFormat::GgufIq4Nl: return "iq4_nl";
    case WeightFormat::GgufQ5_1: return "q5_1";
    case WeightFormat::GgufQ5_K: return "q5_k";
    case WeightFormat::GgufQ2_K: return "q2_k";
    case WeightFormat::GgufQ3_K: return "q3_k";
  }
  return "?";
}

std::string_view act_quant_name(ActQuant a) {
  switch (a) {
    case ActQuant::None: return "none";
    case ActQuant::Int8Dynamic: return "int8_dynamic";
    case ActQuant::Int8Static: return "int8_static";
    case ActQuant::Fp8Dynamic: return "fp8_dynamic";
    case ActQuant::Fp8Static: return "fp8_static";
  }
  return "?";
}

double weight_format_bits(WeightFormat f, int64_t group_size) {
  const double g = group_size > 0 ? double(group_size) : 1e9;
  switch (f) {
    case WeightFormat::F32: return 32;
    case WeightFormat::BF16: return 16;
    case WeightFormat::GgufQ8_0: return 8.5;
    case WeightFormat::GgufQ4_0: return 4.5;
    case WeightFormat::GgufQ4_1: return 5.0;
    case WeightFormat::GgufQ5_0: return 5.5;
    case WeightFormat::GgufQ4_K: return 4.5;
    case WeightFormat::GgufQ6_K: return 6.5625;
    case WeightFormat::Int8: return 8 + 32 / g;
    case WeightFormat::Int4: return 4 + 32 / g;
    case WeightFormat::Fp8E4M3: return 8 + 32 / g;
    case WeightFormat::Mxfp4: return 4.25;
    case WeightFormat::Nvfp4: return 4.5;
    case WeightFormat::GgufIq4Nl: return 4.5;
    case WeightFormat::GgufQ5_1: return 6.0;
    case WeightFormat::GgufQ5_K: return 5.5;
    case WeightFormat::GgufQ2_K: return 2.625;
    case WeightFormat::GgufQ3_K: return 3.4375;
  }
  return 0;
}

int64_t weight_column_align(WeightFormat f, int64_t group_size) {
  if (is_gguf(f)) return dtype_block_elems(gguf_dtype(f));
  switch (f) {
    case WeightFormat::Int8:
    case WeightFormat::Int4: return group_size > 0 ? group_size : 1;
    case WeightFormat::Fp8E4M3: return group_size > 0 ? group_size : 1;
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4: return fp4_block(f);
    default: return 1;
  }
}

AlignedBytes::AlignedBytes(int64_t n) : n_(n) {
  if (n < 0) throw Error("AlignedBytes: negative size " + num(n));
  const size_t bytes = size_t((std::max<int64_t>(n, 1) + 63) / 64 * 64);
  p_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  if (!p_) throw Error("AlignedBytes: cannot allocate " + num(int64_t(bytes)) + " bytes");
  std::memset(p_.get(), 0, bytes);
}

int64_t PackedWeight::row_bytes() const {
  if (is_gguf(format))  // Rows16: the codes alone, their scales (and high bits) in scale_bytes
    return rows_layout != RowsLayout::Rows16 ? dtype_row_bytes(gguf_dtype(format), n_in)
           : format == WeightFormat::GgufQ8_0 ? n_in
           : format == WeightFormat::GgufQ2_K || format == WeightFormat::GgufQ3_K ? n_in / 4
                                               : n_in / 2;
  switch (format) {
    case WeightFormat::F32: return n_in * 4;
    case WeightFormat::BF16: return n_in * 2;
    case WeightFormat::Int8:
    case WeightFormat::Fp8E4M3: return n_in;
    case WeightFormat::Int4:
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4: return (n_in + 1) / 2;
    default: return 0;
  }
}

int64_t PackedWeight::n_groups() const {
  if ((format == WeightFormat::Int8 || format == WeightFormat::Int4) && !g_idx.empty() && g_idx_groups > 0)
    return g_idx_groups;
  if ((format == WeightFormat::Int8 || format == WeightFormat::Int4 || format == WeightFormat::Fp8E4M3) && group_size > 0)
    return ceil_div(n_in, group_size);
  return 1;
}

int64_t PackedWeight::n_bytes() const {
  return data.size() + int64_t(scales.size() * sizeof(float) + zeros.size() + g_idx.size() * sizeof(int32_t) +
                               scale_bytes.size());
}

void check_packed_weight(const PackedWeight& w) {
  const std::string what = std::string("packed ") + std::string(weight_format_name(w.format)) + " weight [" +
                           num(w.n_out) + ", " + num(w.n_in) + "]: ";
  auto need = [&](bool ok, const std::string& why) {
    if (!ok) throw Error(what + why);
  };
  need(w.n_out >= 0 && w.n_in >= 0, "negative shape");
  const int64_t align = weight_column_align(w.format, w.group_size);
  if (is_gguf(w.format) || w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4)
    need(w.n_in % align == 0, "n_in is not a multiple of the " + num(align) + "-column block");
  const bool fp4 = w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4;
  const bool rows16 = w.rows_layout == RowsLayout::Rows16;
  if (rows16) {
    const std::string why = rows16_refusal(w);
    need(why.empty(), "rows layout rows16 cannot hold it: " + why);
  }
  if (w.rows_layout == RowsLayout::Rows64) {
    const std::string why = rows64_refusal(w);
    need(why.empty(), "rows layout rows64 cannot hold it: " + why);
  }
  const int64_t held_rows = rows16 ? ceil_div(w.n_out, 16) * 16 : w.n_out;  // Rows16: whole 16-row blocks
  need(w.data.size() == held_rows * w.row_bytes(),
       "data holds " + num(w.data.size()) + " bytes, expected " + num(held_rows * w.row_bytes()));
  const bool grouped = w.format == WeightFormat::Int8 || w.format == WeightFormat::Int4;
  if (grouped) {
    need(w.group_size >= 1 && w.group_size <= std::max<int64_t>(w.n_in, 1), "group_size " + num(w.group_size) +
                                                                               " is not in [1, n_in]");
    const int64_t n_scales = held_rows * w.n_groups();
    need(int64_t(w.scales.size()) == n_scales, num(int64_t(w.scales.size())) + " scales, expected " + num(n_scales));
    need(w.zeros.empty() || int64_t(w.zeros.size()) == n_scales,
         num(int64_t(w.zeros.size())) + " zero points, expected 0 or " + num(n_scales));
    need(w.g_idx.empty() || int64_t(w.g_idx.size()) == w.n_in,
         num(int64_t(w.g_idx.size())) + " g_idx entries, expected 0 or " + num(w.n_in));
    for (const int32_t g : w.g_idx) need(g >= 0 && g < w.n_groups(), "g_idx value " + num(g) + " is not a group");
  } else {
    need(w.zeros.empty() && w.g_idx.empty(), "zero points or g_idx on a format without groups");
  }
  if (w.format == WeightFormat::Fp8E4M3) {
    int64_t n_scales = 1;
    if (w.block_out > 0) {
      need(w.group_size > 0, "block scales need group_size (the block's columns)");
      n_scales = ceil_div(w.n_out, w.block_out) * ceil_div(w.n_in, w.group_size);
    } else if (w.scales.size() != 1) {
      n_scales = w.n_out;
    }
    need(int64_t(w.scales.size()) == n_scales, num(int64_t(w.scales.size())) + " scales, expected " + num(n_scales));
  }
  if (fp4) {
    const int64_t n = held_rows * (w.n_in / fp4_block(w.format));
    need(int64_t(w.scale_bytes.size()) == n, num(int64_t(w.scale_bytes.size())) + " block scales, expected " + num(n));
  } else if (is_gguf(w.format) && rows16) {  // each block's scales (and high bits), out of the blocks
    const int64_t n = held_rows * rows16_gguf_scale_bytes(w.format, w.n_in);
    need(int64_t(w.scale_bytes.size()) == n, num(int64_t(w.scale_bytes.size())) + " scale bytes, expected " + num(n));
  } else {
    need(w.scale_bytes.empty(), "block scale bytes on a format without them");
  }
  if (w.format == WeightFormat::F32 || w.format == WeightFormat::BF16 || is_gguf(w.format))
    need(w.scales.empty(), "scales on a format that keeps none outside its data");
  need(w.act == ActQuant::None || w.format == WeightFormat::Int8 || w.format == WeightFormat::Int4 ||
           w.format == WeightFormat::Fp8E4M3,
       "activation quantization " + std::string(act_quant_name(w.act)) + " is for int8, int4 and fp8 weights");
  need(!w.act_bf16 || (w.act == ActQuant::None && (!is_gguf(w.format) || rows16)),
       "BF16 activations (act_bf16) are for weight-only formats (GGUF's in layout rows16 only), not " +
           std::string(weight_format_name(w.format)) + " in layout " + rows_layout_name(w.rows_layout) +
           " with activation quantization " + std::string(act_quant_name(w.act)));
  need(w.act_group >= 0 && (w.act_group == 0 || w.act == ActQuant::Int8Dynamic || w.act == ActQuant::Fp8Dynamic),
       "act_group " + num(w.act_group) + " is for dynamic activation quantization");
  need(w.gguf_layout == GgufLayout::File || (w.gguf_layout == GgufLayout::Q8_0Quads && w.format == WeightFormat::GgufQ8_0) ||
           (w.gguf_layout == GgufLayout::Q5_0Quads && w.format == WeightFormat::GgufQ5_0) ||
           (w.gguf_layout == GgufLayout::Q4_0Groups && w.format == WeightFormat::GgufQ4_0) ||
           (w.gguf_layout == GgufLayout::Q8_0Groups && w.format == WeightFormat::GgufQ8_0) ||
           (w.gguf_layout == GgufLayout::Q5_0Groups && w.format == WeightFormat::GgufQ5_0),
       std::string("row layout ") + gguf_layout_name(w.gguf_layout) + " is not one of this format's");
  need(w.g_idx_groups >= 0 && (w.g_idx_groups == 0 || !w.g_idx.empty()), "g_idx_groups without g_idx");
  need((w.act != ActQuant::Int8Static && w.act != ActQuant::Fp8Static) || (std::isfinite(w.act_scale) && w.act_scale > 0),
       "static activation quantization needs a positive act_scale");
}

void dequantize_rows(const PackedWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t n = w.n_in, rb = w.row_bytes();
  const bool rows16 = w.rows_layout == RowsLayout::Rows16;
  const bool fp4 = w.format == WeightFormat::Mxfp4 || w.format == WeightFormat::Nvfp4;
  const bool gguf = is_gguf(w.format);
  const int64_t ng = fp4 ? n / fp4_block(w.format) : w.n_groups();  // entries a row of the per-row arrays
  // the row in the Rows order (GGUF: the file's blocks) when it is held otherwise
  const bool rows64 = w.rows_layout == RowsLayout::Rows64;
  std::vector<uint8_t> file_row(w.gguf_layout == GgufLayout::File && !rows16 && !rows64 ? 0
                                : gguf                                        ? size_t(dtype_row_bytes(gguf_dtype(w.format), n))
                                                                              : size_t(rb));
  // Rows16: the row's per-row arrays out of its block, as a one-row Rows weight's (index g, not r · ng + g)
  std::vector<uint8_t> row_sb(static_cast<size_t>(rows16 && fp4 ? ng : 0));
  std::vector<float> row_scales(static_cast<size_t>(rows16 && !fp4 ? ng : 0));
  std::vector<int8_t> row_zeros(static_cast<size_t>(rows16 && !w.zeros.empty() ? ng : 0));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data.data() + r * rb;
    if (w.gguf_layout != GgufLayout::File) {  // back to the file's blocks
      gguf_row_to_file_layout(w.gguf_layout, row, n, file_row.data());
      row = file_row.data();
    }
    const int64_t e0 = rows16 ? 0 : r * ng;  // the row's first entry in the per-row arrays read below
    const uint8_t* sbs = w.scale_bytes.data();
    const float* scs = w.scales.data();
    const int8_t* zs = w.zeros.data();
    if (rows64) {  // Int8: the row's codes out of its 64-row block
      rows64_codes(w.data.data(), n, r, file_row.data());
      row = file_row.data();
    } else if (rows16 && gguf) {  // GGUF: the row's file blocks rebuilt
      rows16_gguf_file_row(w, r, file_row.data());
      row = file_row.data();
    } else if (rows16) {  // the row's codes and per-row entries out of its 16-row block
      rows16_codes(w.data.data(), n, r, file_row.data());
      row = file_row.data();
      if (fp4) {
        rows16_entries(w.scale_bytes.data(), ng, r, row_sb.data());
        sbs = row_sb.data();
      } else {
        rows16_entries(w.scales.data(), ng, r, row_scales.data());
        scs = row_scales.data();
        if (!w.zeros.empty()) rows16_entries(w.zeros.data(), ng, r, row_zeros.data());
        zs = row_zeros.data();
      }
    }
    float* o = out + (r - r0) * n;
    switch (w.format) {
      case WeightFormat::F32: std::memcpy(o, row, size_t(n) * 4); break;
      case WeightFormat::BF16:
        for (int64_t c = 0; c < n; ++c) o[c] = bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
        break;
      case WeightFormat::Int8:
      case WeightFormat::Int4:
        for (int64_t c = 0; c < n; ++c) {
          int32_t q;
          if (w.format == WeightFormat::Int8) {
            q = int8_t(row[c]);
          } else {
            const uint8_t b = row[c / 2];
            q = int32_t((c % 2 ? b >> 4 : b) & 15) - 8;
          }
          const int64_t g = e0 + w.group_of(c);
          const int32_t zero = w.zeros.empty() ? 0 : zs[g];
          o[c] = float(q - zero) * scs[g];
        }
        break;
      case WeightFormat::Fp8E4M3:
        for (int64_t c = 0; c < n; ++c) {
          float s;
          if (w.block_out > 0)
            s = w.scales[size_t((r / w.block_out) * ceil_div(n, w.group_size) + c / w.group_size)];
          else
            s = w.scales.size() == 1 ? w.scales[0] : w.scales[size_t(r)];
          o[c] = fp8_e4m3_to_f32(row[c]) * s;
        }
        break;
      case WeightFormat::Mxfp4:
      case WeightFormat::Nvfp4: {
        const int64_t blk = fp4_block(w.format);
        for (int64_t c = 0; c < n; ++c) {
          const uint8_t b = row[c / 2];
          const float v = e2m1_to_f32(uint8_t((c % 2 ? b >> 4 : b) & 15));
          const uint8_t sb = sbs[e0 + c / blk];
          o[c] = w.format == WeightFormat::Mxfp4 ? v * e8m0_to_f32(sb) : v * fp8_e4m3_to_f32(sb) * w.global_scale;
        }
        break;
      }
      default: dequantize_row(gguf_dtype(w.format), row, o, n); break;
    }
  }
}

PackedWeight pack_dense(WeightFormat f, int64_t n_out, int64_t n_in, const float* src) {
  if (f != WeightFormat::F32 && f != WeightFormat::BF16)
    throw Error("pack_dense: " + std::string(weight_format_name(f)) + " is not a dense format");
  PackedWeight w;
  w.format = f;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = AlignedBytes(n_out * w.row_bytes());
  if (f == WeightFormat::F32) {
    std::memcpy(w.data.data(), src, size_t(n_out * n_in) * 4);
  } else {
    auto* d = reinterpret_cast<uint16_t*>(w.data.data());
    for (int64_t i = 0; i < n_out * n_in; ++i) d[i] = f32_to_bf16(src[i]);
  }
  return w;
}

PackedWeight copy_packed_weight(const PackedWeight& w) {
  PackedWeight c;
  c.format = w.format;
  c.n_out = w.n_out;
  c.n_in = w.n_in;
  c.group_size = w.group_size;
  c.block_out = w.block_out;
  c.data = AlignedBytes(w.data.size());
  if (w.data.size() > 0) std::memcpy(c.data.data(), w.data.data(), size_t(w.data.size()));
  c.scales = w.scales;
  c.zeros = w.zeros;
  c.g_idx = w.g_idx;
  c.scale_bytes = w.scale_bytes;
  c.global_scale = w.global_scale;
  c.act = w.act;
  c.act_scale = w.act_scale;
  c.act_group = w.act_group;
  c.act_bf16 = w.act_bf16;
  c.g_idx_groups = w.g_idx_groups;
  c.gguf_layout = w.gguf_layout;
  c.rows_layout = w.rows_layout;
  return c;
}

}  // namespace tp
