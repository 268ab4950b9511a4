// Loading one rank's weights (see weight_loader.h).
#include "rank/weight_loader.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/packed_weight.h"
#include "kernels/cpu/finite.h"
#include "rank/compressed_tensors.h"
#include "rank/gguf_requantize.h"
#include "rank/hf_dir.h"

namespace tp {
namespace {

// The tensor as its file names it: the HF name too for an HF directory.
std::string tensor_label(const ModelFile& f, const std::string& name) {
  std::error_code ec;
  const std::string hf = canonical_to_hf_name(name);
  return std::filesystem::is_directory(f.path(), ec) && hf != name ? hf + " (" + name + ")" : name;
}

std::string value_text(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}

// Throws FormatError for element (row, col) of tensor `name` [n_rows, n_cols], whose value in the file is
// `source` and in the runtime dtype `runtime` (which may have overflowed to inf).
[[noreturn]] void refuse_weight(const ModelFile& f, const std::string& name, int64_t row, int64_t col, int64_t n_cols,
                                float source, DType runtime) {
  const std::string at = " at [" + std::to_string(row) + ", " + std::to_string(col) + "] (element " +
                         std::to_string(row * n_cols + col) + ")";
  const std::string what = std::isfinite(source) ? "holds " + value_text(source) + at + ", which overflows " +
                                                       std::string(dtype_name(runtime))
                                                 : "holds " + value_text(source) + at;
  throw FormatError(f.path(), tensor_label(f, name), what + ": every weight must be finite");
}

// Value of element `col` of row `row` of tensor t [rows, n_in], read from the file.
float source_value(const TensorView& t, int64_t n_in, int64_t row, int64_t col) {
  std::vector<float> r(static_cast<size_t>(n_in));
  dequantize_row(t.dtype, t.data + row * dtype_row_bytes(t.dtype, n_in), r.data(), n_in);
  return r[size_t(col)];
}

// The given row slices, stacked, restricted to columns `cols` of [0, n_in), as one runtime weight.
// Only the rows of the slice are read from the mapping (quantized rows whole, then their columns taken).
cpu::Weight load_dense(const ModelFile& f, DType runtime, int64_t n_in, Range cols, const std::vector<RowSlice>& parts) {
  const int64_t n_cols = cols.size();
  int64_t rows = 0;
  std::vector<const TensorView*> views;
  for (const RowSlice& p : parts) {
    views.push_back(&f.require(p.name, {p.total_rows, n_in}));
    rows += p.rows.size();
  }
  cpu::Weight w = [&] {
    if (parts.size() == 1 && n_cols == n_in) {  // one contiguous run of whole rows: convert straight from the file
      const TensorView& t = *views[0];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in);
      return cpu::Weight(runtime, rows, n_in, t.dtype, t.data + parts[0].rows.begin * stride, stride);
    }
    std::vector<float> staging(static_cast<size_t>(rows * n_cols)), row(static_cast<size_t>(n_in));
    int64_t r0 = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const TensorView& t = *views[i];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in);
      for (int64_t r = parts[i].rows.begin; r < parts[i].rows.end; ++r, ++r0) {
        dequantize_row(t.dtype, t.data + r * stride, row.data(), n_in);
        std::copy(row.begin() + cols.begin, row.begin() + cols.end, staging.begin() + r0 * n_cols);
      }
    }
    return cpu::Weight(runtime, rows, n_cols, DType::F32, staging.data(), n_cols * int64_t(sizeof(float)));
  }();
  // NaN / inf, in the file or from the conversion overflowing: name the part, its row and column.
  if (const int64_t bad = cpu::first_non_finite(w.dtype(), w.data(), rows * n_cols); bad >= 0) {
    int64_t r = bad / n_cols;  // row of the stacked weight -> part i, row of its tensor
    const int64_t c = cols.begin + bad % n_cols;
    size_t i = 0;
    while (r >= parts[i].rows.size()) r -= parts[i++].rows.size();
    const int64_t row = parts[i].rows.begin + r;
    refuse_weight(f, parts[i].name, row, c, n_in, source_value(*views[i], n_in, row, c), runtime);
  }
  return w;
}

// The TP degrees (of the model's valid ones) whose even split of n_in columns falls on `align`-column blocks.
std::string degrees_on_blocks(const ModelFile& f, int64_t n_in, int64_t align) {
  std::string out;
  std::vector<int> all;
  try {
    all = valid_tp_degrees(TpShape::from(f.config()));
  } catch (const InputError&) {
    all = {1};
  }
  for (int t : all)
    if (n_in % t == 0 && (n_in / t) % align == 0) out += (out.empty() ? "" : ", ") + std::to_string(t);
  return out.empty() ? "none" : out;
}

// Refuses a block whose f16 scale (and min's scale: block_f16s) is not finite. Returns normally otherwise.
void check_block_scales(const ModelFile& f, const std::string& name, DType t, const uint8_t* row, int64_t row_index,
                        int64_t first_block, int64_t n_blocks) {
  const int64_t bb = dtype_block_bytes(t);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * bb;
    const auto [at, n_f16] = block_f16s(t);
    for (int k = 0; k < n_f16; ++k) {
      uint16_t h;
      std::memcpy(&h, blk + at + 2 * k, 2);
      if ((h & 0x7c00u) == 0x7c00u) {  // exponent all ones: inf or NaN
        const float v = f16_to_f32(h);
        throw FormatError(f.path(), tensor_label(f, name),
                          "holds a " + std::string(dtype_name(t)) + " block whose " +
                              (k == 0 ? "scale" : "min scale") + " is " + value_text(v) + " (row " +
                              std::to_string(row_index) + ", block " + std::to_string(first_block + b) +
                              "): every weight must be finite");
      }
    }
  }
}

// The given parts (each of a GGUF block type held as t: t itself, copied, or one rank/gguf_requantize.h rewrites
// into t), stacked, columns `cols`, as one packed weight.
cpu::Weight load_gguf_blocks(const ModelFile& f, DType t, int64_t n_in, Range cols, const std::vector<RowSlice>& parts) {
  const int64_t align = dtype_block_elems(t);
  const DType stored = f.require(parts[0].name, {parts[0].total_rows, n_in}).dtype;
  const std::string as = stored == t ? std::string(dtype_name(t))
                                     : std::string(dtype_name(stored)) + " held as " + std::string(dtype_name(t));
  if (cols.begin % align != 0 || cols.end % align != 0)
    throw FormatError(f.path(), tensor_label(f, parts[0].name),
                      as + " blocks of " + std::to_string(align) + " columns: this rank's row-parallel slice [" +
                          std::to_string(cols.begin) + ", " + std::to_string(cols.end) + ") of " +
                          std::to_string(n_in) +
                          " columns does not fall on whole blocks; tp degrees that slice it on its blocks: " +
                          degrees_on_blocks(f, n_in, align) + " (or set model.quantized: dequantize)");
  PackedWeight w;
  w.format = gguf_weight_format(t);
  w.n_in = cols.size();
  for (const RowSlice& p : parts) w.n_out += p.rows.size();
  w.data = AlignedBytes(w.n_out * w.row_bytes());
  const int64_t held_stride = dtype_row_bytes(t, n_in), off = dtype_row_bytes(t, cols.begin), rb = w.row_bytes();
  std::vector<uint8_t> held;  // a requantized row
  std::vector<float> values;  // its source's values, checked finite
  int64_t r0 = 0;
  for (const RowSlice& p : parts) {
    const TensorView& v = f.require(p.name, {p.total_rows, n_in});
    const int64_t stride = dtype_row_bytes(v.dtype, n_in);
    for (int64_t r = p.rows.begin; r < p.rows.end; ++r, ++r0) {
      const uint8_t* row = v.data + r * stride;
      if (v.dtype != t) {
        values.resize(size_t(n_in));
        dequantize_row(v.dtype, row, values.data(), n_in);
        if (const int64_t c = cpu::first_non_finite(DType::F32, values.data(), n_in); c >= 0)
          refuse_weight(f, p.name, r, c, n_in, values[size_t(c)], v.dtype);
        held.resize(size_t(held_stride));
        requantize_gguf_row(v.dtype, row, held.data(), n_in);
        row = held.data();
      }
      const uint8_t* src = row + off;
      check_block_scales(f, p.name, t, src, r, cols.begin / align, w.n_in / align);
      std::memcpy(w.data.data() + r0 * rb, src, size_t(rb));
    }
  }
  return cpu::Weight(std::move(w));
}

}  // namespace

bool parse_quantized_mode(const std::string& name, const std::string& what) {
  if (name == kQuantizedModeNames[0]) return true;
  if (name == kQuantizedModeNames[1]) return false;
  throw InputError(what + " must be keep or dequantize, not '" + name + "'");
}

std::vector<cpu::Weight> load_linear(const ModelFile& f, const WeightLoadOptions& o, int64_t n_in, Range cols,
                                     const std::vector<RowSlice>& parts) {
  if (!is_runtime_dtype(o.runtime))
    throw InputError("runtime dtype must be bf16 or f32, not " + std::string(dtype_name(o.runtime)));
  // Runs of consecutive parts: one per GGUF block type they are held in (kept as they are, or requantized at load:
  // gguf_held_dtype), one for the dense (or dequantized) rest.
  auto kind = [&](const RowSlice& p) {
    const DType t = f.require(p.name, {p.total_rows, n_in}).dtype;
    return o.keep_quantized && is_quantized(t) ? int(gguf_held_dtype(t)) : -1;
  };
  std::vector<cpu::Weight> out;
  if (const CtConfig* ct = f.quantization()) {
    // compressed-tensors: runs of consecutive parts of one scheme that can share a weight; unquantized parts
    // (ignored modules) load dense.
    for (size_t i = 0; i < parts.size();) {
      const CtScheme* s = ct_quantized_scheme(f, *ct, parts[i].name);
      size_t j = i + 1;
      while (j < parts.size() && ct_quantized_scheme(f, *ct, parts[j].name) == s &&
             (!s || ct_can_stack(f, parts[i].name, parts[j].name)))
        ++j;
      const std::vector<RowSlice> run(parts.begin() + int64_t(i), parts.begin() + int64_t(j));
      if (s) {
        PackedWeight w = ct_load_slice(f, *s, n_in, cols, run);
        // The BF16 runtime rounds a weight-only format's activations to BF16, as its dense BF16 weights' GEMV /
        // GEMM does (and vLLM's A16 kernels); the F32 runtime keeps them F32.
        w.act_bf16 = o.runtime == DType::BF16 && w.act == ActQuant::None;
        out.emplace_back(std::move(w));
      } else {
        out.push_back(load_dense(f, o.runtime, n_in, cols, run));
      }
      i = j;
    }
    return out;
  }
  for (size_t i = 0; i < parts.size();) {
    const int k = kind(parts[i]);
    size_t j = i + 1;
    while (j < parts.size() && kind(parts[j]) == k) ++j;
    const std::vector<RowSlice> run(parts.begin() + ptrdiff_t(i), parts.begin() + ptrdiff_t(j));
    out.push_back(k < 0 ? load_dense(f, o.runtime, n_in, cols, run) : load_gguf_blocks(f, DType(k), n_in, cols, run));
    i = j;
  }
  return out;
}

std::vector<float> load_vector(const ModelFile& f, const std::string& name, int64_t n) {
  const TensorView& t = f.require(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, out.data(), n);
  if (const int64_t bad = cpu::first_non_finite(DType::F32, out.data(), n); bad >= 0)
    throw FormatError(f.path(), tensor_label(f, name),
                      "holds " + value_text(out[size_t(bad)]) + " at [" + std::to_string(bad) +
                          "]: every weight must be finite");
  return out;
}

void check_embedding_rows(const ModelFile& f, const TensorView& t, int64_t hidden, Range rows) {
  const int64_t stride = dtype_row_bytes(t.dtype, hidden);
  if (!is_quantized(t.dtype)) {
    const int64_t bad = cpu::first_non_finite(t.dtype, t.data + rows.begin * stride, rows.size() * hidden);
    if (bad >= 0) {
      const int64_t row = rows.begin + bad / hidden, col = bad % hidden;
      refuse_weight(f, t.name, row, col, hidden, source_value(t, hidden, row, col), t.dtype);
    }
    return;
  }
  std::vector<float> r(static_cast<size_t>(hidden));
  for (int64_t row = rows.begin; row < rows.end; ++row) {
    dequantize_row(t.dtype, t.data + row * stride, r.data(), hidden);
    if (const int64_t col = cpu::first_non_finite(DType::F32, r.data(), hidden); col >= 0)
      refuse_weight(f, t.name, row, col, hidden, r[size_t(col)], t.dtype);
  }
}

}  // namespace tp
