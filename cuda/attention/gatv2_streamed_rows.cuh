// GATv2's forward rows kernel where the warp's 32 lanes cover every head of
// an entry with one 16-byte piece each, once (e.g. (2, 64) or (4, 32) fp32,
// (4, 64) 16-bit) or, in 16-bit, twice, two entries at a time (entry
// slots: (2, 64) or (1, 128)), without edge attributes: the same out and
// lse as attention_rows_kernel (attention_forward.cuh), its gathers
// streamed.
//
// attention_rows_kernel gathers a few entries of one row at a time into
// registers and waits for them before the next: on rows of a few entries
// (arxiv-like's 8 on average) every step waits a full memory round trip
// with 1 KB a warp in flight. Here a warp takes a few consecutive rows at
// a time (launch_streamed_rows) and walks their entries as one stream:
// each lane copies its piece of the entries' x_l rows (and of each new
// row's x_r) into shared memory with cp.async, kStreamStages steps ahead
// (a step: an entry of each slot, of one row), across row boundaries, and
// reads them back when their turn comes; nothing in flight holds a
// register. A row's slots take its entries in turns and merge at its end.
//
// Rows above the hub threshold register as in attention_rows_kernel (the
// hub kernels do them); a row a full list refuses is streamed like any
// other. Scores are computed as in every pass (entry_z, score_part, and
// group_sums' shuffles in its order), so the backward recomputes them bit
// for bit. H200, (2, 64) fp32, forward ms (attention_rows_kernel ->
// streamed): arxiv-like 0.41 -> 0.40, pokec-like 6.33 -> 6.07, web-like
// 3.98 -> 3.37, roads-like 0.14 -> 0.12; a standalone prototype without
// hubs, dropout or bias (53 registers, 5 blocks an SM) took the rows of at
// most 256 entries in 0.25 / 4.11 / 1.87 ms against the rows kernel's
// 0.31 / 5.59 / 3.01 (docs/results.md).
#pragma once

#include "../common/async_copy.cuh"
#include "../common/grid.h"
#include "../common/status.h"
#include "attention_forward.cuh"
#include "gatv2_traits.cuh"

namespace pygio {

// Steps in flight a warp; rows a warp takes at a time.
constexpr int kStreamStages = 4;
constexpr int kStreamRowsPerItem = 8;
static_assert(kStreamRowsPerItem < kWarpSize, "an item's row extents fit in the lanes");

// Each warp's shared memory: kStreamStages steps and kStreamXrSlots rows
// of x_r, 16 bytes a lane each. A row's x_r is copied with its first step
// and read when that step comes: at most every step in flight plus the
// row being read hold one.
constexpr int kStreamXrSlots = kStreamStages + 1;
constexpr size_t kStreamWarpBytes = (kStreamStages + kStreamXrSlots) * kWarpSize * 16;

// Lanes a head at least (as a shift): the kernels are built for 8, 16 and
// 32 (heads of at least 32 fp32 or 64 16-bit channels, up to 4 heads).
constexpr int kStreamMinHeadShift = 3;

// Rows of at most this many entries on average, where streaming pays:
// longer rows keep attention_rows_kernel's warps busy on their own (H200,
// (2, 64) fp32, tolokers-like's 44 a row: 0.148 ms, a first streamed
// build 0.227).
constexpr int64_t kStreamMaxMeanEntries = 32;

// Whether the streamed kernel serves a forward of these traits and shape
// over p's graph: one 16-byte piece a lane, no edge path, the warp's 32
// lanes spanning every head of an entry once (one entry slot) or, in
// 16-bit, twice (two slots), in one pass of heads; short rows on average.
// Two slots gained in 16-bit (H200, bf16 (2, 64) forward ms,
// attention_rows_kernel's two slots -> streamed: arxiv-like 0.385 ->
// 0.362, pokec-like 5.24 -> 4.91, web-like 4.09 -> 3.38, roads-like 0.163
// -> 0.142), not in fp32 ((2, 32): pokec-like 3.42 -> 3.61, web-like 2.86
// -> 2.47, roads-like 0.115 -> 0.106, arxiv-like 0.263 -> 0.264).
template <typename Traits, typename P>
inline bool streams_rows(const P& p, const GatShape& s) {
  static_assert(Traits::kOnePiece && !Traits::kEdges,
                "only traits of one piece a lane and no edge path stream their rows");
  constexpr int kMaxSlotShift = sizeof(typename Traits::scalar_t) == 2 ? 1 : 0;
  return s.layout.shift + s.head_shift >= kWarpShift - kMaxSlotShift && s.passes() == 1 &&
         s.layout.shift >= kStreamMinHeadShift &&
         p.a.nnz <= kStreamMaxMeanEntries * p.a.num_rows;
}

// v summed over the 2^kHeadShift lanes of the caller's head: group_sums
// with the layout known at compile time (the same shuffles in the same
// order, unrolled).
template <int kHeadShift>
__device__ __forceinline__ float head_lanes_sum(float v) {
#pragma unroll
  for (int offset = (1 << kHeadShift) / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The items of kStreamRowsPerItem consecutive rows that num_rows make.
__host__ __device__ __forceinline__ int64_t stream_items(int64_t num_rows) {
  return (num_rows + kStreamRowsPerItem - 1) / kStreamRowsPerItem;
}

// A slot counter of a ring of `size`: the next slot.
__device__ __forceinline__ int next_slot(int slot, int size) {
  return slot + 1 == size ? 0 : slot + 1;
}

// Where a stream stands in an item: `row` (in the item; past its rows when
// done) holds entries [pos, end) still to go, the next step's slots taking
// pos, pos + 1, ...; `x_r_slot` takes its x_r.
template <typename index_t>
struct StreamCursor {
  int row;
  int x_r_slot;
  index_t pos, end;
};

// out and lse of the rows that are no hubs, items of kStreamRowsPerItem
// consecutive rows a warp (grid-stride); 2^kHeadShift lanes a head, kSlots
// entry slots (lanes [k * 32 / kSlots, (k + 1) * 32 / kSlots) slot k). At
// most 64 registers (4 blocks an SM; fp32 spills 36 bytes): H200, (2, 64)
// fp32 forward, ms, against ptxas's 79 registers (3 blocks): arxiv-like
// 0.40 / 0.42, pokec-like 6.07 / 5.85, web-like 3.37 / 3.27, roads-like
// 0.12 / 0.12 (attention_rows_kernel: 0.41, 6.33, 3.98, 0.14).
template <typename Traits, int kHeadShift, int kSlots, typename P>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, 4)
    gatv2_streamed_rows_kernel(const __grid_constant__ P p, GatShape s, GatHubs hubs) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  using Piece = Pack<scalar_t, Traits::kVec>;
  constexpr int E = Traits::kElems;
  extern __shared__ uint4 stream_shared[];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int entry_slot = kSlots == 1 ? 0 : lane / (kWarpSize / kSlots);
  Piece* const stages = reinterpret_cast<Piece*>(stream_shared) +
                        warp * (kStreamStages + kStreamXrSlots) * kWarpSize;
  Piece* const x_r_rows = stages + kStreamStages * kWarpSize;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x_l = static_cast<const scalar_t*>(p.x_l);
  const auto* __restrict__ x_r = static_cast<const scalar_t*>(p.x_r);
  const PassHead head = pass_head(s, lane, 0);
  const int64_t channel = piece_channel<Traits>(s, lane, 0);
  const bool loads = head.active && channel >= 0;  // lanes past the heads' end load nothing
  const int64_t piece_offset = head.h * s.channels + (channel >= 0 ? channel : 0);
  float att[E];
  load_att<Traits>(p.att + head.h * s.channels, s, lane, att);
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  const int64_t items = stream_items(p.a.num_rows);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       item < items; item += static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock) {
    const int64_t first_row = item * kStreamRowsPerItem;
    const int rows = static_cast<int>(p.a.num_rows - first_row < kStreamRowsPerItem
                                          ? p.a.num_rows - first_row
                                          : kStreamRowsPerItem);
    // Lane k holds rowptr[first_row + k], k <= rows.
    const index_t extent = lane <= rows ? rowptr[first_row + lane] : index_t{0};
    const auto row_begin = [&](int k) { return __shfl_sync(0xffffffffu, extent, k); };
    const index_t item_end = row_begin(rows);
    unsigned registered = 0;  // bit k: row k went to the hub list

    // The producer's cursor to the next row it walks at or after its row,
    // registering the hubs it passes (a row the list refuses is walked).
    const auto producer_row = [&](StreamCursor<index_t>& c) {
      for (; c.row < rows; ++c.row) {
        const index_t begin = row_begin(c.row), end = row_begin(c.row + 1);
        if (begin == end) continue;
        if (end - begin > threshold &&
            register_hub(hubs.list, first_row + c.row, end - begin, kGatHubChunk, lane)) {
          registered |= 1u << c.row;
          continue;
        }
        c.pos = begin, c.end = end;
        return;
      }
    };
    StreamCursor<index_t> producer{0, 0, 0, 0};
    producer_row(producer);
    bool new_row = true;  // the producer's next entry is its row's first
    int64_t window = -kWarpSize;  // col[window + lane] is loaded (none yet)
    index_t window_col = 0;
    // Starts the copies of the stream's next entry into `stage` (and of its
    // row's x_r where it is the row's first): one group, empty at the end.
    const auto produce = [&](int stage) {
      if (producer.row < rows) {
        if (new_row) {
          if (loads)
            copy_async_16(x_r_rows + producer.x_r_slot * kWarpSize + lane,
                          x_r + (first_row + producer.row) * p.x_r_row_stride + piece_offset);
          new_row = false;
        }
        if (producer.pos + (kSlots - 1) - window >= kWarpSize) {
          window = producer.pos;
          window_col = window + lane < item_end ? col[window + lane] : index_t{0};
        }
        const index_t j = __shfl_sync(0xffffffffu, window_col,
                                      static_cast<int>(producer.pos + entry_slot - window));
        if (loads && (kSlots == 1 || producer.pos + entry_slot < producer.end))
          copy_async_16(stages + stage * kWarpSize + lane,
                        x_l + static_cast<int64_t>(j) * p.x_l_row_stride + piece_offset);
        producer.pos += kSlots;  // past the end by one after an odd row's last step
        if (kSlots == 1 ? producer.pos == producer.end : producer.pos >= producer.end) {
          ++producer.row;
          producer.x_r_slot = next_slot(producer.x_r_slot, kStreamXrSlots);
          producer_row(producer);
          new_row = true;
        }
      }
      commit_copies();
    };

    // The consumer's cursor to the next row it walks at or after its row,
    // writing the empty rows it passes (out = out_bias, lse = -inf).
    const auto consumer_row = [&](StreamCursor<index_t>& c) {
      for (; c.row < rows; ++c.row) {
        const index_t begin = row_begin(c.row), end = row_begin(c.row + 1);
        if (begin == end) {
          SoftmaxState<E> none;
          if (head.active) write_row<Traits>(p, s, lane, first_row + c.row, head.h, none);
          continue;
        }
        if ((registered >> c.row) & 1u) continue;
        c.pos = begin, c.end = end;
        return;
      }
    };
#pragma unroll
    for (int stage = 0; stage < kStreamStages; ++stage) produce(stage);
    StreamCursor<index_t> consumer{0, 0, 0, 0};
    consumer_row(consumer);
    int stage = 0;
    while (consumer.row < rows) {
      SoftmaxState<E> state;
      float xr[E];
      for (index_t step = consumer.pos; step < consumer.end; step += kSlots) {
        const index_t e = step + entry_slot;  // this slot's entry, where it is one
        const bool real = kSlots == 1 || e < consumer.end;
        wait_copies<kStreamStages - 1>();
        RawSlice<Traits> raw;
        if (step == consumer.pos) {  // the row's x_r came with its first step
          if (loads) raw.piece[0] = x_r_rows[consumer.x_r_slot * kWarpSize + lane];
          else raw.clear();
          raw.to_float(xr);
        }
        float xl[E], z[E];
        if (loads && real) raw.piece[0] = stages[stage * kWarpSize + lane];
        else raw.clear();
        raw.to_float(xl);
        produce(stage);  // the step is in registers: its stage takes the next
        stage = next_slot(stage, kStreamStages);
        const float no_edge[E] = {};
        entry_z(xl, xr, false, no_edge, z);
        const float score = head_lanes_sum<kHeadShift>(score_part(z, att, p.negative_slope));
        if (real) {
          if (score > state.m) state.raise_max(score);
          state.add(softmax_exp(score - state.m),
                    dropout_factor(p.seed, static_cast<int64_t>(e), head.h, p.dropout_p), xl);
        }
      }
      if constexpr (kSlots > 1) state.merge_slots(s);
      if (head.active) write_row<Traits>(p, s, lane, first_row + consumer.row, head.h, state);
      ++consumer.row;
      consumer.x_r_slot = next_slot(consumer.x_r_slot, kStreamXrSlots);
      consumer_row(consumer);
    }
    wait_copies<0>();  // the last steps' empty groups
  }
}

// Launches gatv2_streamed_rows_kernel (streams_rows must hold): one wave
// of its resident blocks, each warp taking items of kStreamRowsPerItem
// rows in turn.
template <typename Traits, typename P>
int launch_streamed_rows(const P& p, const GatShape& s, const GatHubs& hubs,
                         cudaStream_t stream) {
  auto kernel = s.layout.shift == 3   ? gatv2_streamed_rows_kernel<Traits, 3, 1, P>
                : s.layout.shift == 4 ? gatv2_streamed_rows_kernel<Traits, 4, 1, P>
                                      : gatv2_streamed_rows_kernel<Traits, 5, 1, P>;
  if constexpr (sizeof(typename Traits::scalar_t) == 2) {
    if (s.layout.shift + s.head_shift < kWarpShift)  // two entry slots
      kernel = s.layout.shift == 3 ? gatv2_streamed_rows_kernel<Traits, 3, 2, P>
                                   : gatv2_streamed_rows_kernel<Traits, 4, 2, P>;
  }
  constexpr size_t shared = kStreamWarpBytes * Traits::kWarpsPerBlock;
  static_assert(shared <= 48 * 1024, "the default dynamic shared memory limit");
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(kernel, stream_items(p.a.num_rows), Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid, shared));
  kernel<<<grid, Traits::kThreadsPerBlock, shared, stream>>>(p, s, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

}  // namespace pygio
