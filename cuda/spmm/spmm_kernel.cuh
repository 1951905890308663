// SpMM kernels of our own (contract: pygio_spmm_csr in pyg_ioaware.h).
//
// Forward, Y[r] = sum_{e in row r} values[e] X[col[e]] (+ bias):
//  - spmm_rows_kernel: a group of lanes per row (the group as wide as the
//    row's kVec-element pieces need, up to a warp), grid-stride over rows;
//    each lane keeps kEdgeUnroll gathered loads in flight and writes its
//    piece of the row once, bias added and cast. A row above the hub degree
//    is only registered (one 64-bit atomic gives its slot and first chunk).
//  - spmm_hub_chunks_kernel: one warp per kHubChunk-entry chunk of a hub
//    row, all hubs' chunks spread over the grid, partial sums merged into
//    the hub's accumulator row with fp32 (fp64) atomics;
//  - spmm_hub_finish_kernel: hub accumulator + bias -> Y.
// Transposed, Y[c] = sum_{e: col[e] = c} values[e] X[row(e)]:
//  - spmm_scatter_kernel: balanced chunks of kScatterChunk entries per lane
//    group (the first entry's row found by binary search in rowptr), each
//    entry's scaled source row added with atomics into an accumulator;
//  - spmm_cast_kernel: that accumulator -> Y for 16-bit Y.
#pragma once

#include "pyg_ioaware.h"
#include "spmm_traits.cuh"

namespace pygio {

// Lane `lane` of a group: acc[i] = sum over entries [begin, end) of
// values[e] * x[col[e], k + i], kEdgeUnroll gathered loads in flight.
template <typename Traits>
__device__ __forceinline__ void gather_rows(
    const typename Traits::index_t* __restrict__ col,
    const typename Traits::value_t* __restrict__ values,
    const typename Traits::scalar_t* __restrict__ x, int64_t x_row_stride, int64_t k,
    int64_t begin, int64_t end, typename Traits::acc_t (&acc)[Traits::kVec]) {
  using scalar_t = typename Traits::scalar_t;
  using acc_t = typename Traits::acc_t;
  constexpr int U = Traits::kEdgeUnroll;
  constexpr int V = Traits::kVec;
  int64_t e = begin;
  for (; e + U <= end; e += U) {
    Pack<scalar_t, V> packs[U];
    acc_t scales[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t src = static_cast<int64_t>(col[e + u]);
      packs[u] = *reinterpret_cast<const Pack<scalar_t, V>*>(x + src * x_row_stride + k);
      scales[u] = static_cast<acc_t>(DTypeTraits<typename Traits::value_t>::load(values[e + u]));
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += scales[u] * DTypeTraits<scalar_t>::load(packs[u].v[i]);
  }
  for (; e < end; ++e) {
    const int64_t src = static_cast<int64_t>(col[e]);
    fma_pack<V>(x + src * x_row_stride + k,
                static_cast<acc_t>(DTypeTraits<typename Traits::value_t>::load(values[e])), acc);
  }
}

template <typename Traits>
__device__ __forceinline__ void register_hub(const HubWorkspace<typename Traits::acc_t>& ws,
                                             int64_t row, int64_t degree) {
  const unsigned long long chunks = (degree + kHubChunk - 1) / kHubChunk;
  const unsigned long long old = atomicAdd(ws.counter, (1ull << kHubCountShift) + chunks);
  const int64_t slot = static_cast<int64_t>(old >> kHubCountShift);
  ws.hubs[slot] = HubEntry{row, static_cast<int64_t>(old & ((1ull << kHubCountShift) - 1))};
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    spmm_rows_kernel(const __grid_constant__ pygio_spmm_csr_params p, int group_shift,
                     int64_t hub_degree, const HubWorkspace<typename Traits::acc_t> ws) {
  using scalar_t = typename Traits::scalar_t;
  using value_t = typename Traits::value_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ values = static_cast<const value_t*>(p.values);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const auto* __restrict__ bias = static_cast<const value_t*>(p.bias);
  auto* __restrict__ y = static_cast<scalar_t*>(p.y);

  const int lanes = 1 << group_shift;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> group_shift;
  const int64_t pieces = p.width / V;
  for (int64_t row = thread >> group_shift; row < p.a.num_rows; row += groups) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    if (ws.hubs != nullptr && end - begin > hub_degree) {
      if (lane == 0) register_hub<Traits>(ws, row, end - begin);
      continue;
    }
    for (int64_t piece = lane; piece < pieces; piece += lanes) {
      const int64_t k = piece * V;
      acc_t acc[V] = {};
      gather_rows<Traits>(col, values, x, p.x_row_stride, k, begin, end, acc);
      if (bias != nullptr) {
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += static_cast<acc_t>(DTypeTraits<value_t>::load(bias[k + i]));
      }
      store_pack<V>(y + row * p.y_row_stride + k, acc);
    }
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    spmm_hub_chunks_kernel(const __grid_constant__ pygio_spmm_csr_params p,
                           const HubWorkspace<typename Traits::acc_t> ws) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const unsigned long long counter = *ws.counter;
  const int64_t num_hubs = static_cast<int64_t>(counter >> kHubCountShift);
  const int64_t num_chunks = static_cast<int64_t>(counter & ((1ull << kHubCountShift) - 1));
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < num_chunks; chunk += warps) {
    int64_t lo = 0, hi = num_hubs - 1;  // the last slot whose first chunk <= chunk
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (ws.hubs[mid].first_chunk <= chunk) lo = mid; else hi = mid - 1;
    }
    const HubEntry hub = ws.hubs[lo];
    const int64_t begin = rowptr[hub.row] + (chunk - hub.first_chunk) * kHubChunk;
    const int64_t row_end = rowptr[hub.row + 1];
    const int64_t end = begin + kHubChunk < row_end ? begin + kHubChunk : row_end;
    acc_t* sums = ws.sums + lo * p.width;
    for (int64_t piece = lane; piece < pieces; piece += kWarpSize) {
      const int64_t k = piece * V;
      acc_t acc[V] = {};
      gather_rows<Traits>(static_cast<const index_t*>(p.a.col),
                          static_cast<const typename Traits::value_t*>(p.values),
                          static_cast<const typename Traits::scalar_t*>(p.x), p.x_row_stride, k,
                          begin, end, acc);
#pragma unroll
      for (int i = 0; i < V; ++i) atomicAdd(sums + k + i, acc[i]);
    }
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    spmm_hub_finish_kernel(const __grid_constant__ pygio_spmm_csr_params p,
                           const HubWorkspace<typename Traits::acc_t> ws) {
  using value_t = typename Traits::value_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ bias = static_cast<const value_t*>(p.bias);
  auto* __restrict__ y = static_cast<typename Traits::scalar_t*>(p.y);
  const int64_t num_hubs = static_cast<int64_t>(*ws.counter >> kHubCountShift);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                      threadIdx.x / kWarpSize;
       slot < num_hubs; slot += warps) {
    const int64_t row = ws.hubs[slot].row;
    for (int64_t k = lane; k < p.width; k += kWarpSize) {
      acc_t v = ws.sums[slot * p.width + k];
      if (bias != nullptr) v += static_cast<acc_t>(DTypeTraits<value_t>::load(bias[k]));
      y[row * p.y_row_stride + k] = DTypeTraits<typename Traits::scalar_t>::store(v);
    }
  }
}

// acc_out (row stride out_row_stride) += A^T X, accumulator type.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    spmm_scatter_kernel(const __grid_constant__ pygio_spmm_csr_params p, int group_shift,
                        typename Traits::acc_t* __restrict__ acc_out, int64_t out_row_stride) {
  using scalar_t = typename Traits::scalar_t;
  using value_t = typename Traits::value_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ values = static_cast<const value_t*>(p.values);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);

  const int lanes = 1 << group_shift;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> group_shift;
  const int64_t pieces = p.width / V;
  const int64_t num_chunks = (p.a.nnz + kScatterChunk - 1) / kScatterChunk;
  for (int64_t chunk = thread >> group_shift; chunk < num_chunks; chunk += groups) {
    const int64_t first = chunk * kScatterChunk;
    const int64_t last = first + kScatterChunk < p.a.nnz ? first + kScatterChunk : p.a.nnz;
    int64_t lo = 0, hi = p.a.num_rows - 1;  // the row holding entry `first`
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (static_cast<int64_t>(rowptr[mid]) <= first) lo = mid; else hi = mid - 1;
    }
    int64_t row = lo, row_end = rowptr[row + 1];
    for (int64_t e = first; e < last; ++e) {
      while (e >= row_end) row_end = rowptr[++row + 1];
      const acc_t scale = static_cast<acc_t>(DTypeTraits<value_t>::load(values[e]));
      acc_t* out_row = acc_out + static_cast<int64_t>(col[e]) * out_row_stride;
      for (int64_t piece = lane; piece < pieces; piece += lanes) {
        const int64_t k = piece * V;
        const Pack<scalar_t, V> pack =
            *reinterpret_cast<const Pack<scalar_t, V>*>(x + row * p.x_row_stride + k);
#pragma unroll
        for (int i = 0; i < V; ++i)
          atomicAdd(out_row + k + i, scale * DTypeTraits<scalar_t>::load(pack.v[i]));
      }
    }
  }
}

// y[r, k] = acc[r * width + k] in Y's type.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    spmm_cast_kernel(const __grid_constant__ pygio_spmm_csr_params p, int64_t num_out,
                     const typename Traits::acc_t* __restrict__ acc) {
  auto* __restrict__ y = static_cast<typename Traits::scalar_t*>(p.y);
  const int64_t total = num_out * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.width, k = i - r * p.width;
    y[r * p.y_row_stride + k] = DTypeTraits<typename Traits::scalar_t>::store(acc[i]);
  }
}

}  // namespace pygio
