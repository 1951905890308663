// Graph-structure kernels (contracts in pyg_ioaware.h): PyG's remaining self
// loops without a sort, and GCN's symmetric and mean aggregation's edge values.
// Each replaces a dozen or more small torch launches on a new graph.
#pragma once

#include "graph_traits.cuh"

namespace pygio {

// deg^-1/2, 0 where deg = 0 (GCN's normalization).
template <typename acc_t>
__device__ __forceinline__ acc_t inv_sqrt_or_zero(acc_t deg) {
  return deg == acc_t(0) ? acc_t(0) : acc_t(1) / sqrt(deg);
}

// deg^-1/2 of node v in the self-loop graph where every entry weighs 1: its
// input entries plus its loop (out_gcn_values of pygio_self_loops_params).
template <typename index_t>
__device__ __forceinline__ float looped_degree_factor(const index_t* rowptr, index_t v) {
  return inv_sqrt_or_zero(static_cast<float>(rowptr[v + 1] - rowptr[v] + 1));
}

// Row r <= num_nodes: out_rowptr[r] = rowptr[r] + r; row r < num_nodes also
// gets its loop first in its row (at rowptr[r] + r), marked NEW_LOOP until
// an input loop claims it (move_entry).
template <typename index_t>
__device__ __forceinline__ void write_loop_row(const pygio_self_loops_params& p, int64_t r) {
  const auto* rowptr = static_cast<const index_t*>(p.rowptr);
  auto* out_col = static_cast<index_t*>(p.out_col);
  auto* out_row = static_cast<index_t*>(p.out_row);
  const int64_t start = static_cast<int64_t>(rowptr[r]) + r;
  static_cast<index_t*>(p.out_rowptr)[r] = static_cast<index_t>(start);
  if (r == p.num_nodes) return;
  out_col[start] = static_cast<index_t>(r);
  out_row[start] = static_cast<index_t>(r);
  p.out_origin[start] = kNewLoop;
  if (p.out_gcn_values != nullptr) {  // as gcn_values_kernel: deg^-1/2 * 1 * deg^-1/2
    const float factor = looped_degree_factor(rowptr, static_cast<index_t>(r));
    p.out_gcn_values[start] = factor * 1.0f * factor;
  }
}

// Entry e < nnz of row r moves to e + r + 1 (behind the loops of rows
// 0..r). An input self loop stays as a DROPPED_LOOP entry and, with
// claim_loop, hands its input edge id to the row's loop (the largest id
// wins, as PyG's last write), which write_loop_row must have written before.
template <typename index_t>
__device__ __forceinline__ void move_entry(const pygio_self_loops_params& p, int64_t e,
                                           bool claim_loop) {
  const auto* rowptr = static_cast<const index_t*>(p.rowptr);
  const auto* edge_perm = static_cast<const index_t*>(p.edge_perm);
  const index_t r = static_cast<const index_t*>(p.row)[e];
  const index_t c = static_cast<const index_t*>(p.col)[e];
  const int64_t pos = e + r + 1;
  const int64_t input_id = edge_perm != nullptr ? static_cast<int64_t>(edge_perm[e]) : e;
  static_cast<index_t*>(p.out_col)[pos] = c;
  static_cast<index_t*>(p.out_row)[pos] = r;
  if (p.out_gcn_values != nullptr)  // as gcn_values_kernel: deg^-1/2(c) * 1 * deg^-1/2(r)
    p.out_gcn_values[pos] = looped_degree_factor(rowptr, c) * 1.0f *
                            looped_degree_factor(rowptr, r);
  if (c != r) {
    p.out_origin[pos] = input_id;
    return;
  }
  p.out_origin[pos] = kDroppedLoop;
  if (claim_loop)
    atomicMax(reinterpret_cast<long long*>(&p.out_origin[static_cast<int64_t>(rowptr[r]) + r]),
              static_cast<long long>(input_id));
}

// Thread r <= num_nodes: write_loop_row.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    self_loop_rows_kernel(const __grid_constant__ pygio_self_loops_params p) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       r <= p.num_nodes; r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    write_loop_row<typename Traits::index_t>(p, r);
}

// Thread e < nnz: move_entry, after self_loop_rows_kernel.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    self_loop_entries_kernel(const __grid_constant__ pygio_self_loops_params p) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.nnz;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    move_entry<typename Traits::index_t>(p, e, /*claim_loop=*/true);
}

// Both in one launch, for an input without self loops (out_gcn_values'
// contract): no loop is claimed, so rows and entries need no order. Items
// 0..num_nodes are rows, the nnz after them entries.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    self_loops_without_input_loops_kernel(const __grid_constant__ pygio_self_loops_params p) {
  const int64_t rows = p.num_nodes + 1;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < rows + p.nnz; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < rows)
      write_loop_row<typename Traits::index_t>(p, i);
    else
      move_entry<typename Traits::index_t>(p, i - rows, /*claim_loop=*/false);
  }
}

// Weight of entry e for a normalization (Params: pygio_gcn_norm_params or
// pygio_mean_norm_params): weight[e], or where there are no weights 1,
// except a DROPPED_LOOP entry of `origin`, which weighs 0.
template <typename acc_t, typename Params>
__device__ __forceinline__ acc_t entry_weight(const Params& p, int64_t e) {
  if (p.weight != nullptr) return static_cast<const acc_t*>(p.weight)[e];
  return acc_t(p.origin == nullptr || p.origin[e] != kDroppedLoop);
}

// Warp per row: deg(r) = sum of the row's entry_weight, in scalar_t's
// accumulator type; deg_inv_sqrt[r] = deg^-1/2, 0 where deg = 0.
template <typename Traits, typename scalar_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gcn_degree_kernel(const __grid_constant__ pygio_gcn_norm_params p) {
  using index_t = typename Traits::index_t;
  using acc_t = typename DTypeTraits<scalar_t>::acc;
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  auto* deg_inv_sqrt = static_cast<acc_t*>(p.deg_inv_sqrt);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps_in_grid = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                   threadIdx.x / kWarpSize;
       r < p.a.num_rows; r += warps_in_grid) {
    acc_t deg = 0;
    for (int64_t e = rowptr[r] + lane; e < rowptr[r + 1]; e += kWarpSize)
      deg += entry_weight<acc_t>(p, e);
    deg = warp_sum(deg);
    if (lane == 0) deg_inv_sqrt[r] = inv_sqrt_or_zero(deg);
  }
}

// Thread per entry: values[e] = deg^-1/2(col e) * w_e * deg^-1/2(row e),
// deg^-1/2 from gcn_degree_kernel's deg_inv_sqrt or, kUnitWeights (no
// weights, no origin: every entry weighs 1), from the row lengths, so that
// one launch suffices.
template <typename Traits, typename scalar_t, bool kUnitWeights>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gcn_values_kernel(const __grid_constant__ pygio_gcn_norm_params p) {
  using index_t = typename Traits::index_t;
  using acc_t = typename DTypeTraits<scalar_t>::acc;
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* col = static_cast<const index_t*>(p.a.col);
  const auto* row = static_cast<const index_t*>(p.row);
  const auto* deg_inv_sqrt = static_cast<const acc_t*>(p.deg_inv_sqrt);
  auto* values = static_cast<scalar_t*>(p.values);
  auto degree_factor = [&](index_t r) {
    if constexpr (kUnitWeights)
      return inv_sqrt_or_zero(static_cast<acc_t>(rowptr[r + 1] - rowptr[r]));
    else
      return deg_inv_sqrt[r];
  };
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.a.nnz;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const acc_t w = entry_weight<acc_t>(p, e);
    values[e] = DTypeTraits<scalar_t>::store(degree_factor(col[e]) * w * degree_factor(row[e]));
  }
}

// Thread per entry: values[e] = w_e / max(1, entries of row e).
template <typename Traits, typename scalar_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    mean_values_kernel(const __grid_constant__ pygio_mean_norm_params p) {
  using index_t = typename Traits::index_t;
  using acc_t = typename DTypeTraits<scalar_t>::acc;
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* row = static_cast<const index_t*>(p.row);
  auto* values = static_cast<scalar_t*>(p.values);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.a.nnz;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const index_t r = row[e];
    const acc_t count = static_cast<acc_t>(rowptr[r + 1] - rowptr[r]);
    values[e] = DTypeTraits<scalar_t>::store(entry_weight<acc_t>(p, e) /
                                             (count < acc_t(1) ? acc_t(1) : count));
  }
}

}  // namespace pygio
