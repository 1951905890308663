// The CSR^T of a CSR matrix (contract: pygio_csr_transpose in pyg_ioaware.h):
// a stable radix sort of the entries by column (cub), between the two
// kernels below: one numbers the entries, one gathers each CSR^T entry's
// row and finds the CSR^T row pointers. No atomics: the order is fixed.
#pragma once

#include <stdint.h>

#include "../common/search.cuh"
#include "graph_traits.cuh"

namespace pygio {

// positions[e] = e: the values the sort carries along with the columns.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    entry_positions_kernel(typename Traits::index_t* __restrict__ positions, int64_t nnz) {
  using index_t = typename Traits::index_t;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < nnz;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    positions[e] = static_cast<index_t>(e);
}

// Grid-stride over max(nnz, num_cols + 1), after the sort: entry i of the
// CSR^T takes its row of A (out_col[i] = row[out_perm[i]]), and column c's
// first position is found by binary search in the sorted columns.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    transpose_rows_kernel(const __grid_constant__ pygio_csr_transpose_params p) {
  using index_t = typename Traits::index_t;
  const auto* row = static_cast<const index_t*>(p.row);
  const auto* sorted_col = static_cast<const index_t*>(p.out_row);
  const auto* perm = static_cast<const index_t*>(p.out_perm);
  auto* out_col = static_cast<index_t*>(p.out_col);
  auto* out_rowptr = static_cast<index_t*>(p.out_rowptr);
  const int64_t nnz = p.a.nnz, num_cols = p.a.num_cols;
  const int64_t work = max(nnz, num_cols + 1);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < work;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < nnz) out_col[i] = row[static_cast<int64_t>(perm[i])];
    if (i <= num_cols)
      out_rowptr[i] = static_cast<index_t>(
          first_true(0, nnz, [&](int64_t j) { return sorted_col[j] >= i; }));
  }
}

}  // namespace pygio
