// Loading one rank's weights (see weight_loader.h).
#include "rank/weight_loader.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "kernels/cpu/finite.h"
#include "rank/compressed_tensors.h"
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
// Only the bytes of the slice are read from the mapping. A column slice of a quantized tensor must start and
// end on a block boundary.
cpu::Weight load_dense(const ModelFile& f, DType runtime, int64_t n_in, Range cols, const std::vector<RowSlice>& parts) {
  const int64_t n_cols = cols.size();
  int64_t rows = 0;
  std::vector<const TensorView*> views;
  for (const RowSlice& p : parts) {
    views.push_back(&f.require(p.name, {p.total_rows, n_in}));
    rows += p.rows.size();
    const int64_t blk_elems = dtype_block_elems(views.back()->dtype);
    if (cols.begin % blk_elems != 0 || cols.end % blk_elems != 0)
      throw FormatError(f.path(), p.name,
                        "column slice [" + std::to_string(cols.begin) + ", " + std::to_string(cols.end) +
                            ") does not fall on the " + std::to_string(blk_elems) + "-weight quantization blocks");
  }
  cpu::Weight w = [&] {
    if (parts.size() == 1 && n_cols == n_in) {  // one contiguous run of whole rows: convert straight from the file
      const TensorView& t = *views[0];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in);
      return cpu::Weight(runtime, rows, n_in, t.dtype, t.data + parts[0].rows.begin * stride, stride);
    }
    std::vector<float> staging(static_cast<size_t>(rows * n_cols));
    int64_t r0 = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const TensorView& t = *views[i];
      const int64_t stride = dtype_row_bytes(t.dtype, n_in), col_off = dtype_row_bytes(t.dtype, cols.begin);
      for (int64_t r = parts[i].rows.begin; r < parts[i].rows.end; ++r, ++r0)
        dequantize_row(t.dtype, t.data + r * stride + col_off, staging.data() + r0 * n_cols, n_cols);
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

}  // namespace

std::vector<cpu::Weight> load_linear(const ModelFile& f, const WeightLoadOptions& o, int64_t n_in, Range cols,
                                     const std::vector<RowSlice>& parts) {
  if (!is_runtime_dtype(o.runtime))
    throw InputError("runtime dtype must be bf16 or f32, not " + std::string(dtype_name(o.runtime)));
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
      if (s)
        out.emplace_back(ct_load_slice(f, *s, n_in, cols, run));
      else
        out.push_back(load_dense(f, o.runtime, n_in, cols, run));
      i = j;
    }
    return out;
  }
  out.push_back(load_dense(f, o.runtime, n_in, cols, parts));
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
