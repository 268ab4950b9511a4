// Act-order (g_idx) Int8 / Int4 weights held with their columns sorted by scale group, so that every kernel that
// takes contiguous groups (c / group_size) runs them: GPTQ's actorder "group" assigns whole groups of group_size
// columns in the order of the Hessian's diagonal, so column c's group g_idx[c] jumps about and the kernels for
// contiguous groups refuse the weight (the one that takes g_idx reads a scale a column: tens of times slower).
// Sorted, data column j holds the weight's column col_order[j] (a stable sort by g_idx: within a group in
// column order), its group j / group_size; the scales and zero points stay where they are (group g's are still
// entry g). A kernel then computes y = x[:, col_order] · Wᵀ_held (kernels/cpu/packed_linear.cpp gathers x).
#pragma once

namespace tp {

struct PackedWeight;

// Sorts w's columns by group when it can, in place, and says whether it did: an Int8 / Int4 weight with g_idx
// in layout Rows whose every group holds exactly group_size columns, the last of ceil(n_in / group_size) the rest
// (a whole weight or a column-parallel slice of one; a row-parallel slice holds some groups partly: left as it is),
// with no per-group activation scales (act_group 0: a per-token or static activation scale does not depend on
// the columns' order). Sets col_order (empty where the sort leaves every column in place) and clears g_idx and
// g_idx_groups; dequantize_rows gives the same values before and after.
bool sort_columns_by_group(PackedWeight* w);

}  // namespace tp
