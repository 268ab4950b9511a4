// 4-bit weight layouts (see rows16_layout.h).
#include "common/rows16_layout.h"

#include <cstring>
#include <utility>
#include <vector>

#include "common/dtype.h"
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

// GGUF Q4_0 / Q4_1: bytes of a file block, where its 16 code bytes start, 16-bit scale entries a block (d, m).
// GGUF Q4_0 / Q4_1 / Q8_0: bytes of a file block, 16-bit scale entries a block (d, m).
bool is_gguf16(WeightFormat f) {
  return f == WeightFormat::GgufQ4_0 || f == WeightFormat::GgufQ4_1 || f == WeightFormat::GgufQ8_0;
}
int64_t gguf_block_bytes(WeightFormat f) { return f == WeightFormat::GgufQ8_0 ? 34 : f == WeightFormat::GgufQ4_1 ? 20 : 18; }
int64_t gguf_entries(WeightFormat f) { return f == WeightFormat::GgufQ4_1 ? 2 : 1; }

// A block's 16 code bytes as the file holds them (byte j: weight j low nibble, 16 + j high) <-> as Rows holds
// its 32 columns (byte j: column 2j low, 2j + 1 high).
void gguf_codes_to_rows(const uint8_t* qs, uint8_t* rows) {
  auto code = [&](int c) { return c < 16 ? qs[c] & 15 : qs[c - 16] >> 4; };
  for (int j = 0; j < 16; ++j) rows[j] = uint8_t(code(2 * j) | code(2 * j + 1) << 4);
}

void rows_codes_to_gguf(const uint8_t* rows, uint8_t* qs) {
  auto code = [&](int c) { return (rows[c / 2] >> (4 * (c % 2))) & 15; };
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(code(j) | code(16 + j) << 4);
}

// Entries a row of the per-row arrays (Int4 groups, FP4 blocks, GGUF 16-bit d / m entries).
int64_t row_entries(const PackedWeight& w) {
  if (w.format == WeightFormat::Mxfp4) return w.n_in / 32;
  if (w.format == WeightFormat::Nvfp4) return w.n_in / 16;
  if (is_gguf16(w.format)) return w.n_in / 32 * gguf_entries(w.format);
  return w.n_groups();
}

std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& a) {
  std::vector<uint8_t> o(a.size() * 2);
  std::memcpy(o.data(), a.data(), o.size());
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
  if (is_gguf16(w.format))
    return w.gguf_layout == GgufLayout::File ? "" : std::string("GGUF rows regrouped (") + gguf_layout_name(w.gguf_layout) + ")";
  if (!fp4 && w.format != WeightFormat::Int4) return "not an int4, mxfp4, nvfp4, GGUF q4_0, q4_1 or q8_0 weight";
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

void rows16_q8_codes(const uint8_t* data, int64_t n_in, int64_t r, uint8_t* codes) {
  const int64_t chunks = n_in / 4;
  const uint8_t* block = data + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
  for (int64_t ch = 0; ch < chunks; ++ch) std::memcpy(codes + ch * 4, block + ch * 64, 4);
}

void rows16_gguf_file_row(const PackedWeight& w, int64_t r, uint8_t* out) {
  const bool q8 = w.format == WeightFormat::GgufQ8_0;
  const int64_t nb = w.n_in / 32, e = gguf_entries(w.format), bb = gguf_block_bytes(w.format);
  std::vector<uint8_t> codes(size_t(q8 ? w.n_in : w.n_in / 2));
  std::vector<uint16_t> ent(size_t(nb * e));
  if (q8)
    rows16_q8_codes(w.data.data(), w.n_in, r, codes.data());
  else
    rows16_codes(w.data.data(), w.n_in, r, codes.data());
  rows16_entries(reinterpret_cast<const uint16_t*>(w.scale_bytes.data()), nb * e, r, ent.data());
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = out + b * bb;
    for (int64_t k = 0; k < e; ++k) store16(ent[size_t(b * e + k)], blk + 2 * k);
    if (q8)
      for (int64_t j = 0; j < 32; ++j) blk[2 + j] = uint8_t(codes[size_t(b * 32 + j)] ^ 0x80);  // q + 128 -> q
    else
      rows_codes_to_gguf(codes.data() + b * 16, blk + 2 * e);
  }
}

void set_rows_layout(PackedWeight* w, RowsLayout to) {
  const bool mx = w->format == WeightFormat::Mxfp4, fp4 = mx || w->format == WeightFormat::Nvfp4;
  const bool gguf = is_gguf16(w->format), q8 = w->format == WeightFormat::GgufQ8_0;
  if (!fp4 && !gguf && w->format != WeightFormat::Int4)
    throw Error("set_rows_layout: a " + std::string(weight_format_name(w->format)) + " weight has no rows layout");
  if (w->rows_layout == to) return;
  // code bytes a row; chunks (64 bytes of a row block) a row: 8 columns of 4-bit codes, 4 of Q8_0's bytes
  const int64_t n_in = w->n_in, rbytes = q8 ? n_in : n_in / 2, chunks = q8 ? n_in / 4 : n_in / kChunkCols;
  const int64_t nrb = row_blocks(w->n_out);
  const int64_t n = row_entries(*w);  // entries a row of the per-row arrays
  AlignedBytes data;
  if (to == RowsLayout::Rows16) {
    const std::string why = rows16_refusal(*w);
    if (!why.empty())
      throw Error("set_rows_layout: " + std::string(weight_format_name(w->format)) + " weight [" +
                  std::to_string(w->n_out) + ", " + std::to_string(n_in) + "] to rows16: " + why);
    std::vector<uint8_t> gguf_codes;     // GGUF: a row's codes in the Rows order
    std::vector<uint16_t> entries;       // GGUF: every row's d (and m) entries, [n_out][n]
    if (gguf) {
      gguf_codes.resize(size_t(rbytes));
      entries.resize(size_t(w->n_out * n));
    }
    data = AlignedBytes(nrb * kRowsBlock * rbytes);  // zero-filled: rows past n_out code (byte) 0
    for (int64_t r = 0; r < w->n_out; ++r) {
      const uint8_t* row = w->data.data() + r * (gguf ? w->row_bytes() : rbytes);
      if (gguf) {  // the file's blocks: their codes in the Rows order (Q8_0: q + 128), their d / m into the entries
        const int64_t e = gguf_entries(w->format), bb = gguf_block_bytes(w->format);
        for (int64_t b = 0; b < n_in / 32; ++b) {
          const uint8_t* blk = row + b * bb;
          for (int64_t k = 0; k < e; ++k) entries[size_t(r * n + b * e + k)] = load16(blk + 2 * k);
          if (q8)
            for (int64_t j = 0; j < 32; ++j) gguf_codes[size_t(b * 32 + j)] = uint8_t(blk[2 + j] ^ 0x80);
          else
            gguf_codes_to_rows(blk + 2 * e, gguf_codes.data() + b * 16);
        }
        row = gguf_codes.data();
      }
      uint8_t* block = data.data() + (r / kRowsBlock) * chunks * 64 + 4 * (r % kRowsBlock);
      if (q8) {  // 4 columns' bytes a chunk, as they are
        for (int64_t ch = 0; ch < chunks; ++ch) std::memcpy(block + ch * 64, row + ch * 4, 4);
        continue;
      }
      for (int64_t ch = 0; ch < chunks; ++ch) {
        uint16_t w0, w1;
        bytes_to_words(row + ch * 4, &w0, &w1);
        store16(w0, block + ch * 64);
        store16(w1, block + ch * 64 + 2);
      }
    }
    if (gguf) {
      w->scale_bytes = bytes_of(to_rows16<uint16_t>(entries, w->n_out, n, 0));
    } else if (fp4) {
      w->scale_bytes = to_rows16<uint8_t>(w->scale_bytes, w->n_out, n, mx ? 127 : 0);
    } else {
      w->scales = to_rows16<float>(w->scales, w->n_out, n, 0.0f);
      if (!w->zeros.empty()) w->zeros = to_rows16<int8_t>(w->zeros, w->n_out, n, 0);
    }
  } else if (gguf) {  // back to the file's blocks
    const int64_t fbytes = dtype_row_bytes(gguf_block_dtype(w->format), n_in);
    data = AlignedBytes(w->n_out * fbytes);
    for (int64_t r = 0; r < w->n_out; ++r) rows16_gguf_file_row(*w, r, data.data() + r * fbytes);
    w->scale_bytes.clear();
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
