#include "common/act_order.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "common/error.h"
#include "common/packed_weight.h"

namespace tp {

namespace {

int32_t code_at(const PackedWeight& w, const uint8_t* row, int64_t c) {
  if (w.format == WeightFormat::Int8) return row[c];
  return (c % 2 ? row[c / 2] >> 4 : row[c / 2]) & 15;  // column c in byte c / 2, low nibble for even c
}

void set_code(const PackedWeight& w, uint8_t* row, int64_t c, int32_t v) {
  if (w.format == WeightFormat::Int8) {
    row[c] = uint8_t(v);
  } else {
    row[c / 2] = uint8_t(c % 2 ? (row[c / 2] & 0x0f) | (v << 4) : (row[c / 2] & 0xf0) | v);
  }
}

}  // namespace

bool hold_sorted_by_group(PackedWeight* w, std::vector<int32_t>* gather, int64_t granule) {
  gather->clear();
  if (granule < 1 || 32 % granule != 0) throw Error("hold_sorted_by_group: granule " + std::to_string(granule) +
                                                    " does not divide 32");
  const bool int4 = w->format == WeightFormat::Int4;
  if ((!int4 && w->format != WeightFormat::Int8) || w->g_idx.empty() || w->rows_layout != RowsLayout::Rows ||
      w->act_group != 0 || w->group_size < 1)
    return false;
  const int64_t n_in = w->n_in, n_groups = w->n_groups(), gs = w->group_size, n_out = w->n_out;
  std::vector<int64_t> count(static_cast<size_t>(n_groups), 0);
  for (const int32_t g : w->g_idx) ++count[size_t(g)];
  bool whole = n_groups == (n_in + gs - 1) / gs;
  for (int64_t g = 0; whole && g < n_groups; ++g) whole = count[size_t(g)] == std::min(gs, n_in - g * gs);

  std::vector<int32_t> order(static_cast<size_t>(n_in));  // the columns stably sorted by group
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return w->g_idx[size_t(a)] < w->g_idx[size_t(b)]; });
  // Held groups of p columns. Whole groups: p = group_size, one held group a group, nothing padded (the last
  // group's rest ends the row). Else p a multiple of the granule: each group's columns, sorted, in ceil(count / p)
  // of them, the last padded; p the one of the fewest bytes held (codes + a scale and zero point a held group), at
  // most the most columns a group holds rounded up to the granule (that p: one held group a given group); held
  // columns a multiple of 32 (a last held group of padding alone where needed).
  int64_t p = gs, n_held_groups = n_groups, n_held = n_in;
  if (!whole) {
    int64_t most = 0;
    for (const int64_t k : count) most = std::max(most, k);
    const double code_bytes = int4 ? 0.5 : 1.0, group_bytes = 4.0 + (w->zeros.empty() ? 0 : 1);
    double best = 0;
    p = 0;
    for (int64_t q = granule; q < most + granule; q += granule) {
      int64_t ng = 0;
      for (const int64_t k : count) ng += (k + q - 1) / q;
      while (ng * q % 32 != 0) ++ng;
      const double bytes = double(ng * q) * code_bytes + double(ng) * group_bytes;
      if (p == 0 || bytes <= best) p = q, n_held_groups = ng, best = bytes;  // a tie: the longer groups
    }
    n_held = p * n_held_groups;
    if (n_held > 2 * n_in) return false;  // past 2x the columns the memory a rank saves by slicing is gone
  }

  PackedWeight h;
  h.format = w->format;
  h.n_out = n_out;
  h.n_in = n_held;
  h.group_size = p;
  h.act = w->act;
  h.act_scale = w->act_scale;
  h.act_bf16 = w->act_bf16;
  h.data = AlignedBytes(n_out * h.row_bytes());
  gather->assign(size_t(n_held), -1);
  std::vector<int32_t> held;  // the given group each held group's columns come from
  for (int64_t i = 0; i < n_in;) {  // one group's run of `order` at a time
    const int32_t g = w->g_idx[size_t(order[size_t(i)])];
    const int64_t first = int64_t(held.size()) * p;
    for (int64_t t = 0; i < n_in && w->g_idx[size_t(order[size_t(i)])] == g; ++t, ++i) {
      if (t % p == 0) held.push_back(g);
      (*gather)[size_t(first + t)] = order[size_t(i)];  // chunk t / p at held column first + t
    }
  }
  const int64_t rb = w->row_bytes(), hb = h.row_bytes();
  const int32_t pad = int4 ? 8 : 0;  // q = 0
  for (int64_t r = 0; r < n_out; ++r) {
    const uint8_t* s = w->data.data() + r * rb;
    uint8_t* d = h.data.data() + r * hb;
    for (int64_t j = 0; j < n_held; ++j) {
      const int32_t c = (*gather)[size_t(j)];
      set_code(h, d, j, c < 0 ? pad : code_at(*w, s, c));
    }
  }
  const size_t ng = size_t(n_held_groups);  // held.size(), and any held groups of padding alone (scale 0)
  h.scales.assign(size_t(n_out) * ng, 0.0f);
  if (!w->zeros.empty()) h.zeros.assign(h.scales.size(), 0);
  for (int64_t r = 0; r < n_out; ++r)
    for (size_t k = 0; k < held.size(); ++k) {  // a given group's scale and zero point for each of its held groups
      h.scales[size_t(r) * ng + k] = w->scales[size_t(r * n_groups + held[k])];
      if (!w->zeros.empty()) h.zeros[size_t(r) * ng + k] = w->zeros[size_t(r * n_groups + held[k])];
    }
  *w = std::move(h);
  bool moved = n_held != n_in;  // whole groups already in order: nothing to gather
  for (int64_t j = 0; !moved && j < n_held; ++j) moved = (*gather)[size_t(j)] != j;
  if (!moved) gather->clear();
  return true;
}

}  // namespace tp
