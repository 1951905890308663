// SpMM kernels of our own (contract: pygio_spmm_csr in pyg_ioaware.h).
//
// Every kernel gives a row (or a chunk of entries) to one warp, laid out by
// WarpLayout: `lanes` lanes span the row's features (kPieces pieces of kVec
// elements each, 16-byte loads where alignment allows) and the warp's
// sub-groups take interleaved entries, each lane keeping kUnroll gathered
// loads in flight. A step's column indices and values load while the step
// before is gathered, and a row's last step also loads the next row's
// first (so no row waits for its own first index load) in the warp-per-row
// kernels where it costs no spilled registers (Traits::kCarryAcrossRows)
// and in the sub-group-per-row kernel for all. Entry positions are 32-bit
// where the indices are (Traits::offset_t).
//
// Forward, Y[r] = sum_{e in row r} values[e] X[col[e]] (+ bias):
//  - spmm_rows_kernel: a warp per row, grid-stride over rows, sub-group
//    sums merged with shuffles, the row written once with bias and cast. A
//    row above the hub threshold is only registered (one 64-bit atomic
//    gives its slot and its first chunk).
//  - spmm_rows_grouped_kernel, for narrow rows (fewer lanes than a warp
//    span one): each sub-group of a warp takes rows of its own, so short
//    rows keep every lane loading; hubs registered as above.
//  - spmm_row_batches_kernel, for narrow rows of large graphs: each
//    sub-group takes batches of consecutive rows and walks a batch's
//    entries as one range, so rows shorter than a step (a lone self loop)
//    keep a step's gathers in flight; hubs registered as above.
//  - spmm_hub_chunks_kernel: a warp per kHubChunk-entry chunk of a hub row,
//    all hubs' chunks spread over the grid, partial sums merged into the
//    hub's accumulator row with atomics;
//  - spmm_hub_finish_kernel: hub accumulator + bias -> Y.
// Transposed, Y[c] = sum_{e: col[e] = c} values[e] X[row(e)]:
//  - spmm_scatter_kernel: a warp per kScatterChunk entries (the first
//    entry's row found by binary search in rowptr), each entry's scaled
//    source row added with vector atomics into an accumulator;
//  - spmm_cast_kernel: that accumulator -> Y for 16-bit Y.
// X is read as Traits::scalar_t and Y written as Traits::out_t (the same
// type, or float <-> 16-bit where the values are float).
#pragma once

#include "../common/gather.cuh"
#include "../common/row_loop.cuh"
#include "pyg_ioaware.h"
#include "spmm_traits.cuh"

namespace pygio {

template <typename Traits>
using RowAcc = typename Traits::acc_t[Traits::kPieces][Traits::kVec];

// An entry position in the CSR (SpmmTraits::offset_t).
template <typename Traits>
using Offset = typename Traits::offset_t;

// The entries first, first + stride, ... < end of one row (or chunk) that
// one sub-group sums.
template <typename Traits>
struct EntryRange {
  Offset<Traits> first, end;
};

// One step's entries e0, e0 + stride, ..., kUnroll of them: their source
// rows (-1 past the range's end) and edge values (0 past it).
template <typename Traits>
struct EntryStep {
  typename Traits::index_t src[Traits::kUnroll];
  typename Traits::acc_t scale[Traits::kUnroll];
};

// The arrays a gather loop reads: column indices, edge values and x. In
// 16-bit (kPinned) they are pinned in registers (pin_in_register), x as a
// pointer at each of this lane's pieces of the pass (nullptr past the
// row's end): at 64 registers ptxas otherwise reloads each pointer from the
// kernel parameters and redoes its address arithmetic at every gather and
// index load (two constant-bank loads and about seven instructions a
// gathered entry, of the loop's 45 an entry; ncu on web-like bf16 D=64 put
// 37% of a warp's stall cycles on the short scoreboard those loads wait
// on). H200, bf16, share of copy bandwidth of the forward A X: D=64
// pokec-like 81 -> 83%, web-like 63 -> 65-67%, products-like 86 -> 88%,
// arxiv-like 40 -> 42%, roads-like 78 -> 82%; D=128 1-3 points. In fp32
// (memory-bound) D=128 lost 1-4 points, so wider types keep ptxas's choice.
template <typename Traits>
struct GatherSources {
  using scalar_t = typename Traits::scalar_t;
  static constexpr bool kPinned = sizeof(scalar_t) == 2;
  const typename Traits::index_t* col;
  const typename Traits::value_t* values;
  const scalar_t* x;                        // row 0 of x
  const scalar_t* lane_x[Traits::kPieces];  // kPinned: x at this lane's pieces

  // Whether this lane's q-th piece of the pass (`piece`) lies in the row.
  __device__ __forceinline__ bool has_piece(int q, int64_t piece, int64_t pieces) const {
    if constexpr (kPinned) return lane_x[q] != nullptr;
    return piece < pieces;
  }
  // x at this lane's q-th piece of the pass (`piece`), in row 0.
  __device__ __forceinline__ const scalar_t* piece_x(int q, int64_t piece) const {
    if constexpr (kPinned) return lane_x[q];
    return x + piece * Traits::kVec;
  }
};

// The sources of the pass starting at piece_base.
template <typename Traits>
__device__ __forceinline__ GatherSources<Traits> gather_sources(const pygio_spmm_csr_params& p,
                                                                WarpLayout layout, int lane,
                                                                int64_t piece_base) {
  using scalar_t = typename Traits::scalar_t;
  GatherSources<Traits> sources{static_cast<const typename Traits::index_t*>(p.a.col),
                                static_cast<const typename Traits::value_t*>(p.values),
                                static_cast<const scalar_t*>(p.x), {}};
  if constexpr (GatherSources<Traits>::kPinned) {
    const int64_t pieces = p.width / Traits::kVec;
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) {
      const int64_t piece = layout.piece(lane, piece_base, q);
      sources.lane_x[q] = piece < pieces ? sources.x + piece * Traits::kVec : nullptr;
      pin_in_register(sources.lane_x[q]);
    }
    pin_in_register(sources.col);
    pin_in_register(sources.values);
  }
  return sources;
}

// The step of entries e0, e0 + stride, ... below end.
template <typename Traits>
__device__ __forceinline__ void load_step(const typename Traits::index_t* __restrict__ col,
                                          const typename Traits::value_t* __restrict__ values,
                                          Offset<Traits> e0, Offset<Traits> end,
                                          Offset<Traits> stride, EntryStep<Traits>& step) {
  using value_t = typename Traits::value_t;
  using acc_t = typename Traits::acc_t;
  load_sources(col, e0, end, stride, step.src);
#pragma unroll
  for (int u = 0; u < Traits::kUnroll; ++u) {
    const Offset<Traits> e = e0 + stride * u;
    step.scale[u] = e < end ? static_cast<acc_t>(DTypeTraits<value_t>::load(values[e]))
                            : acc_t(0);
  }
}
template <typename Traits>
__device__ __forceinline__ void load_step(const pygio_spmm_csr_params& p, Offset<Traits> e0,
                                          Offset<Traits> end, Offset<Traits> stride,
                                          EntryStep<Traits>& step) {
  load_step<Traits>(static_cast<const typename Traits::index_t*>(p.a.col),
                    static_cast<const typename Traits::value_t*>(p.values), e0, end, stride, step);
}

// acc = 0.
template <typename Traits>
__device__ __forceinline__ void clear_acc(RowAcc<Traits>& acc) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q)
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) acc[q][i] = 0;
}

// Bytes between two rows of x.
template <typename Traits>
__device__ __forceinline__ uint64_t x_row_bytes(const pygio_spmm_csr_params& p) {
  return static_cast<uint64_t>(p.x_row_stride) * sizeof(typename Traits::scalar_t);
}

// One step's gathered pieces: [entry of the step][piece of this lane].
template <typename Traits>
using StepPacks = Pack<typename Traits::scalar_t, Traits::kVec>[Traits::kUnroll][Traits::kPieces];

// Issues this lane's gathers of `step`: packs[u][q] = x[src[u]] at the
// lane's q-th piece of the pass (from piece_base), for the step's entries
// (src[u] >= 0) and the pieces in the row.
template <typename Traits>
__device__ __forceinline__ void gather_step(const GatherSources<Traits>& sources,
                                            WarpLayout layout, int lane, int64_t piece_base,
                                            int64_t pieces, uint64_t row_bytes,
                                            const EntryStep<Traits>& step,
                                            StepPacks<Traits>& packs) {
#pragma unroll
  for (int u = 0; u < Traits::kUnroll; ++u)
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) {
      const int64_t piece = layout.piece(lane, piece_base, q);
      if (step.src[u] >= 0 && sources.has_piece(q, piece, pieces))
        packs[u][q] = load_pack<Traits::kVec>(
            row_address(sources.piece_x(q, piece), step.src[u], row_bytes));
    }
}

// acc += scale[u] * packs[u] (widened) for the step's u-th entry, where it is one.
template <typename Traits>
__device__ __forceinline__ void accumulate_entry(const GatherSources<Traits>& sources,
                                                 WarpLayout layout, int lane,
                                                 int64_t piece_base, int64_t pieces,
                                                 const EntryStep<Traits>& step,
                                                 const StepPacks<Traits>& packs, int u,
                                                 RowAcc<Traits>& acc) {
  using acc_t = typename Traits::acc_t;
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t piece = layout.piece(lane, piece_base, q);
    if (step.src[u] >= 0 && sources.has_piece(q, piece, pieces)) {
      acc_t widened[Traits::kVec];
      widen_pack(packs[u][q], widened);
#pragma unroll
      for (int i = 0; i < Traits::kVec; ++i) acc[q][i] += step.scale[u] * widened[i];
    }
  }
}

// This lane's share of sum over `range` of values[e] * x[col[e], pieces of
// this lane from piece_base], kUnroll gathered loads in flight, each
// step's column indices and values loaded while the step before is
// gathered (common/gather.cuh). `step` holds the range's first step on
// entry; with kCarry it holds `following`'s first step on return (loaded
// during the range's last step, so the next range's first gathers wait
// for no index load), else it is spent. The lanes of one sub-group must
// call it alike.
template <typename Traits, bool kCarry>
__device__ __forceinline__ void gather_entries(const pygio_spmm_csr_params& p, WarpLayout layout,
                                               int lane, int64_t piece_base,
                                               EntryRange<Traits> range,
                                               EntryRange<Traits> following,
                                               Offset<Traits> stride,
                                               EntryStep<Traits>& step, RowAcc<Traits>& acc) {
  using offset_t = Offset<Traits>;
  constexpr int U = Traits::kUnroll;
  const int64_t pieces = p.width / Traits::kVec;
  const uint64_t row_bytes = x_row_bytes<Traits>(p);

  clear_acc<Traits>(acc);
  if (range.first >= range.end) {
    if (kCarry) load_step<Traits>(p, following.first, following.end, stride, step);
    return;
  }
  const GatherSources<Traits> sources = gather_sources<Traits>(p, layout, lane, piece_base);
  for (offset_t e0 = range.first; e0 < range.end; e0 += stride * U) {
    StepPacks<Traits> packs;
    gather_step<Traits>(sources, layout, lane, piece_base, pieces, row_bytes, step, packs);
    const offset_t e1 = e0 + stride * U;
    EntryStep<Traits> next;
    if constexpr (kCarry) {
      const bool last = e1 >= range.end;
      load_step<Traits>(sources.col, sources.values, last ? following.first : e1,
                        last ? following.end : range.end, stride, next);
    } else {
      load_step<Traits>(sources.col, sources.values, e1, range.end, stride, next);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      accumulate_entry<Traits>(sources, layout, lane, piece_base, pieces, step, packs, u, acc);
    step = next;
  }
}

// This lane's share of sum over entries [begin, end) of values[e] *
// x[col[e], pieces of this lane from piece_base], the warp's sub-groups
// taking interleaved entries, summed over the sub-groups (valid in the
// lanes of sub-group 0); `step` as in gather_entries, for the entries
// [next_begin, next_end) next. Every lane of the warp must call it alike.
template <typename Traits>
__device__ __forceinline__ void warp_gather(const pygio_spmm_csr_params& p, WarpLayout layout,
                                            int lane, int64_t piece_base,
                                            Offset<Traits> begin, Offset<Traits> end,
                                            Offset<Traits> next_begin, Offset<Traits> next_end,
                                            EntryStep<Traits>& step, RowAcc<Traits>& acc) {
  const Offset<Traits> sub = layout.sub_group(lane);
  gather_entries<Traits, Traits::kCarryAcrossRows>(
      p, layout, lane, piece_base, EntryRange<Traits>{begin + sub, end},
      EntryRange<Traits>{next_begin + sub, next_end}, layout.sub_groups(), step, acc);
  // acc's pieces summed as one array (the same shuffles, in one loop over offsets).
  using Flat = typename Traits::acc_t[Traits::kPieces * Traits::kVec];
  sum_over_sub_groups(layout, reinterpret_cast<Flat&>(acc));
}

// The first step of a row's entries [begin, end) as warp_gather takes them.
template <typename Traits>
__device__ __forceinline__ void load_first_step(const pygio_spmm_csr_params& p, WarpLayout layout,
                                                int lane, Offset<Traits> begin,
                                                Offset<Traits> end, EntryStep<Traits>& step) {
  load_step<Traits>(p, begin + layout.sub_group(lane), end, layout.sub_groups(), step);
}

// Y[row, piece] = sums (+ bias), cast to Y's type.
template <typename Traits>
__device__ __forceinline__ void store_row_piece(const pygio_spmm_csr_params& p, int64_t row,
                                                int64_t piece,
                                                typename Traits::acc_t (&sums)[Traits::kVec]) {
  using value_t = typename Traits::value_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ bias = static_cast<const value_t*>(p.bias);
  auto* __restrict__ y = static_cast<typename Traits::out_t*>(p.y);
  const int64_t k = piece * V;
  if (bias != nullptr) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      sums[i] += static_cast<typename Traits::acc_t>(DTypeTraits<value_t>::load(bias[k + i]));
  }
  store_pack<V>(y + row * p.y_row_stride + k, sums);
}

// Y[row] = acc (+ bias) for a one-pass row, from the lanes holding its pieces.
template <typename Traits>
__device__ __forceinline__ void store_row(const pygio_spmm_csr_params& p, WarpLayout layout,
                                          int lane, int64_t row, int64_t pieces,
                                          RowAcc<Traits>& acc) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t piece = layout.piece(lane, 0, q);
    if (piece < pieces) store_row_piece<Traits>(p, row, piece, acc[q]);
  }
}

// Pieces one warp pass covers.
template <typename Traits>
__device__ __forceinline__ int64_t pieces_per_pass(WarpLayout layout) {
  return static_cast<int64_t>(layout.lanes()) * Traits::kPieces;
}

// Sums the entries [begin, end) of a row over all its pieces, pass by pass,
// and hands each of this lane's pieces to epilogue(piece, sums) in the
// lanes of sub-group 0. With Traits::kCarryAcrossRows, `step` holds the
// row's first step (load_first_step) on entry and that of the entries
// [next_begin, next_end) on return (each pass but the last loads the row's
// first step again for the next pass); else each pass loads its own. Every
// lane of the warp must call it alike.
template <typename Traits, typename Epilogue>
__device__ __forceinline__ void gather_row_pieces(const pygio_spmm_csr_params& p,
                                                  WarpLayout layout, int lane,
                                                  Offset<Traits> begin, Offset<Traits> end,
                                                  Offset<Traits> next_begin,
                                                  Offset<Traits> next_end,
                                                  EntryStep<Traits>& step, Epilogue epilogue) {
  const int64_t pieces = p.width / Traits::kVec;
  for (int64_t base = 0; base < pieces; base += pieces_per_pass<Traits>(layout)) {
    const bool last_pass = base + pieces_per_pass<Traits>(layout) >= pieces;
    if (!Traits::kCarryAcrossRows) load_first_step<Traits>(p, layout, lane, begin, end, step);
    RowAcc<Traits> acc;
    warp_gather<Traits>(p, layout, lane, base, begin, end, last_pass ? next_begin : begin,
                        last_pass ? next_end : end, step, acc);
    if (layout.sub_group(lane) != 0) continue;
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) {
      const int64_t piece = layout.piece(lane, base, q);
      if (piece < pieces) epilogue(piece, acc[q]);
    }
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_rows_kernel(const __grid_constant__ pygio_spmm_csr_params p, WarpLayout layout,
                     const HubWorkspace<typename Traits::acc_t> ws) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  using offset_t = Offset<Traits>;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                threadIdx.x / kWarpSize;
  constexpr bool kCarry = Traits::kCarryAcrossRows;
  RowExtents<index_t, kCarry ? 2 : 1> extents(rowptr, p.a.num_rows, row, warps);
  EntryStep<Traits> step;
  if (kCarry)
    load_first_step<Traits>(p, layout, lane, extents.begin, extents.end, step);
  for (; row < p.a.num_rows; row += warps, extents.advance(rowptr, p.a.num_rows, row, warps)) {
    const offset_t begin = extents.begin, end = extents.end;
    // The entries whose first step this row's last step loads.
    const offset_t next_begin = kCarry ? extents.next_begin : 0;
    const offset_t next_end = kCarry ? extents.next_end : 0;
    if (ws.list.hubs != nullptr && end - begin > ws.threshold &&
        register_hub(ws.list, row, end - begin, kHubChunk, lane)) {
      if (kCarry) load_first_step<Traits>(p, layout, lane, next_begin, next_end, step);
      continue;
    }
    gather_row_pieces<Traits>(p, layout, lane, begin, end, next_begin, next_end, step,
                              [&](int64_t piece, acc_t (&sums)[V]) {
                                store_row_piece<Traits>(p, row, piece, sums);
                              });
  }
}

// Narrow rows (layout.lanes() < kWarpSize, one pass over a row's pieces):
// sub-group g of warp w takes rows (w * sub_groups + g) + k * (all
// sub-groups of the grid), each lane summing its row's entries in CSR
// order, so short rows keep every lane loading. The sub-groups run free of
// each other (each its own loop over rows and over entries): stepping them
// together, every row batch waiting for the warp's longest row, measured
// slower (pokec-like D=64 fp32 72% of copy bandwidth against 84%, web-like
// 69% against 82%), and so did a loop over a count of steps in place of
// the loop over entries (73% and 71%). A row's first step loads during the
// row before, in every dtype (rows of a few entries wait mostly on their
// first index load): 16-bit D=64 (bf16 / fp16) on an H200, web-like 56 /
// 57% -> 57 / 59% of copy bandwidth, arxiv-like 36 / 37% -> 37 / 38%,
// roads-like 35 / 37% -> 51 / 50%; no registers spilled.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_rows_grouped_kernel(const __grid_constant__ pygio_spmm_csr_params p, WarpLayout layout,
                             const HubWorkspace<typename Traits::acc_t> ws) {
  using index_t = typename Traits::index_t;
  using offset_t = Offset<Traits>;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int subs = layout.sub_groups();
  const unsigned mask = layout.group_mask(lane);
  const int leader = layout.group_leader(lane);
  const int64_t pieces = p.width / Traits::kVec;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock * subs;
  int64_t row = (static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                 threadIdx.x / kWarpSize) * subs + layout.sub_group(lane);
  RowExtents<index_t, 2> extents(rowptr, p.a.num_rows, row, groups);
  EntryStep<Traits> step;
  load_step<Traits>(p, extents.begin, extents.end, 1, step);
  for (; row < p.a.num_rows; row += groups, extents.advance(rowptr, p.a.num_rows, row, groups)) {
    const offset_t begin = extents.begin, end = extents.end;
    // The entries whose first step this row's last step loads.
    const EntryRange<Traits> following{offset_t(extents.next_begin),
                                       offset_t(extents.next_end)};
    if (ws.list.hubs != nullptr && end - begin > ws.threshold &&
        register_hub(ws.list, row, end - begin, kHubChunk, lane, mask, leader)) {
      load_step<Traits>(p, following.first, following.end, 1, step);
      continue;  // the hub kernels sum and write this row
    }
    RowAcc<Traits> acc;
    gather_entries<Traits, true>(p, layout, lane, 0, EntryRange<Traits>{begin, end}, following, 1,
                                 step, acc);
    store_row<Traits>(p, layout, lane, row, pieces, acc);
  }
}

// Narrow rows (layout.lanes() < kWarpSize, one pass over a row's pieces)
// in batches of layout.lanes() consecutive rows: sub-group g of warp w
// takes batches (w * sub_groups + g) + k * (all sub-groups of the grid).
// A batch's entries lie together in the CSR, so the sub-group walks them as
// one range, kUnroll entries in flight a lane wherever its rows end, and
// writes each row when the walk passes the row's end (a row without
// entries gets its bias, or zeros). Each lane loads one row's extent of the
// batch, a batch ahead. Hub rows are registered by their own lane (as in
// spmm_rows_kernel) and the walk runs over the runs of rows between them.
// The sums run in CSR order, as in a row's own loop.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_row_batches_kernel(const __grid_constant__ pygio_spmm_csr_params p, WarpLayout layout,
                            const HubWorkspace<typename Traits::acc_t> ws) {
  using index_t = typename Traits::index_t;
  using offset_t = Offset<Traits>;
  constexpr int U = Traits::kUnroll;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const unsigned mask = layout.group_mask(lane);
  const int leader = layout.group_leader(lane);
  const int batch_rows = layout.lanes();
  const int64_t pieces = p.width / Traits::kVec;
  const uint64_t row_bytes = x_row_bytes<Traits>(p);
  const int64_t num_rows = p.a.num_rows;
  const int64_t num_batches = (num_rows + batch_rows - 1) / batch_rows;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock *
                         layout.sub_groups();
  int64_t batch = (static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                   threadIdx.x / kWarpSize) * layout.sub_groups() + layout.sub_group(lane);
  // This lane's row of batch b: its entries [begin, end), empty past num_rows.
  const auto load_extent = [&](int64_t b, index_t& begin, index_t& end) {
    const int64_t row = b * batch_rows + layout.lane_in_group(lane);
    begin = rowptr[row < num_rows ? row : num_rows];
    end = rowptr[row + 1 < num_rows ? row + 1 : num_rows];
  };
  index_t next_begin = 0, next_end = 0;
  if (batch < num_batches) load_extent(batch, next_begin, next_end);
  const GatherSources<Traits> sources = gather_sources<Traits>(p, layout, lane, 0);
  for (; batch < num_batches; batch += groups) {
    const index_t my_begin = next_begin, my_end = next_end;
    if (batch + groups < num_batches) load_extent(batch + groups, next_begin, next_end);
    const int64_t first_row = batch * batch_rows;
    const int rows = static_cast<int>(num_rows - first_row < batch_rows ? num_rows - first_row
                                                                         : batch_rows);
    // Rows the hub kernels take (bit i: the batch's row i).
    const bool hub = ws.list.hubs != nullptr && my_end - my_begin > ws.threshold;
    const unsigned lane_bit = 1u << lane;
    const bool taken = hub && register_hub(ws.list, first_row + layout.lane_in_group(lane),
                                           my_end - my_begin, kHubChunk, lane, lane_bit, lane);
    const unsigned hubs = __ballot_sync(mask, taken) >> leader;
    for (int row = 0; row < rows;) {  // of the batch, the one the walk is in
      if (hubs >> row & 1u) {
        ++row;
        continue;
      }
      const unsigned later_hubs = hubs >> row;
      const int run_end = later_hubs == 0 ? rows : row + __ffs(later_hubs) - 1;
      const offset_t stop = __shfl_sync(mask, my_end, leader + run_end - 1);
      offset_t row_end = __shfl_sync(mask, my_end, leader + row);
      offset_t e0 = __shfl_sync(mask, my_begin, leader + row);
      RowAcc<Traits> acc;
      clear_acc<Traits>(acc);
      EntryStep<Traits> step;
      load_step<Traits>(sources.col, sources.values, e0, stop, 1, step);
      for (; e0 < stop; e0 += U) {
        StepPacks<Traits> packs;
        gather_step<Traits>(sources, layout, lane, 0, pieces, row_bytes, step, packs);
        EntryStep<Traits> next;
        load_step<Traits>(sources.col, sources.values, e0 + U, stop, 1, next);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (e0 + u >= stop) break;
          for (; e0 + u >= row_end; row_end = __shfl_sync(mask, my_end, leader + ++row)) {
            store_row<Traits>(p, layout, lane, first_row + row, pieces, acc);
            clear_acc<Traits>(acc);
          }
          accumulate_entry<Traits>(sources, layout, lane, 0, pieces, step, packs, u, acc);
        }
        step = next;
      }
      for (; row < run_end; ++row) {  // the last row with entries, then rows without
        store_row<Traits>(p, layout, lane, first_row + row, pieces, acc);
        clear_acc<Traits>(acc);
      }
    }
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_hub_chunks_kernel(const __grid_constant__ pygio_spmm_csr_params p, WarpLayout layout,
                           const HubWorkspace<typename Traits::acc_t> ws) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  using offset_t = Offset<Traits>;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t num_hubs = hub_count(ws.list);
  const int64_t num_chunks = num_hubs > 0 ? hub_chunk_count(ws.list) : 0;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < num_chunks; chunk += warps) {
    int64_t chunk_begin = 0, chunk_end = 0;
    const int64_t lo = hub_chunk_range(ws.list, num_hubs, rowptr, chunk, kHubChunk, &chunk_begin,
                                       &chunk_end);
    const offset_t begin = chunk_begin, end = chunk_end;
    EntryStep<Traits> step;
    if (Traits::kCarryAcrossRows) load_first_step<Traits>(p, layout, lane, begin, end, step);
    gather_row_pieces<Traits>(p, layout, lane, begin, end, 0, 0, step,
                              [&](int64_t piece, acc_t (&sums)[V]) {
                                atomic_add_pack<V>(ws.sums + lo * p.width + piece * V, sums);
                              });
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_hub_finish_kernel(const __grid_constant__ pygio_spmm_csr_params p,
                           const HubWorkspace<typename Traits::acc_t> ws) {
  using value_t = typename Traits::value_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ bias = static_cast<const value_t*>(p.bias);
  auto* __restrict__ y = static_cast<typename Traits::out_t*>(p.y);
  const int64_t num_hubs = hub_count(ws.list);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                      threadIdx.x / kWarpSize;
       slot < num_hubs; slot += warps) {
    const int64_t row = ws.list.hubs[slot].row;
    for (int64_t k = lane; k < p.width; k += kWarpSize) {
      acc_t v = ws.sums[slot * p.width + k];
      if (bias != nullptr) v += static_cast<acc_t>(DTypeTraits<value_t>::load(bias[k]));
      y[row * p.y_row_stride + k] = DTypeTraits<typename Traits::out_t>::store(v);
    }
  }
}

// acc_out (row stride out_row_stride) += A^T X, in the accumulator type.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_scatter_kernel(const __grid_constant__ pygio_spmm_csr_params p, WarpLayout layout,
                        typename Traits::acc_t* __restrict__ acc_out, int64_t out_row_stride) {
  using scalar_t = typename Traits::scalar_t;
  using value_t = typename Traits::value_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec, P = Traits::kPieces;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ values = static_cast<const value_t*>(p.values);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const int lane = threadIdx.x % kWarpSize;
  const int sub = layout.sub_group(lane), subs = layout.sub_groups();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  const int64_t num_chunks = (p.a.nnz + kScatterChunk - 1) / kScatterChunk;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < num_chunks; chunk += warps) {
    const int64_t first = chunk * kScatterChunk;
    const int64_t last = first + kScatterChunk < p.a.nnz ? first + kScatterChunk : p.a.nnz;
    // The row holding entry `first`: the last row starting at or before it.
    const int64_t lo = last_at_most(p.a.num_rows, first,
                                    [&](int64_t r) { return static_cast<int64_t>(rowptr[r]); });
    for (int64_t base = 0; base < pieces; base += pieces_per_pass<Traits>(layout)) {
      int64_t row = lo, row_end = rowptr[lo + 1];
      for (int64_t e = first + sub; e < last; e += subs) {
        while (e >= row_end) row_end = rowptr[++row + 1];
        const acc_t scale = static_cast<acc_t>(DTypeTraits<value_t>::load(values[e]));
        acc_t* out_row = acc_out + static_cast<int64_t>(col[e]) * out_row_stride;
#pragma unroll
        for (int q = 0; q < P; ++q) {
          const int64_t piece = layout.piece(lane, base, q);
          if (piece >= pieces) continue;
          const Pack<scalar_t, V> pack = load_pack<V>(x + row * p.x_row_stride + piece * V);
          acc_t add[V];
          widen_pack(pack, add);
#pragma unroll
          for (int i = 0; i < V; ++i) add[i] *= scale;
          atomic_add_pack<V>(out_row + piece * V, add);
        }
      }
    }
  }
}

// y[r, k] = acc[r * width + k] in Y's type.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    spmm_cast_kernel(const __grid_constant__ pygio_spmm_csr_params p, int64_t num_out,
                     const typename Traits::acc_t* __restrict__ acc) {
  auto* __restrict__ y = static_cast<typename Traits::out_t*>(p.y);
  const int64_t total = num_out * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.width, k = i - r * p.width;
    y[r * p.y_row_stride + k] = DTypeTraits<typename Traits::out_t>::store(acc[i]);
  }
}

}  // namespace pygio
