// 4-bit weight layouts (see rows16_layout.h).
#include "common/rows16_layout.h"

#include <utility>
#include <vector>

#include "common/error.h"
#include "common/packed_weight.h"

namespace tp {
namespace {

constexpr int64_t kRowsBlock = 16;  // rows a Rows16 block
constexpr int64_t kChunkCols = 8;   // columns a 64-byte chunk of a block

int64_t row_blocks(int64_t n_out) { return (n_out + kRowsBlock - 1) / kRowsBlock; }

// The 4 Rows bytes of 8 columns (byte j: column 2j low nibble, 2j + 1 high) <-> a row's two Rows16 words (word t
// nibble n: column 2n + t).
void bytes_to_words(const uint8_t* b, uint16_t* w0, uint16_t* w1) {
  uint16_t lo = 0, hi = 0;
  for (int n = 0; n < 4; ++n) {
    lo = uint16_t(lo | (b[n] & 15) << (4 * n));
    hi = uint16_t(hi | (b[n] >> 4) << (4 * n));
  }
  *w0 = lo;
  *w1 = hi;
}

void words_to_bytes(uint16_t w0, uint16_t w1, uint8_t* b) {
  for (int n = 0; n < 4; ++n) b[n] = uint8_t(((w0 >> (4 * n)) & 15) | ((w1 >> (4 * n)) & 15) << 4);
}

uint16_t load16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
void store16(uint16_t v, uint8_t* p) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// A per-row array of n entries a row ([n_out][n], Rows) into Rows16 order ([row blocks][n][16], padded with pad)
// and back.
template <class T>
std::vector<T> to_rows16(const std::vector<T>& a, int64_t n_out, int64_t n, T pad) {
  std::vector<T> o(size_t(row_blocks(n_out) * kRowsBlock * n), pad);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t g = 0; g < n; ++g) o[size_t(((r / kRowsBlock) * n + g) * kRowsBlock + r % kRowsBlock)] = a[size_t(r * n + g)];
  return o;
}

template <class T>
std::vector<T> from_rows16(const std::vector<T>& a, int64_t n_out, int64_t n) {
  std::vector<T> o(size_t(n_out * n));
  for (int64_t r = 0; r < n_out; ++r) rows16_entries(a.data(), n, r, o.data() + r * n);
  return o;
}

}  // namespace

const char* rows_layout_name(RowsLayout l) { return l == RowsLayout::Rows16 ? "rows16" : "rows"; }

bool fp4_rows16_scales_ok(const uint8_t* sb, int64_t n, bool mx) {
  for (int64_t k = 0; k < n; ++k)
    if (mx ? sb[k] == 0 || sb[k] == 255 : (sb[k] & 0x7f) == 0x7f) return false;
  return true;
}

std::string rows16_refusal(const PackedWeight& w) {
  const bool mx = w.format == WeightFormat::Mxfp4, fp4 = mx || w.format == WeightFormat::Nvfp4;
  if (!fp4 && w.format != WeightFormat::Int4) return "not an int4, mxfp4 or nvfp4 weight";
  if (w.act != ActQuant::None) return "activation quantization";
  if (w.n_in % 32 != 0) return "n_in is not a multiple of 32";
  if (!fp4 && !w.g_idx.empty()) return "g_idx (act-order)";
  if (!fp4 && w.n_groups() > 1 && w.group_size % 32 != 0) return "groups of a size that is not a multiple of 32";
  if (fp4 && !fp4_rows16_scales_ok(w.scale_bytes.data(), int64_t(w.scale_bytes.size()), mx))
    return mx ? "an E8M0 scale byte 0 or 255" : "an E4M3 scale byte that is NaN";
  return "";
}

void rows16_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes) {
  const int64_t chunks = n_in / kChunkCols;
  const uint8_t* block = data + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
  for (int64_t ch = 0; ch < chunks; ++ch) words_to_bytes(load16(block + ch * 64), load16(block + ch * 64 + 2), codes + ch * 4);
}

void set_rows_layout(PackedWeight* w, RowsLayout to) {
  const bool mx = w->format == WeightFormat::Mxfp4, fp4 = mx || w->format == WeightFormat::Nvfp4;
  if (!fp4 && w->format != WeightFormat::Int4)
    throw Error("set_rows_layout: a " + std::string(weight_format_name(w->format)) + " weight has no rows layout");
  if (w->rows_layout == to) return;
  const int64_t n_in = w->n_in, rbytes = w->row_bytes(), chunks = n_in / kChunkCols, nrb = row_blocks(w->n_out);
  const int64_t n = fp4 ? n_in / (mx ? 32 : 16) : w->n_groups();  // entries a row of the per-row arrays
  AlignedBytes data;
  if (to == RowsLayout::Rows16) {
    const std::string why = rows16_refusal(*w);
    if (!why.empty())
      throw Error("set_rows_layout: " + std::string(weight_format_name(w->format)) + " weight [" +
                  std::to_string(w->n_out) + ", " + std::to_string(n_in) + "] to rows16: " + why);
    data = AlignedBytes(nrb * kRowsBlock * rbytes);  // zero-filled: rows past n_out code 0
    for (int64_t r = 0; r < w->n_out; ++r) {
      const uint8_t* row = w->data.data() + r * rbytes;
      uint8_t* block = data.data() + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        uint16_t w0, w1;
        bytes_to_words(row + ch * 4, &w0, &w1);
        store16(w0, block + ch * 64);
        store16(w1, block + ch * 64 + 2);
      }
    }
    if (fp4) {
      w->scale_bytes = to_rows16<uint8_t>(w->scale_bytes, w->n_out, n, mx ? 127 : 0);
    } else {
      w->scales = to_rows16<float>(w->scales, w->n_out, n, 0.0f);
      if (!w->zeros.empty()) w->zeros = to_rows16<int8_t>(w->zeros, w->n_out, n, 0);
    }
  } else {
    data = AlignedBytes(w->n_out * rbytes);
    for (int64_t r = 0; r < w->n_out; ++r) rows16_codes(w->data.data(), n_in, r, data.data() + r * rbytes);
    if (fp4) {
      w->scale_bytes = from_rows16(w->scale_bytes, w->n_out, n);
    } else {
      w->scales = from_rows16(w->scales, w->n_out, n);
      if (!w->zeros.empty()) w->zeros = from_rows16(w->zeros, w->n_out, n);
    }
  }
  w->data = std::move(data);
  w->rows_layout = to;
}

}  // namespace tp
