// Building a CSR graph by destination from an edge list (contracts in
// pyg_ioaware.h): one pass for the index range and the grouping check, one
// for the grouped case's CSR. Together they replace about a dozen small
// torch launches per new mini-batch graph.
#pragma once

#include <stdint.h>

#include "graph_traits.cuh"

namespace pygio {

// Slots of the stats. Every slot is reduced with atomicMin from kStatsInit:
// maxima are kept bitwise-negated (~v orders opposite to v and never
// overflows), and kOrder drops to 0 where an edge's destination is below its
// predecessor's.
enum StatsSlot { kMinSrc = 0, kMinDst, kNotMaxSrc, kNotMaxDst, kOrder, kNumStats };
constexpr long long kStatsInit = 0x7f7f7f7f7f7f7f7fLL;  // memset byte 0x7f
constexpr unsigned char kStatsInitByte = 0x7f;

template <typename index_t>
__device__ __forceinline__ long long edge_entry(const void* base, int64_t stride, int64_t e) {
  return static_cast<long long>(static_cast<const index_t*>(base)[e * stride]);
}

// Grid-stride over the edges; each block reduces its threads' stats in
// shared memory and merges them into p.stats with one atomicMin per slot.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    edge_stats_kernel(const __grid_constant__ pygio_edge_stats_params p) {
  using index_t = typename Traits::index_t;
  const pygio_edges& edges = p.edges;
  long long stats[kNumStats] = {kStatsInit, kStatsInit, kStatsInit, kStatsInit, kStatsInit};
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < edges.num_edges; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const long long src = edge_entry<index_t>(edges.src, edges.src_stride, e);
    const long long dst = edge_entry<index_t>(edges.dst, edges.dst_stride, e);
    stats[kMinSrc] = min(stats[kMinSrc], src);
    stats[kMinDst] = min(stats[kMinDst], dst);
    stats[kNotMaxSrc] = min(stats[kNotMaxSrc], ~src);
    stats[kNotMaxDst] = min(stats[kNotMaxDst], ~dst);
    if (e > 0 && dst < edge_entry<index_t>(edges.dst, edges.dst_stride, e - 1))
      stats[kOrder] = 0;
  }
  __shared__ long long block_stats[Traits::kWarpsPerBlock][kNumStats];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int s = 0; s < kNumStats; ++s) {
    const long long v = warp_min(stats[s]);
    if (lane == 0) block_stats[warp][s] = v;
  }
  __syncthreads();
  if (threadIdx.x < kNumStats) {
    long long v = block_stats[0][threadIdx.x];
    for (int w = 1; w < Traits::kWarpsPerBlock; ++w) v = min(v, block_stats[w][threadIdx.x]);
    atomicMin(reinterpret_cast<long long*>(&p.stats[threadIdx.x]), v);
  }
}

// The first e in [0, num_edges) with dst[e] >= r (num_edges where none), for
// dst non-decreasing.
template <typename index_t>
__device__ __forceinline__ int64_t first_edge_at_or_after(const pygio_edges& edges, int64_t r) {
  int64_t low = 0, high = edges.num_edges;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (edge_entry<index_t>(edges.dst, edges.dst_stride, mid) < r) low = mid + 1;
    else high = mid;
  }
  return low;
}

// Grid-stride over max(num_edges, num_rows + 1): entry i copies edge i into
// col / row and finds rowptr[i] by binary search (no serial walk over empty
// rows, however many there are).
template <typename Traits, typename out_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    csr_from_grouped_kernel(const __grid_constant__ pygio_csr_from_grouped_params p) {
  using index_t = typename Traits::index_t;
  const pygio_edges& edges = p.edges;
  auto* rowptr = static_cast<out_t*>(p.out_rowptr);
  auto* col = static_cast<out_t*>(p.out_col);
  auto* row = static_cast<out_t*>(p.out_row);
  const int64_t work = max(edges.num_edges, p.num_rows + 1);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < work;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < edges.num_edges) {
      col[i] = static_cast<out_t>(edge_entry<index_t>(edges.src, edges.src_stride, i));
      row[i] = static_cast<out_t>(edge_entry<index_t>(edges.dst, edges.dst_stride, i));
    }
    if (i <= p.num_rows) rowptr[i] = static_cast<out_t>(first_edge_at_or_after<index_t>(edges, i));
  }
}

}  // namespace pygio
