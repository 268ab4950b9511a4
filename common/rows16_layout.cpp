// FP4 weight layouts (see fp4_layout.h).
#include "common/fp4_layout.h"

#include <string>
#include <utility>

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

}  // namespace

const char* fp4_layout_name(Fp4Layout l) { return l == Fp4Layout::Rows16 ? "rows16" : "rows"; }

bool fp4_rows16_scales_ok(const uint8_t* sb, int64_t n, bool mx) {
  for (int64_t k = 0; k < n; ++k)
    if (mx ? sb[k] == 0 || sb[k] == 255 : (sb[k] & 0x7f) == 0x7f) return false;
  return true;
}

void fp4_rows16_row(const uint8_t* data, const uint8_t* scale_bytes, int64_t n_in, int64_t nb, int64_t r,
                    uint8_t* codes, uint8_t* scales) {
  const int64_t chunks = n_in / kChunkCols, rb = r / kRowsBlock, i = r % kRowsBlock;
  const uint8_t* block = data + rb * chunks * 64;
  for (int64_t ch = 0; ch < chunks; ++ch)
    words_to_bytes(load16(block + ch * 64 + 4 * i), load16(block + ch * 64 + 4 * i + 2), codes + ch * 4);
  for (int64_t b = 0; b < nb; ++b) scales[b] = scale_bytes[(rb * nb + b) * kRowsBlock + i];
}

void set_fp4_layout(PackedWeight* w, Fp4Layout to) {
  const bool mx = w->format == WeightFormat::Mxfp4;
  if (!mx && w->format != WeightFormat::Nvfp4)
    throw Error("set_fp4_layout: a " + std::string(weight_format_name(w->format)) + " weight has no FP4 layout");
  if (w->fp4_layout == to) return;
  const int64_t n_in = w->n_in, nb = n_in / (mx ? 32 : 16), rbytes = n_in / 2, chunks = n_in / kChunkCols;
  const int64_t nrb = row_blocks(w->n_out);
  AlignedBytes data;
  std::vector<uint8_t> sb;
  if (to == Fp4Layout::Rows16) {
    const std::string what = "set_fp4_layout: " + std::string(weight_format_name(w->format)) + " weight [" +
                             std::to_string(w->n_out) + ", " + std::to_string(n_in) + "] to rows16: ";
    if (w->act != ActQuant::None) throw Error(what + "activation quantization");
    if (n_in % 32 != 0) throw Error(what + "n_in is not a multiple of 32");
    if (!fp4_rows16_scales_ok(w->scale_bytes.data(), int64_t(w->scale_bytes.size()), mx))
      throw Error(what + (mx ? "an E8M0 scale byte 0 or 255" : "an E4M3 scale byte that is NaN"));
    data = AlignedBytes(nrb * kRowsBlock * rbytes);  // zero-filled: rows past n_out code 0
    sb.assign(size_t(nrb * kRowsBlock * nb), mx ? 127 : 0);
    for (int64_t r = 0; r < w->n_out; ++r) {
      const uint8_t* row = w->data.data() + r * rbytes;
      uint8_t* block = data.data() + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        uint16_t w0, w1;
        bytes_to_words(row + ch * 4, &w0, &w1);
        store16(w0, block + ch * 64);
        store16(w1, block + ch * 64 + 2);
      }
      for (int64_t b = 0; b < nb; ++b)
        sb[size_t(((r / kRowsBlock) * nb + b) * kRowsBlock + r % kRowsBlock)] = w->scale_bytes[size_t(r * nb + b)];
    }
  } else {
    data = AlignedBytes(w->n_out * rbytes);
    sb.resize(size_t(w->n_out * nb));
    for (int64_t r = 0; r < w->n_out; ++r)
      fp4_rows16_row(w->data.data(), w->scale_bytes.data(), n_in, nb, r, data.data() + r * rbytes, sb.data() + r * nb);
  }
  w->data = std::move(data);
  w->scale_bytes = std::move(sb);
  w->fp4_layout = to;
}

}  // namespace tp
