// Building a CSR graph by destination from an edge list (contracts in
// pyg_ioaware.h): one pass for the index range and the grouping check, which
// can write the grouped case's CSR as it goes, or a pass for that CSR alone.
// They replace about a dozen small torch launches per new mini-batch graph.
#pragma once

#include <stdint.h>

#include "../common/search.cuh"
#include "graph_traits.cuh"

namespace pygio {

// Slots of the stats (pygio_edge_index_stats). The first kNumMinSlots reduce
// by min from kStatsInit: maxima are kept bitwise-negated (~v orders opposite
// to v and never overflows), and kOrder drops to 0 where an edge's
// destination is below its predecessor's. kSelfLoops is a count, summed
// from 0.
enum StatsSlot {
  kMinSrc = 0, kMinDst, kNotMaxSrc, kNotMaxDst, kOrder, kNotLongestRun, kNumMinSlots,
  kSelfLoops = kNumMinSlots, kNumStats
};
static_assert(kNumStats == PYGIO_EDGE_STATS, "pyg_ioaware.h names the stats' count");
constexpr long long kStatsInit = 0x7f7f7f7f7f7f7f7fLL;

template <typename index_t>
__device__ __forceinline__ long long edge_entry(const void* base, int64_t stride, int64_t e) {
  return static_cast<long long>(static_cast<const index_t*>(base)[e * stride]);
}

// The first e in [0, num_edges) with dst[e] >= r (num_edges where none), for
// dst non-decreasing (any dst: some e in [0, num_edges]).
template <typename index_t>
__device__ __forceinline__ int64_t first_edge_at_or_after(const pygio_edges& edges, int64_t r) {
  return first_true(0, edges.num_edges, [&](int64_t i) {
    return edge_entry<index_t>(edges.dst, edges.dst_stride, i) >= r;
  });
}

// Item i of the CSR of grouped edges (pygio_csr_from_grouped): edge i into
// col / row (where col is set), rowptr[i] by binary search (no serial walk
// over empty rows, however many there are). In bounds for any edges: i
// below max(num_edges, num_rows + 1) writes only entry i of each output.
template <typename index_t, typename out_t>
__device__ __forceinline__ void grouped_csr_item(const pygio_edges& edges, int64_t num_rows,
                                                 out_t* rowptr, out_t* col, out_t* row,
                                                 int64_t i) {
  if (i < edges.num_edges && col != nullptr) {
    col[i] = static_cast<out_t>(edge_entry<index_t>(edges.src, edges.src_stride, i));
    row[i] = static_cast<out_t>(edge_entry<index_t>(edges.dst, edges.dst_stride, i));
  }
  if (i <= num_rows) rowptr[i] = static_cast<out_t>(first_edge_at_or_after<index_t>(edges, i));
}

// Grid-stride over the edges (and, where p.out_rowptr is set, the CSR's
// items: max(num_edges, num_rows + 1)); each block reduces its threads' stats
// in shared memory and writes them to its own row of p.stats (no atomics, so
// nothing to initialize). A run's length is found by the thread at its first
// edge (binary search).
template <typename Traits, typename out_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    edge_stats_kernel(const __grid_constant__ pygio_edge_stats_params p, int64_t* stats_rows) {
  using index_t = typename Traits::index_t;
  const pygio_edges& edges = p.edges;
  auto* rowptr = static_cast<out_t*>(p.out_rowptr);
  auto* col = static_cast<out_t*>(p.out_col);
  auto* row = static_cast<out_t*>(p.out_row);
  long long stats[kNumStats];
  for (int s = 0; s < kNumMinSlots; ++s) stats[s] = kStatsInit;
  stats[kSelfLoops] = 0;
  const int64_t items = PYGIO_EDGE_STATS_ITEMS(edges.num_edges, p.num_rows, rowptr != nullptr);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < items;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (rowptr != nullptr) grouped_csr_item<index_t>(edges, p.num_rows, rowptr, col, row, e);
    if (e >= edges.num_edges) continue;
    const long long src = edge_entry<index_t>(edges.src, edges.src_stride, e);
    const long long dst = edge_entry<index_t>(edges.dst, edges.dst_stride, e);
    stats[kMinSrc] = min(stats[kMinSrc], src);
    stats[kMinDst] = min(stats[kMinDst], dst);
    stats[kNotMaxSrc] = min(stats[kNotMaxSrc], ~src);
    stats[kNotMaxDst] = min(stats[kNotMaxDst], ~dst);
    const long long previous =
        e > 0 ? edge_entry<index_t>(edges.dst, edges.dst_stride, e - 1) : dst;
    if (dst < previous) stats[kOrder] = 0;
    if (e == 0 || dst != previous) {  // a run starts: its end, where the edges are grouped
      const int64_t end = first_true(e + 1, edges.num_edges, [&](int64_t i) {
        return edge_entry<index_t>(edges.dst, edges.dst_stride, i) > dst;
      });
      stats[kNotLongestRun] = min(stats[kNotLongestRun], ~static_cast<long long>(end - e));
    }
    stats[kSelfLoops] += src == dst;
  }
  __shared__ long long block_stats[Traits::kWarpsPerBlock][kNumStats];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int s = 0; s < kNumStats; ++s) {
    const long long v = s == kSelfLoops ? warp_sum(stats[s]) : warp_min(stats[s]);
    if (lane == 0) block_stats[warp][s] = v;
  }
  __syncthreads();
  if (threadIdx.x < kNumStats) {
    const int s = threadIdx.x;
    long long v = block_stats[0][s];
    for (int w = 1; w < Traits::kWarpsPerBlock; ++w)
      v = s == kSelfLoops ? v + block_stats[w][s] : min(v, block_stats[w][s]);
    stats_rows[blockIdx.x * static_cast<int64_t>(kNumStats) + s] = v;
  }
}

// Grid-stride over max(num_edges, num_rows + 1): grouped_csr_item each.
template <typename Traits, typename out_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    csr_from_grouped_kernel(const __grid_constant__ pygio_csr_from_grouped_params p) {
  const int64_t work = max(p.edges.num_edges, p.num_rows + 1);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < work;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    grouped_csr_item<typename Traits::index_t>(p.edges, p.num_rows,
                                               static_cast<out_t*>(p.out_rowptr),
                                               static_cast<out_t*>(p.out_col),
                                               static_cast<out_t*>(p.out_row), i);
}

}  // namespace pygio

namespace pygio {

// Whether input edge i (of `num_edges`) is a self loop; 0 for i == num_edges,
// so that an exclusive scan over num_edges + 1 items ends with the total.
template <typename index_t>
struct IsSelfLoop {
  pygio_edges edges;
  __host__ __device__ int64_t operator()(int64_t i) const {
    if (i >= edges.num_edges) return 0;
    return edge_entry<index_t>(edges.src, edges.src_stride, i) ==
           edge_entry<index_t>(edges.dst, edges.dst_stride, i);
  }
};

// PyG's remove + add self loops on grouped edges (contract:
// pygio_csr_pyg_self_loops), after `loops_before` [num_edges + 1] holds the
// exclusive prefix count of the input's self loops. Grid-stride over
// max(num_edges, num_rows + 1): kept edge e goes to slot k = e -
// loops_before[e] of the PyG-ordered edge list and to CSR position k + (loops
// of the rows before its own); loop r (r < num_loops) goes to slot num_kept +
// r and to the end of row r; rowptr[r] counts the kept edges and the loops of
// the rows before r.
template <typename Traits, typename out_t>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    pyg_self_loops_kernel(const __grid_constant__ pygio_pyg_self_loops_params p,
                          const int64_t* __restrict__ loops_before) {
  using index_t = typename Traits::index_t;
  const pygio_edges& edges = p.edges;
  const int64_t total = p.num_kept + p.num_loops;
  auto* edges_src = static_cast<index_t*>(p.out_edges);
  auto* edges_dst = edges_src + total;
  auto* rowptr = static_cast<out_t*>(p.out_rowptr);
  auto* col = static_cast<out_t*>(p.out_col);
  auto* row = static_cast<out_t*>(p.out_row);
  auto* perm = static_cast<out_t*>(p.out_perm);
  const int64_t work = max(edges.num_edges, p.num_rows + 1);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < work;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < edges.num_edges) {
      const long long src = edge_entry<index_t>(edges.src, edges.src_stride, i);
      const long long dst = edge_entry<index_t>(edges.dst, edges.dst_stride, i);
      if (src != dst) {
        const int64_t k = i - loops_before[i];
        const int64_t position = k + min(static_cast<int64_t>(dst), p.num_loops);
        p.out_kept[k] = i;
        edges_src[k] = static_cast<index_t>(src);
        edges_dst[k] = static_cast<index_t>(dst);
        col[position] = static_cast<out_t>(src);
        row[position] = static_cast<out_t>(dst);
        perm[position] = static_cast<out_t>(k);
      }
    }
    if (i < p.num_loops) {
      const int64_t after = first_edge_at_or_after<index_t>(edges, i + 1);
      const int64_t position = after - loops_before[after] + i;
      edges_src[p.num_kept + i] = static_cast<index_t>(i);
      edges_dst[p.num_kept + i] = static_cast<index_t>(i);
      col[position] = static_cast<out_t>(i);
      row[position] = static_cast<out_t>(i);
      perm[position] = static_cast<out_t>(p.num_kept + i);
    }
    if (i <= p.num_rows) {
      const int64_t first = first_edge_at_or_after<index_t>(edges, i);
      rowptr[i] = static_cast<out_t>(first - loops_before[first] + min(i, p.num_loops));
    }
  }
}

}  // namespace pygio
