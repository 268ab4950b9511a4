// compressed-tensors: one rank's slices and the KV cache scales (see compressed_tensors.h).
#include "rank/compressed_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp_formats.h"
#include "rank/hf_dir.h"

namespace tp {
namespace {

std::string num(int64_t v) { return std::to_string(v); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ------------------------------------------------------------------------------------------------ tensors
// The module prefix of a canonical weight name: "blk.0.attn_q.weight" -> "blk.0.attn_q".
std::string prefix_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + num(s[k]);
  return r + "]";
}

std::string type_text(const TensorView& t) {
  return t.raw != RawType::None ? std::string(raw_type_name(t.raw)) : std::string(dtype_name(t.dtype));
}

// The tensor `name`, of one of the raw types `raw` (or, with floats = true, F32 / F16 / BF16) and shape
// `shape` (an empty expected shape with one element also accepts [1] and []).
const TensorView& need(const ModelFile& f, const std::string& name, std::initializer_list<RawType> raw, bool floats,
                       const std::vector<int64_t>& shape) {
  const TensorView* t = f.find(name);
  if (!t) throw FormatError(f.path(), canonical_to_hf_name(name), "missing tensor (needed by its quantization scheme)");
  bool ok = floats && t->raw == RawType::None && !is_quantized(t->dtype);
  for (RawType r : raw) ok = ok || t->raw == r;
  if (!ok) {
    std::string want = floats ? "F32, F16, BF16" : "";
    for (RawType r : raw) want += (want.empty() ? "" : ", ") + std::string(raw_type_name(r));
    throw FormatError(f.path(), canonical_to_hf_name(name), "dtype " + type_text(*t) + ", expected " + want);
  }
  const bool scalar_ok = shape.size() == 1 && shape[0] == 1 && t->n_elems() == 1 && t->shape.size() <= 1;
  if (t->shape != shape && !scalar_ok)
    throw FormatError(f.path(), canonical_to_hf_name(name), "shape " + shape_text(t->shape) + ", expected " + shape_text(shape));
  return *t;
}

// Element i of a float-valued tensor (F32 / F16 / BF16 / F8_E4M3).
float float_at(const TensorView& t, int64_t i) {
  if (t.raw == RawType::F8E4M3) return fp8_e4m3_to_f32(t.data[i]);
  float v = 0;
  dequantize_row(t.dtype, t.data + i * dtype_block_bytes(t.dtype), &v, 1);
  return v;
}

int64_t int_at(const TensorView& t, int64_t i) {
  switch (t.raw) {
    case RawType::I8: return int8_t(t.data[i]);
    case RawType::U8: return t.data[i];
    case RawType::I32: {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      return v;
    }
    case RawType::I64: {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      return v;
    }
    default: return 0;
  }
}

// A scale must be finite and not negative (zero: an all-zero group).
float checked_scale(const ModelFile& f, const TensorView& t, int64_t i) {
  const float v = float_at(t, i);
  if (!std::isfinite(v) || v < 0)
    throw FormatError(f.path(), canonical_to_hf_name(t.name),
                      "holds " + std::to_string(v) + " at element " + num(i) + ": every scale must be finite and >= 0");
  return v;
}

// One static scale ([1] or []): input_scale, weight_global_scale.
std::optional<float> scalar(const ModelFile& f, const std::string& name, bool required, bool positive) {
  if (!required && !f.find(name)) return std::nullopt;
  const TensorView& t = need(f, name, {}, true, {1});
  const float v = checked_scale(f, t, 0);
  if (positive && !(v > 0))
    throw FormatError(f.path(), canonical_to_hf_name(name), "holds " + std::to_string(v) + ": it must be > 0");
  return v;
}

// Valid tp degrees for a column cut aligned to `align` of n_in columns (shown when a cut is refused).
std::string valid_tp(int64_t n_in, int64_t align) {
  std::string s;
  for (int64_t tp = 1; tp <= 64; ++tp)
    if (n_in % tp == 0 && (n_in / tp) % align == 0) s += (s.empty() ? "" : ", ") + num(tp);
  return s.empty() ? "1" : s;
}

void check_cut(const ModelFile& f, const std::string& name, int64_t n_in, Range cols, int64_t align, const char* what) {
  if (align <= 1) return;
  const bool ok = cols.begin % align == 0 && (cols.end % align == 0 || cols.end == n_in);
  if (!ok)
    throw FormatError(f.path(), canonical_to_hf_name(name),
                      "column slice [" + num(cols.begin) + ", " + num(cols.end) + ") of " + num(n_in) +
                          " does not fall on the " + num(align) + "-column " + what +
                          ": this weight splits by input columns only at tp " + valid_tp(n_in, align));
}

// The activation quantization of a scheme, with the static scale of module prefix `p`.
void set_activations(const ModelFile& f, const CtScheme& s, const std::string& p, PackedWeight* w) {
  if (!s.input_activations) return;
  const CtQuantArgs& a = *s.input_activations;
  const bool fp8 = a.type == CtType::Float;
  if (a.dynamic == CtDynamic::Dynamic) {
    w->act = fp8 ? ActQuant::Fp8Dynamic : ActQuant::Int8Dynamic;
    w->act_group = a.strategy == CtStrategy::Group ? a.group_size : 0;
  } else {
    w->act = fp8 ? ActQuant::Fp8Static : ActQuant::Int8Static;
    w->act_scale = *scalar(f, p + ".input_scale", true, true);
  }
}

struct Geometry {
  int64_t n_out = 0, n_in = 0;
};

// --- int (pack-quantized 4/8-bit, int-quantized 8-bit) -----------------------------------------------------
struct IntModule {
  const TensorView* data = nullptr;   // I32 words (packed) or I8 values
  const TensorView* scale = nullptr;  // [n_out, n_groups] / [n_out, 1] / [1]
  const TensorView* zero = nullptr;   // packed I32 [ceil(n_out * bits / 32), n_groups] or I8 like scale
  const TensorView* g_idx = nullptr;  // I32 [n_in]
  int64_t n_groups = 1, group = 0;    // scale groups of a whole row; columns a group
  bool packed = false;
  bool dense = true;       // packed: value i at bit bits · i of the row (or column) bit stream; else per = 32 / bits
  bool zero_dense = true;  // the same for the row-packed zero points
  int bits = 8;
};

// Words of `n` packed values of `bits` bits: compressed-tensors' pack_to_int32 is dense (value i at bit
// bits · i of the stream, values split across words; ceil(n · bits / 32) words), older releases put
// per = 32 / bits values a word (3 bits: ten, the top 2 bits unused). The two agree for 1, 2, 4 and 8 bits.
int64_t dense_words(int64_t n, int bits) { return ceil_div(n * bits, 32); }
int64_t legacy_words(int64_t n, int bits) { return ceil_div(n, 32 / bits); }

// The packed I32 tensor `name` of shape {lead, words} (packed along its last dimension, n values) or, for
// zero points, {words, lead} (packed along rows): either layout, told apart by its word count (dense when both
// fit: the current writer's). *dense says which.
const TensorView& need_packed(const ModelFile& f, const std::string& name, int64_t lead, int64_t n, int bits,
                              bool along_rows, bool* dense) {
  const TensorView* t = f.find(name);
  const int64_t dw = dense_words(n, bits), lw = legacy_words(n, bits);
  auto shape = [&](int64_t words) {
    return along_rows ? std::vector<int64_t>{words, lead} : std::vector<int64_t>{lead, words};
  };
  *dense = !(t && dw != lw && t->shape == shape(lw));
  return need(f, name, {RawType::I32}, false, shape(*dense ? dw : lw));
}

// The stream bit where packed value i starts (dense, or per = 32 / bits values a word).
int64_t packed_bit(int64_t i, int bits, bool dense) {
  return dense ? i * bits : (i / (32 / bits)) * 32 + (i % (32 / bits)) * bits;
}

// Packed value i (unsigned, bits wide) of a stream of little-endian I32 words at `words` (n_words of them).
uint32_t packed_value(const uint8_t* words, int64_t n_words, int64_t i, int bits, bool dense) {
  const int64_t bit = packed_bit(i, bits, dense);
  uint64_t two = 0;
  std::memcpy(&two, words + (bit / 32) * 4, bit / 32 + 1 < n_words ? 8 : 4);
  return uint32_t(two >> (bit % 32)) & ((1u << bits) - 1);
}

IntModule int_module(const ModelFile& f, const CtScheme& s, const std::string& p, Geometry g) {
  const CtQuantArgs& w = *s.weights;
  IntModule m;
  m.bits = w.num_bits;
  m.packed = s.format == CtFormat::PackQuantized;
  if (m.packed) {
    m.data = &need_packed(f, p + ".weight_packed", g.n_out, g.n_in, w.num_bits, false, &m.dense);
    if (const TensorView* shp = f.find(p + ".weight_shape")) {
      need(f, p + ".weight_shape", {RawType::I32, RawType::I64}, false, {2});
      if (int_at(*shp, 0) != g.n_out || int_at(*shp, 1) != g.n_in)
        throw FormatError(f.path(), canonical_to_hf_name(p + ".weight_shape"),
                          "says [" + num(int_at(*shp, 0)) + ", " + num(int_at(*shp, 1)) + "], expected [" + num(g.n_out) +
                              ", " + num(g.n_in) + "]");
    }
  } else {
    m.data = &need(f, p + ".weight", {RawType::I8}, false, {g.n_out, g.n_in});
  }
  const bool per_row = w.strategy != CtStrategy::Tensor;
  m.n_groups = w.strategy == CtStrategy::Group ? ceil_div(g.n_in, w.group_size) : 1;
  m.group = w.strategy == CtStrategy::Group ? w.group_size : g.n_in;
  const std::vector<int64_t> sshape = per_row ? std::vector<int64_t>{g.n_out, m.n_groups} : std::vector<int64_t>{1};
  m.scale = &need(f, p + ".weight_scale", {}, true, sshape);
  if (!w.symmetric) {
    if (m.packed && per_row)
      m.zero = &need_packed(f, p + ".weight_zero_point", m.n_groups, g.n_out, w.num_bits, true, &m.zero_dense);
    else
      m.zero = &need(f, p + ".weight_zero_point", {RawType::I8}, false, sshape);
  }
  if (const TensorView* gi = f.find(p + ".weight_g_idx")) {
    need(f, p + ".weight_g_idx", {RawType::I32, RawType::I64}, false, {g.n_in});
    bool all_unset = true;  // compressed-tensors: -1 everywhere means column order
    for (int64_t c = 0; c < g.n_in && all_unset; ++c) all_unset = int_at(*gi, c) == -1;
    if (!all_unset) {
      if (w.strategy != CtStrategy::Group)
        throw FormatError(f.path(), canonical_to_hf_name(gi->name), "g_idx on weights without groups");
      for (int64_t c = 0; c < g.n_in; ++c) {
        const int64_t v = int_at(*gi, c);
        if (v < 0 || v >= m.n_groups)
          throw FormatError(f.path(), canonical_to_hf_name(gi->name),
                            "g_idx[" + num(c) + "] = " + num(v) + " is not a group in [0, " + num(m.n_groups) + ")");
      }
      m.g_idx = gi;
    }
  } else if (w.actorder == CtActOrder::Group) {
    throw FormatError(f.path(), canonical_to_hf_name(p + ".weight_g_idx"), "missing tensor (actorder group needs it)");
  }
  return m;
}

// q of element (r, c) in [-2^(bits-1), 2^(bits-1)). Packed: u = q + 2^(bits-1), value c of a row at bit
// bits · c of the row's little-endian I32 words (dense), or in word c / per at bit bits · (c % per) (older).
int q_at(const IntModule& m, int64_t n_in, int64_t r, int64_t c) {
  if (!m.packed) return int8_t(m.data->data[r * n_in + c]);
  const int64_t words = m.data->shape[1];
  const uint8_t* row = m.data->data + r * words * 4;
  if (m.bits == 8) return int(row[c]) - 128;
  if (m.bits == 4) return int((row[c / 2] >> (4 * (c % 2))) & 15) - 8;
  return int(packed_value(row, words, c, m.bits, m.dense)) - (1 << (m.bits - 1));
}

int zero_at(const IntModule& m, int64_t n_out, int64_t r, int64_t g) {
  if (!m.zero) return 0;
  if (m.zero->raw == RawType::I8) return int(int_at(*m.zero, m.zero->n_elems() == 1 ? 0 : r * m.n_groups + g));
  (void)n_out;
  // Packed along rows: column g of the [words, n_groups] words holds the stream of rows.
  const int64_t words = m.zero->shape[0];
  const int64_t bit = packed_bit(r, m.bits, m.zero_dense);
  uint64_t two = uint32_t(int_at(*m.zero, (bit / 32) * m.n_groups + g));
  if (bit / 32 + 1 < words) two |= uint64_t(uint32_t(int_at(*m.zero, (bit / 32 + 1) * m.n_groups + g))) << 32;
  return int(uint32_t(two >> (bit % 32)) & ((1u << m.bits) - 1)) - (1 << (m.bits - 1));
}

// --- loading -------------------------------------------------------------------------------------------------
struct PartInfo {
  std::string prefix;
  Geometry g;
  Range rows;
};

PackedWeight load_int(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  const CtQuantArgs& wa = *s.weights;
  PackedWeight w;
  w.format = wa.num_bits <= 4 ? WeightFormat::Int4 : WeightFormat::Int8;  // 3-bit values run as Int4
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  std::vector<IntModule> mods;
  for (const PartInfo& p : parts) mods.push_back(int_module(f, s, p.prefix, p.g));
  const bool act_order = mods[0].g_idx != nullptr;
  for (const IntModule& m : mods)
    if ((m.g_idx != nullptr) != act_order)
      throw FormatError(f.path(), canonical_to_hf_name(parts[0].prefix), "fused parts differ in having a g_idx");
  const int64_t n_in_total = parts[0].g.n_in;
  // The slice's scale groups: g_idx — the groups its columns use (per part: they may differ), renumbered;
  // else whole groups [cols.begin / group, ...).
  std::vector<std::vector<int64_t>> used(parts.size());  // part -> slice group -> the part's group
  if (act_order) {
    // One numbering for every part: the union of the groups used; each part's g_idx must agree on the slice
    // (fused parts of one act-order checkpoint share g_idx only when they share their input: check).
    std::vector<int32_t> gid(size_t(w.n_in));
    for (int64_t c = 0; c < w.n_in; ++c) gid[size_t(c)] = int32_t(int_at(*mods[0].g_idx, cols.begin + c));
    for (size_t i = 1; i < mods.size(); ++i)
      for (int64_t c = 0; c < w.n_in; ++c)
        if (int_at(*mods[i].g_idx, cols.begin + c) != gid[size_t(c)])
          throw FormatError(f.path(), canonical_to_hf_name(parts[i].prefix + ".weight_g_idx"),
                            "differs from " + canonical_to_hf_name(parts[0].prefix + ".weight_g_idx") +
                                " at column " + num(cols.begin + c) + ": fused parts must share g_idx");
    std::vector<int64_t> remap(size_t(mods[0].n_groups), -1);
    std::vector<int64_t> order;
    for (int32_t g : gid) remap[size_t(g)] = 0;
    for (int64_t g = 0; g < mods[0].n_groups; ++g)
      if (remap[size_t(g)] == 0) {
        remap[size_t(g)] = int64_t(order.size());
        order.push_back(g);
      }
    w.g_idx.resize(size_t(w.n_in));
    for (int64_t c = 0; c < w.n_in; ++c) w.g_idx[size_t(c)] = int32_t(remap[size_t(gid[size_t(c)])]);
    w.g_idx_groups = int64_t(order.size());
    w.group_size = wa.group_size;
    for (auto& u : used) u = order;
  } else {
    const int64_t group = wa.strategy == CtStrategy::Group ? mods[0].group : 1;  // channel / tensor: any cut
    check_cut(f, parts[0].prefix + ".weight", n_in_total, cols, group, "quantization groups");
    w.group_size = group == 1 ? w.n_in : std::min(group, w.n_in);
    const int64_t g0 = wa.strategy == CtStrategy::Group ? cols.begin / group : 0;
    const int64_t n = wa.strategy == CtStrategy::Group ? ceil_div(w.n_in, group) : 1;
    for (auto& u : used)
      for (int64_t g = 0; g < n; ++g) u.push_back(g0 + g);
  }
  const int64_t n_groups = int64_t(used[0].size());
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  w.scales.resize(size_t(w.n_out * n_groups));
  if (!wa.symmetric) w.zeros.resize(size_t(w.n_out * n_groups));
  int64_t r_out = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const IntModule& m = mods[i];
    const PartInfo& p = parts[i];
    const bool per_row = m.scale->n_elems() > 1 || wa.strategy != CtStrategy::Tensor;
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      uint8_t* dst = w.data.data() + r_out * w.row_bytes();
      if (w.format == WeightFormat::Int8) {
        for (int64_t c = 0; c < w.n_in; ++c) dst[c] = uint8_t(int8_t(q_at(m, p.g.n_in, r, cols.begin + c)));
      } else if (m.packed && m.bits == 4 && cols.begin % 2 == 0 && w.n_in % 2 == 0) {  // nibble pairs as stored
        std::memcpy(dst, m.data->data + r * ceil_div(p.g.n_in * 4, 32) * 4 + cols.begin / 2, size_t(w.n_in / 2));
      } else {
        for (int64_t c = 0; c < w.n_in; ++c) {
          const int q = q_at(m, p.g.n_in, r, cols.begin + c);
          if (q < -8 || q > 7)  // 4-bit values stored one a byte (int-quantized)
            throw FormatError(f.path(), canonical_to_hf_name(m.data->name),
                              "holds " + num(q) + " at [" + num(r) + ", " + num(cols.begin + c) + "]: not a 4-bit value");
          dst[c / 2] |= uint8_t((q + 8) << (4 * (c % 2)));
        }
      }
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t src_g = used[i][size_t(g)];
        w.scales[size_t(r_out * n_groups + g)] = checked_scale(f, *m.scale, per_row ? r * m.n_groups + src_g : 0);
        if (!wa.symmetric) {
          const int z = zero_at(m, p.g.n_out, per_row ? r : 0, per_row ? src_g : 0);
          if (z < -(1 << (m.bits - 1)) || z >= (1 << (m.bits - 1)))
            throw FormatError(f.path(), canonical_to_hf_name(m.zero->name), "zero point " + num(z) + " out of range");
          w.zeros[size_t(r_out * n_groups + g)] = int8_t(z);
        }
      }
    }
  }
  set_activations(f, s, parts[0].prefix, &w);
  return w;
}

PackedWeight load_fp8(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  const CtQuantArgs& wa = *s.weights;
  PackedWeight w;
  w.format = WeightFormat::Fp8E4M3;
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  const int64_t n_in_total = parts[0].g.n_in;
  int64_t bcols = 0, brows = 0;  // block / group scales
  if (wa.strategy == CtStrategy::Block) {
    brows = wa.block_rows;
    bcols = wa.block_cols;
  } else if (wa.strategy == CtStrategy::Group) {
    brows = 1;
    bcols = wa.group_size;
  }
  if (bcols > 0) check_cut(f, parts[0].prefix + ".weight", n_in_total, cols, bcols, "scale blocks");
  // Block rows stay blocks for one part whose slice starts on a block; otherwise each row gets its own copy
  // of its block's scales (block_out = 1).
  const bool keep_blocks = bcols > 0 && parts.size() == 1 && parts[0].rows.begin % brows == 0;
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  const int64_t n_cb = bcols > 0 ? ceil_div(w.n_in, bcols) : 0;
  if (bcols > 0) {
    w.group_size = bcols;
    w.block_out = keep_blocks ? brows : 1;
  }
  int64_t r_out = 0;
  for (const PartInfo& p : parts) {
    const TensorView& t = need(f, p.prefix + ".weight", {RawType::F8E4M3}, false, {p.g.n_out, p.g.n_in});
    std::vector<int64_t> sshape{1};
    if (wa.strategy == CtStrategy::Channel) sshape = {p.g.n_out, 1};
    if (bcols > 0) sshape = {ceil_div(p.g.n_out, brows), ceil_div(p.g.n_in, bcols)};
    const TensorView& sc = need(f, p.prefix + ".weight_scale", {}, true, sshape);
    const int64_t cb0 = bcols > 0 ? cols.begin / bcols : 0;
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      const uint8_t* src = t.data + r * p.g.n_in + cols.begin;
      for (int64_t c = 0; c < w.n_in; ++c)
        if ((src[c] & 0x7f) == 0x7f)  // S.1111.111: E4M3's NaN
          throw FormatError(f.path(), canonical_to_hf_name(t.name),
                            "holds NaN at [" + num(r) + ", " + num(cols.begin + c) + "]: every weight must be finite");
      std::memcpy(w.data.data() + r_out * w.n_in, src, size_t(w.n_in));
      if (bcols == 0) {
        w.scales.push_back(checked_scale(f, sc, sc.n_elems() == 1 ? 0 : r));
      } else if (!keep_blocks || (r - p.rows.begin) % brows == 0) {
        for (int64_t cb = 0; cb < n_cb; ++cb) w.scales.push_back(checked_scale(f, sc, (r / brows) * sshape[1] + cb0 + cb));
      }
    }
  }
  set_activations(f, s, parts[0].prefix, &w);
  return w;
}

PackedWeight load_fp4(const ModelFile& f, const CtScheme& s, Range cols, const std::vector<PartInfo>& parts) {
  PackedWeight w;
  const bool nv = s.format == CtFormat::Nvfp4Pack;
  w.format = nv ? WeightFormat::Nvfp4 : WeightFormat::Mxfp4;
  const int64_t blk = nv ? 16 : 32;
  w.n_in = cols.size();
  for (const PartInfo& p : parts) w.n_out += p.rows.size();
  check_cut(f, parts[0].prefix + ".weight", parts[0].g.n_in, cols, blk, "scale blocks");
  if (w.n_in % blk != 0)
    throw FormatError(f.path(), canonical_to_hf_name(parts[0].prefix + ".weight_packed"),
                      "a slice of " + num(w.n_in) + " columns is not whole " + num(blk) + "-column blocks");
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  if (nv) w.global_scale = 1.0f / *scalar(f, parts[0].prefix + ".weight_global_scale", true, true);
  int64_t r_out = 0;
  for (const PartInfo& p : parts) {
    if (p.g.n_in % blk != 0)
      throw FormatError(f.path(), canonical_to_hf_name(p.prefix + ".weight_packed"),
                        "n_in " + num(p.g.n_in) + " is not a multiple of the " + num(blk) + "-column block");
    const TensorView& t = need(f, p.prefix + ".weight_packed", {RawType::U8}, false, {p.g.n_out, p.g.n_in / 2});
    const TensorView& sc = need(f, p.prefix + ".weight_scale", {nv ? RawType::F8E4M3 : RawType::U8}, false,
                                {p.g.n_out, p.g.n_in / blk});
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r_out) {
      std::memcpy(w.data.data() + r_out * w.row_bytes(), t.data + r * (p.g.n_in / 2) + cols.begin / 2, size_t(w.n_in / 2));
      for (int64_t b = 0; b < w.n_in / blk; ++b) {
        const uint8_t v = sc.data[r * (p.g.n_in / blk) + cols.begin / blk + b];
        const float fv = nv ? fp8_e4m3_to_f32(v) : e8m0_to_f32(v);
        if (!std::isfinite(fv) || fv < 0)
          throw FormatError(f.path(), canonical_to_hf_name(sc.name), "block scale " + std::to_string(fv) + " at row " + num(r));
        w.scale_bytes.push_back(v);
      }
    }
  }
  return w;
}

}  // namespace

std::string ct_module_name(const std::string& canonical_weight) {
  return prefix_of(canonical_to_hf_name(canonical_weight));
}

const CtScheme* ct_quantized_scheme(const ModelFile& f, const CtConfig& c, const std::string& name) {
  const std::string module = ct_module_name(name);
  const CtScheme* s = ct_scheme_for(c, module, module == "model.embed_tokens" ? "Embedding" : "Linear");
  if (!s) return nullptr;
  return f.find(prefix_of(name) + ".weight_scale") ? s : nullptr;
}

bool ct_can_stack(const ModelFile& f, const std::string& a, const std::string& b) {
  // Act-order parts share one weight only with the same g_idx (GPTQ gives q|k|v the same one: one input).
  const TensorView* ga = f.find(prefix_of(a) + ".weight_g_idx");
  const TensorView* gb = f.find(prefix_of(b) + ".weight_g_idx");
  if ((ga != nullptr) != (gb != nullptr)) return false;
  if (ga && (ga->n_bytes != gb->n_bytes || ga->raw != gb->raw || std::memcmp(ga->data, gb->data, size_t(ga->n_bytes)) != 0))
    return false;
  for (const char* t : {".input_scale", ".weight_global_scale"}) {
    const TensorView* ta = f.find(prefix_of(a) + t);
    const TensorView* tb = f.find(prefix_of(b) + t);
    if (!ta && !tb) continue;
    if (!ta || !tb || ta->n_elems() != 1 || tb->n_elems() != 1 || float_at(*ta, 0) != float_at(*tb, 0)) return false;
  }
  return true;
}

PackedWeight ct_load_slice(const ModelFile& f, const CtScheme& s, int64_t n_in, Range cols,
                           const std::vector<RowSlice>& parts) {
  if (parts.empty()) throw Error("ct_load_slice: no parts");
  if (cols.begin < 0 || cols.end > n_in || cols.begin >= cols.end)
    throw Error("ct_load_slice: column range [" + num(cols.begin) + ", " + num(cols.end) + ") of " + num(n_in));
  std::vector<PartInfo> info;
  for (const RowSlice& p : parts) info.push_back({prefix_of(p.name), {p.total_rows, n_in}, p.rows});
  PackedWeight w;
  switch (s.format) {
    case CtFormat::PackQuantized:
    case CtFormat::IntQuantized: w = load_int(f, s, cols, info); break;
    case CtFormat::FloatQuantized:
    case CtFormat::NaiveQuantized:
      w = s.weights->type == CtType::Float ? load_fp8(f, s, cols, info) : load_int(f, s, cols, info);
      break;
    case CtFormat::Nvfp4Pack:
    case CtFormat::Mxfp4Pack: w = load_fp4(f, s, cols, info); break;
    case CtFormat::Dense: throw Error("ct_load_slice: scheme " + s.name + " is dense");
  }
  try {
    check_packed_weight(w);
  } catch (const Error& e) {
    throw FormatError(f.path(), canonical_to_hf_name(parts[0].name), e.what());
  }
  return w;
}

std::optional<KvScales> kv_cache_scales(const ModelFile& f, int64_t layer) {
  const std::string b = "blk." + num(layer) + ".";
  for (const auto& [k, v] : {std::pair<std::string, std::string>{b + "attn_k_scale", b + "attn_v_scale"},
                             {b + "attn_k.output_scale", b + "attn_v.output_scale"}}) {
    if (!f.find(k) && !f.find(v)) continue;
    KvScales s;
    s.k_scale = *scalar(f, k, true, true);
    s.v_scale = *scalar(f, v, true, true);
    return s;
  }
  return std::nullopt;
}

std::optional<std::pair<std::vector<float>, std::vector<float>>> kv_cache_scales_all(const ModelFile& f,
                                                                                     int64_t n_layers) {
  std::vector<float> k, v;
  int64_t first_with = -1, first_without = -1;
  for (int64_t i = 0; i < n_layers; ++i) {
    if (const auto s = kv_cache_scales(f, i)) {
      if (first_with < 0) first_with = i;
      k.push_back(s->k_scale);
      v.push_back(s->v_scale);
    } else if (first_without < 0) {
      first_without = i;
    }
  }
  if (first_with < 0) return std::nullopt;
  if (first_without >= 0)
    throw FormatError(f.path(), "model.layers." + num(first_without) + ".self_attn.k_scale",
                      "KV cache scales are given for layer " + num(first_with) + " but not for layer " +
                          num(first_without) + " (every layer needs its k_scale and v_scale)");
  return std::make_pair(std::move(k), std::move(v));
}

}  // namespace tp
