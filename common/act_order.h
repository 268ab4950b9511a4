// Act-order (g_idx) Int8 / Int4 weights held with their columns sorted by scale group, so that the kernels for
// contiguous groups (column c in group c / group_size) run them: GPTQ's actorder "group" assigns whole groups of
// group_size columns in the order of the Hessian's diagonal, so column c's group g_idx[c] jumps about, and the
// one kernel that takes g_idx reads a scale a column (~40× slower decode: bench/packed_bench --as-loaded).
// Held, column j of the weight reads x column gather[j] (x = 0 where gather[j] < 0: a padding column): the
// layer computes y = x̃ · Wᵀ_held with x̃[:, j] = x[:, gather[j]] (kernels/cpu/linear.h cpu::Weight gathers).
//   whole groups (a whole weight, a column-parallel slice of one: every group holds group_size columns, the last
//     of ceil(n_in / group_size) the rest): columns stably sorted by group, nothing else changes (same n_in,
//     group_size, scales and zero points).
//   groups held partly (a row-parallel slice keeps the columns of its range: each group some of its columns, some
//     none): held groups of P columns (a multiple of the granule, 16 or 32: what the kernels take; group_size P):
//     each given group's columns, sorted, in ceil(count / P) held groups, in group order, the last padded with code
//     0 (Int4 stored 8) and x 0; each held group the scale and zero point of the given group; held columns a
//     multiple of 32 (a last held group of padding alone, scale 0, where needed). P the one of the fewest bytes
//     (codes, scales, zero points), up to the most columns a group holds rounded up. Left as it is when that would hold more
//     than 2× the columns (a slice holding a few columns of many groups): the memory slicing saves is then gone.
//     Up to 2× is worth it: the held weight streams at the DRAM rate, the g_idx kernel runs ~40× slower; on the
//     real model at tp 3 (groups of 64) the slices hold 1.5-1.8× the columns of o_proj / down_proj: a rank's
//     weights 59.9 MiB against 56.8 kept with g_idx (bench/results/act-order-zen5-20261205.md).
#pragma once
#include <cstdint>
#include <vector>

namespace tp {

struct PackedWeight;

// Holds w (an Int8 / Int4 weight with g_idx in layout Rows, no per-group activation scales: act_group 0 — a
// per-token or static activation scale does not depend on the columns' order) sorted by group as above, in
// place, and says whether it did; *gather gets the held columns' x columns (empty where nothing moved).
// g_idx and g_idx_groups are cleared. Other weights are left as they are (false).
// granule: held groups' columns a multiple of it (a divisor of 32; throws tp::Error otherwise).
bool hold_sorted_by_group(PackedWeight* w, std::vector<int32_t>* gather, int64_t granule = 32);

}  // namespace tp
