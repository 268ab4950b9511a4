#include "common/act_order.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/packed_weight.h"

namespace tp {

bool sort_columns_by_group(PackedWeight* w) {
  const bool int4 = w->format == WeightFormat::Int4;
  if ((!int4 && w->format != WeightFormat::Int8) || w->g_idx.empty() || w->rows_layout != RowsLayout::Rows ||
      w->act_group != 0 || w->group_size < 1 || w->n_groups() != (w->n_in + w->group_size - 1) / w->group_size)
    return false;
  const int64_t n_in = w->n_in, n_groups = w->n_groups(), gs = w->group_size;
  std::vector<int64_t> count(static_cast<size_t>(n_groups), 0);
  for (const int32_t g : w->g_idx) ++count[size_t(g)];
  for (int64_t g = 0; g < n_groups; ++g)  // sorted, column j then lies in group j / gs
    if (count[size_t(g)] != std::min(gs, n_in - g * gs)) return false;

  std::vector<int32_t> order(static_cast<size_t>(n_in));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w->g_idx[size_t(a)] < w->g_idx[size_t(b)]; });
  bool moved = false;
  for (int64_t j = 0; j < n_in; ++j) moved |= order[size_t(j)] != j;
  if (moved) {
    const int64_t rb = w->row_bytes();
    std::vector<uint8_t> row(static_cast<size_t>(rb));
    for (int64_t r = 0; r < w->n_out; ++r) {
      uint8_t* d = w->data.data() + r * rb;
      std::memcpy(row.data(), d, size_t(rb));
      if (int4) {  // column c's code in byte c / 2, low nibble for even c
        std::memset(d, 0, size_t(rb));
        for (int64_t j = 0; j < n_in; ++j) {
          const int64_t c = order[size_t(j)];
          const uint8_t q = (c % 2 ? row[size_t(c / 2)] >> 4 : row[size_t(c / 2)]) & 15;
          d[j / 2] |= uint8_t(j % 2 ? q << 4 : q);
        }
      } else {
        for (int64_t j = 0; j < n_in; ++j) d[j] = row[size_t(order[size_t(j)])];
      }
    }
    w->col_order = std::move(order);
  }
  w->g_idx.clear();
  w->g_idx_groups = 0;
  return true;
}

}  // namespace tp
