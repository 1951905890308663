// SDDMM kernel: out[e] = <G[row(e), :], X[col(e), :]> over the entries of a
// CSR matrix (contract in pyg_ioaware.h).
//
// One warp per row, grid-stride over rows: the row of G is re-read once per
// edge from L1/L2, each lane accumulates a strided slice of the dot product
// and a warp shuffle finishes it. Only used when edge weights require grad,
// so it favours simplicity over peak bandwidth.
#pragma once

#include "sddmm_traits.cuh"

namespace pygio {

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    sddmm_kernel(const __grid_constant__ pygio_sddmm_params params) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  using dtype = typename Traits::dtype;

  const auto* __restrict__ rowptr = static_cast<const index_t*>(params.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(params.a.col);
  const auto* __restrict__ g = static_cast<const scalar_t*>(params.g);
  const auto* __restrict__ x = static_cast<const scalar_t*>(params.x);
  auto* __restrict__ out = static_cast<scalar_t*>(params.out);
  const int64_t width = params.width;

  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps_in_grid = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                     threadIdx.x / kWarpSize;
       row < params.a.num_rows; row += warps_in_grid) {
    const scalar_t* g_row = g + row * params.g_row_stride;
    const int64_t end = rowptr[row + 1];
    for (int64_t e = rowptr[row]; e < end; ++e) {
      const scalar_t* x_row = x + static_cast<int64_t>(col[e]) * params.x_row_stride;
      acc_t partial = 0;
      for (int64_t k = lane; k < width; k += kWarpSize)
        partial += dtype::load(g_row[k]) * dtype::load(x_row[k]);
      partial = warp_sum(partial);
      if (lane == 0) out[e] = dtype::store(partial);
    }
  }
}

}  // namespace pygio
