// A warp's walk over the entries of consecutive CSR rows as one stream,
// for GATv2's streamed rows kernels (gatv2_streamed_rows.cuh: the forward;
// gatv2_streamed_backward.cuh: the backward's two passes).
//
// A row walk that gathers a few entries into registers and waits for them
// before the next waits a full memory round trip every step on rows of a
// few entries (arxiv-like's 8 on average). Here a warp takes
// kStreamRowsPerItem consecutive rows at a time and walks their entries as
// one stream: each lane copies its 16-byte pieces of the entries' gathered
// rows (and of each new row's own slices) into shared memory with cp.async,
// kStages steps ahead (a step: an entry of each slot, of one row), across
// row boundaries, and reads them back when their turn comes; nothing in
// flight holds a register. A row's slots take its entries in turns.
#pragma once

#include <type_traits>

#include "../common/async_copy.cuh"
#include "../common/grid.h"
#include "../common/hubs.cuh"
#include "../common/status.h"
#include "gatv2_traits.cuh"

namespace pygio {

// Rows a warp takes at a time.
constexpr int kStreamRowsPerItem = 8;
static_assert(kStreamRowsPerItem < kWarpSize, "an item's row extents fit in the lanes");

// Lanes a head at least (as a shift): the kernels are built for 8, 16 and
// 32 (heads of at least 32 fp32 or 64 16-bit channels, up to 4 heads).
constexpr int kStreamMinHeadShift = 3;

// Rows of at most this many entries on average, where streaming pays:
// longer rows keep the register walks' warps busy on their own (H200,
// (2, 64) fp32 forward, tolokers-like's 44 a row: 0.148 ms, a first
// streamed build 0.227).
constexpr int64_t kStreamMaxMeanEntries = 32;

// Whether the streamed kernels are built for these traits: one 16-byte
// piece a lane, no edge path (a launcher's `if constexpr` before it asks
// streams_shape or streams_rows).
template <typename Traits>
constexpr bool kStreamTraits = Traits::kOnePiece && !Traits::kEdges;

// Whether the streamed rows kernels of these traits serve shape s: one
// 16-byte piece a lane, no edge path, the warp's 32 lanes spanning every
// head of an entry once (one entry slot) or, in 16-bit, twice (two
// slots), in one pass of heads (short_rows: and the walked rows are short
// on average; streams_rows: both, for a's rows). Two slots gained in
// 16-bit (H200, bf16 (2, 64) forward ms, the rows kernel's two slots ->
// streamed: arxiv-like 0.385 -> 0.362, pokec-like 5.24 -> 4.91, web-like
// 4.09 -> 3.38, roads-like 0.163 -> 0.142), not in fp32 ((2, 32):
// pokec-like 3.42 -> 3.61, web-like 2.86 -> 2.47, roads-like 0.115 ->
// 0.106, arxiv-like 0.263 -> 0.264).
template <typename Traits>
inline bool streams_shape(const GatShape& s) {
  static_assert(kStreamTraits<Traits>,
                "only traits of one piece a lane and no edge path stream their rows");
  constexpr int kMaxSlotShift = sizeof(typename Traits::scalar_t) == 2 ? 1 : 0;
  return s.layout.shift + s.head_shift >= kWarpShift - kMaxSlotShift && s.passes() == 1 &&
         s.layout.shift >= kStreamMinHeadShift;
}
inline bool short_rows(const pygio_csr& a) { return a.nnz <= kStreamMaxMeanEntries * a.num_rows; }
template <typename Traits, typename P>
inline bool streams_rows(const P& p, const GatShape& s) {
  return streams_shape<Traits>(s) && short_rows(p.a);
}

// The entry slots of a streamed shape (streams_shape holds): two where the
// heads of an entry span half the warp.
__host__ __device__ inline int stream_slots(const GatShape& s) {
  return s.layout.shift + s.head_shift < kWarpShift ? 2 : 1;
}

// A lane of a streamed kernel (streams_shape: one pass of heads, one
// 16-byte piece a lane): its head, the offset of its piece in a row of
// every table, whether it copies (its head and piece exist: stream_rows'
// `loads`), whether it writes its head's results (the first slot's lanes),
// and its slice of the head's attention vector.
template <typename Traits>
struct StreamLane {
  int index;  // in the warp
  PassHead head;
  int64_t piece_offset;
  bool loads, writes;
  float att[Traits::kElems];

  __device__ __forceinline__ StreamLane(const GatShape& s, const float* __restrict__ att_all)
      : index(threadIdx.x % kWarpSize), head(pass_head(s, index, 0)) {
    const int64_t channel = piece_channel<Traits>(s, index, 0);
    piece_offset = head.h * s.channels + (channel >= 0 ? channel : 0);
    loads = head.active && channel >= 0;
    writes = head.active && s.slot(index) == 0;
    load_att<Traits>(att_all + head.h * s.channels, s, index, att);
  }
};

// Each v[k] summed over the 2^kHeadShift lanes of the caller's head:
// group_sums with the layout known at compile time (the same shuffles in
// the same order, unrolled).
template <int kHeadShift, int N>
__device__ __forceinline__ void head_lanes_sums(float (&v)[N]) {
#pragma unroll
  for (int offset = (1 << kHeadShift) / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
  }
}
template <int kHeadShift>
__device__ __forceinline__ float head_lanes_sum(float v) {
  float sums[1] = {v};
  head_lanes_sums<kHeadShift>(sums);
  return sums[0];
}

// The items of kStreamRowsPerItem consecutive rows that num_rows make.
__host__ __device__ __forceinline__ int64_t stream_items(int64_t num_rows) {
  return (num_rows + kStreamRowsPerItem - 1) / kStreamRowsPerItem;
}

// What a stream copies and how far ahead: kStages steps in flight, each
// entry's kEntryTables gathered slices (16 bytes a lane) and kEntryScalars
// floats a lane, each row's kTables slices and, with kScalar, one float a
// lane. A warp's shared memory holds kStages steps' entries and kStages +
// 1 rows' slices and scalars: a row's are copied with its first step and
// read when that step comes, so at most every step in flight plus the row
// being read hold one. In order: the steps' pieces, the rows' pieces, the
// rows' scalars, the steps' scalars.
template <int kStages_, int kTables_, bool kScalar_, int kEntryTables_ = 1,
          int kEntryScalars_ = 0>
struct StreamLayout {
  static constexpr int kStages = kStages_;
  static constexpr int kTables = kTables_;
  static constexpr bool kScalar = kScalar_;
  static constexpr int kEntryTables = kEntryTables_;
  static constexpr int kEntryScalars = kEntryScalars_;
  static constexpr int kRowSlots = kStages + 1;
  static constexpr size_t kPieceBytes = 16;
  static constexpr size_t kWarpBytes =
      (kStages * kEntryTables + kRowSlots * kTables) * kWarpSize * kPieceBytes +
      ((kScalar ? kRowSlots : 0) + kStages * kEntryScalars) * kWarpSize * sizeof(float);
};

// stream_rows' callable for a table a kernel does not read (never called
// where Layout has no such table).
template <typename T>
struct NoStreamTable {
  template <typename... Args>
  __device__ const T* operator()(Args...) const {
    return nullptr;
  }
};

// A slot counter of a ring of `size`: the next slot.
__device__ __forceinline__ int next_slot(int slot, int size) {
  return slot + 1 == size ? 0 : slot + 1;
}

// Where a stream stands in an item: `row` (in the item; past its rows when
// done) holds entries [pos, end) still to go, the next step's slots taking
// pos, pos + 1, ...; `row_slot` takes its slices.
template <typename index_t>
struct StreamCursor {
  int row;
  int row_slot;
  index_t pos, end;
};

// Walks the rows of a that are no hubs, items of kStreamRowsPerItem
// consecutive rows a warp (grid-stride; every lane of the warp makes the
// same calls, so the calls may shuffle), as Layout says. kSlots entry
// slots: lanes [k * 32 / kSlots, (k + 1) * 32 / kSlots) take slot k's
// entries. For each entry j = col[e], each lane copies the 16 bytes at
// piece_offset of row j of `gathered` (x_l; the source pass's x_r) and of
// entry_slice(t, j) for the entry tables t >= 1 (the source pass's
// grad_out), where `loads` (else it reads zeros), and the floats at
// entry_scalar(k, j) (the source pass's lse and G of the lane's head).
// Besides its entries, a row brings kTables slices, the lane's 16 bytes at
// row_slice(t, row) + piece_offset (where `loads`; x_r, the destination
// pass's grad_out, the source pass's x_l), and with kScalar the float at
// row_scalar(row) (the destination pass's lse of the lane's head); the
// callables read their tables from the kernel's parameters (with them,
// and empty and hub rows passed apart, the fp32 forward took 5.90 ms on
// pokec-like (2, 64) where a struct of the tables' pointers and strides
// took 6.05; H200). Each row walked has a fresh State (default-initialized:
// its members' initializers; its lifetime the row's walk); for each row
// of the item, in order:
//  - empty(row) for a row without entries, and hub(row) for a row above
//    `threshold` entries that went to `list` (a row the list refuses is
//    walked);
//  - begin(state, slices, scalar) with the row's kTables slices (fp32,
//    float[kTables][kElems]) and its scalar (0 without one);
//  - for each step of the caller's slot, entry(state, slice, e, real)
//    with one entry table, or entry(state, slices, scalars, e, real) with
//    more or with scalars (the slices in fp32, float[kEntryTables][kElems],
//    widened before the next copies start: 16-bit forwards and backwards
//    1-2% faster than widening after; the scalars float[kEntryScalars]),
//    e the entry's position in a, real false past the row's end (an odd
//    row's last step in the second slot; the slices and scalars are zeros
//    then);
//  - end(state, row).
// The caller's dynamic shared memory holds Layout's kWarpBytes for each of
// the block's warps, from its start.
template <typename Traits, int kSlots, typename Layout, typename State, typename RowSlice,
          typename RowScalar, typename EntrySlice, typename EntryScalar, typename Empty,
          typename Hub, typename Begin, typename Entry, typename End>
__device__ __forceinline__ void stream_rows(
    const pygio_csr& a, const typename Traits::scalar_t* __restrict__ gathered,
    int64_t gathered_row_stride, RowSlice row_slice, RowScalar row_scalar,
    EntrySlice entry_slice, EntryScalar entry_scalar, const HubList& list, int64_t threshold,
    int64_t piece_offset, bool loads, Empty empty, Hub hub, Begin begin, Entry entry, End end) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  using Piece = Pack<scalar_t, Traits::kVec>;
  constexpr int kStages = Layout::kStages, kTables = Layout::kTables;
  constexpr bool kScalar = Layout::kScalar;
  constexpr int kEntryTables = Layout::kEntryTables, kEntryScalars = Layout::kEntryScalars;
  constexpr int E = Traits::kElems;
  static_assert(sizeof(Piece) == Layout::kPieceBytes, "a lane copies one 16-byte piece");
  static_assert(kEntryTables >= 1, "an entry gathers at least one row");
  extern __shared__ uint4 stream_shared[];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int entry_slot = kSlots == 1 ? 0 : lane / (kWarpSize / kSlots);
  char* const warp_shared = reinterpret_cast<char*>(stream_shared) + warp * Layout::kWarpBytes;
  Piece* const stages = reinterpret_cast<Piece*>(warp_shared);  // [stage][entry table][lane]
  Piece* const row_pieces = stages + kStages * kEntryTables * kWarpSize;  // [row slot][table][lane]
  float* const row_scalars =
      reinterpret_cast<float*>(row_pieces + Layout::kRowSlots * kTables * kWarpSize);
  float* const entry_scalars =  // [stage][scalar][lane]
      row_scalars + (kScalar ? Layout::kRowSlots * kWarpSize : 0);
  const auto* __restrict__ rowptr = static_cast<const index_t*>(a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(a.col);
  const int64_t items = stream_items(a.num_rows);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       item < items; item += static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock) {
    const int64_t first_row = item * kStreamRowsPerItem;
    const int rows = static_cast<int>(a.num_rows - first_row < kStreamRowsPerItem
                                          ? a.num_rows - first_row
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
        const index_t b = row_begin(c.row), e = row_begin(c.row + 1);
        if (b == e) continue;
        if (e - b > threshold &&
            register_hub(list, first_row + c.row, e - b, kGatHubChunk, lane)) {
          registered |= 1u << c.row;
          continue;
        }
        c.pos = b, c.end = e;
        return;
      }
    };
    StreamCursor<index_t> producer{0, 0, 0, 0};
    producer_row(producer);
    bool new_row = true;  // the producer's next entry is its row's first
    int64_t window = -kWarpSize;  // col[window + lane] is loaded (none yet)
    index_t window_col = 0;
    // Starts the copies of the stream's next entry into `stage` (and of its
    // row's slices where it is the row's first): one group, empty at the end.
    const auto produce = [&](int stage) {
      if (producer.row < rows) {
        if (new_row) {
          const int64_t row = first_row + producer.row;
          if (loads) {
#pragma unroll
            for (int t = 0; t < kTables; ++t)
              copy_async_16(row_pieces + (producer.row_slot * kTables + t) * kWarpSize + lane,
                            row_slice(t, row) + piece_offset);
          }
          if constexpr (kScalar)
            copy_async_4(row_scalars + producer.row_slot * kWarpSize + lane, row_scalar(row));
          new_row = false;
        }
        if (producer.pos + (kSlots - 1) - window >= kWarpSize) {
          window = producer.pos;
          window_col = window + lane < item_end ? col[window + lane] : index_t{0};
        }
        const index_t j = __shfl_sync(0xffffffffu, window_col,
                                      static_cast<int>(producer.pos + entry_slot - window));
        const bool real = kSlots == 1 || producer.pos + entry_slot < producer.end;
        if (loads && real) {
          copy_async_16(stages + stage * kEntryTables * kWarpSize + lane,
                        gathered + static_cast<int64_t>(j) * gathered_row_stride + piece_offset);
#pragma unroll
          for (int t = 1; t < kEntryTables; ++t)
            copy_async_16(stages + (stage * kEntryTables + t) * kWarpSize + lane,
                          entry_slice(t, j) + piece_offset);
        }
        if (real) {
#pragma unroll
          for (int k = 0; k < kEntryScalars; ++k)
            copy_async_4(entry_scalars + (stage * kEntryScalars + k) * kWarpSize + lane,
                         entry_scalar(k, j));
        }
        producer.pos += kSlots;  // past the end by one after an odd row's last step
        if (kSlots == 1 ? producer.pos == producer.end : producer.pos >= producer.end) {
          ++producer.row;
          producer.row_slot = next_slot(producer.row_slot, Layout::kRowSlots);
          producer_row(producer);
          new_row = true;
        }
      }
      commit_copies();
    };

    // The consumer's cursor to the next row it walks at or after its row,
    // passing the empty rows (empty(row)) and the registered ones (hub(row)).
    const auto consumer_row = [&](StreamCursor<index_t>& c) {
      for (; c.row < rows; ++c.row) {
        const index_t b = row_begin(c.row), e = row_begin(c.row + 1);
        if (b == e) {
          empty(first_row + c.row);
          continue;
        }
        if ((registered >> c.row) & 1u) {
          hub(first_row + c.row);
          continue;
        }
        c.pos = b, c.end = e;
        return;
      }
    };
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) produce(stage);
    StreamCursor<index_t> consumer{0, 0, 0, 0};
    consumer_row(consumer);
    int stage = 0;
    while (consumer.row < rows) {
      State state;
      for (index_t step = consumer.pos; step < consumer.end; step += kSlots) {
        const index_t e = step + entry_slot;  // this slot's entry, where it is one
        const bool real = kSlots == 1 || e < consumer.end;
        wait_copies<kStages - 1>();
        RawSlice<Traits> raw;
        if (step == consumer.pos) {  // the row's slices came with its first step
          float slices[kTables][E];
#pragma unroll
          for (int t = 0; t < kTables; ++t) {
            if (loads) raw.piece[0] = row_pieces[(consumer.row_slot * kTables + t) * kWarpSize +
                                                 lane];
            else raw.clear();
            raw.to_float(slices[t]);
          }
          begin(state, slices, kScalar ? row_scalars[consumer.row_slot * kWarpSize + lane] : 0.f);
        }
        float slices[kEntryTables][E];
#pragma unroll
        for (int t = 0; t < kEntryTables; ++t) {
          if (loads && real) raw.piece[0] = stages[(stage * kEntryTables + t) * kWarpSize + lane];
          else raw.clear();
          raw.to_float(slices[t]);
        }
        float scalars[kEntryScalars > 0 ? kEntryScalars : 1];
#pragma unroll
        for (int k = 0; k < kEntryScalars; ++k)
          scalars[k] = real ? entry_scalars[(stage * kEntryScalars + k) * kWarpSize + lane] : 0.f;
        produce(stage);  // the step is in registers: its stage takes the next
        stage = next_slot(stage, kStages);
        if constexpr (kEntryTables == 1 && kEntryScalars == 0)
          entry(state, slices[0], static_cast<int64_t>(e), real);
        else
          entry(state, slices, scalars, static_cast<int64_t>(e), real);
      }
      end(state, first_row + consumer.row);
      ++consumer.row;
      consumer.row_slot = next_slot(consumer.row_slot, Layout::kRowSlots);
      consumer_row(consumer);
    }
    wait_copies<0>();  // the last steps' empty groups
  }
}

// The streamed rows kernel of Traits for shape s (streams_shape holds):
// select(head shift, slots), both std::integral_constant, names the
// instantiation.
template <typename Traits, typename Select>
auto stream_kernel(const GatShape& s, Select select) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Shift3 = std::integral_constant<int, 3>;
  using Shift4 = std::integral_constant<int, 4>;
  using Shift5 = std::integral_constant<int, 5>;
  auto kernel = s.layout.shift == 3   ? select(Shift3{}, One{})
                : s.layout.shift == 4 ? select(Shift4{}, One{})
                                      : select(Shift5{}, One{});
  if constexpr (sizeof(typename Traits::scalar_t) == 2) {
    if (stream_slots(s) == 2)
      kernel = s.layout.shift == 3 ? select(Shift3{}, Two{}) : select(Shift4{}, Two{});
  }
  return kernel;
}

// A block's dynamic shared memory for a stream of Layout (its warps'),
// and whether `extra` bytes more (after it) stay within the default limit.
template <typename Traits, typename Layout>
constexpr size_t stream_block_bytes() {
  return Layout::kWarpBytes * Traits::kWarpsPerBlock;
}
constexpr size_t kStreamSharedLimit = 48 * 1024;
template <typename Traits, typename Layout>
bool stream_fits(size_t extra) {
  return stream_block_bytes<Traits, Layout>() + extra <= kStreamSharedLimit;
}

// Launches kernel (a streamed rows kernel of Traits over a's rows, Layout's
// kWarpBytes a warp and `extra_shared` bytes a block after them): one wave
// of its resident blocks, each warp taking items of kStreamRowsPerItem rows
// in turn.
template <typename Traits, typename Layout, typename Kernel, typename... Args>
int launch_stream(Kernel kernel, const pygio_csr& a, size_t extra_shared, int device,
                  cudaStream_t stream, const Args&... args) {
  static_assert(stream_block_bytes<Traits, Layout>() <= kStreamSharedLimit,
                "the default dynamic shared memory limit");
  PYGIO_CHECK_ARG((stream_fits<Traits, Layout>(extra_shared)),
                  "pyg_ioaware: a streamed kernel's shared memory exceeds 48 KB");
  const size_t shared = stream_block_bytes<Traits, Layout>() + extra_shared;
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(kernel, stream_items(a.num_rows), Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, device, &grid, shared));
  kernel<<<grid, Traits::kThreadsPerBlock, shared, stream>>>(args...);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

}  // namespace pygio
