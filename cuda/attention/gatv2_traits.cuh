// What the GATv2 kernels share: the compile-time shape of a lane's slice of
// one head's channels, slice loads and stores, the walk over a row's
// entries, the score of an entry, reductions over lanes and the
// online-softmax state.
//
// A warp walks one row at a time, a pass of heads at a time. Groups of
// `lanes` lanes (WarpLayout) span one head's channels, each lane holding
// kPieces pieces of kVec consecutive channels (channel (q * lanes + lane) *
// kVec + i of piece q). The warp's 32 / lanes groups split into
// heads_per_pass() heads (group g takes head pass_start + g %
// heads_per_pass()) times slots() entry slots, each slot taking kUnroll
// interleaved entries per step; column indices come 32 at a time, one load
// per lane, handed out by shuffles. Slots are merged with shuffles at the
// end of the pass.
#pragma once

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "../common/dropout.cuh"
#include "../common/gather.cuh"
#include "../common/hubs.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"
#include "pyg_ioaware.h"

namespace pygio {

template <typename scalar_t_, typename index_t_, int kVec_, int kPieces_, bool kEdges_ = true>
struct GatTraits {
  using scalar_t = scalar_t_;  // x_l, x_r, edge, out and the gradients
  using index_t = index_t_;    // rowptr, col (and perm_t)
  static constexpr int kVec = kVec_;        // channels per load: 16 bytes, or 1
  static constexpr int kPieces = kPieces_;  // kVec-wide pieces of a head per lane
  // Whether the kernels take edge attributes (where p.edge is given). The
  // dispatch binds false for calls without them up to each entry's
  // kNoEdgePieces pieces a lane (gatv2::dispatch): a kernel with an edge
  // path pays for it on every entry even when p.edge is NULL (its
  // predicated adds, the edge slices' widening and registers: GATv2's
  // 16-bit forward step took 390 instructions for four entries with it,
  // 272 without).
  static constexpr bool kEdges = kEdges_;
  static constexpr int kElems = kVec * kPieces;  // channels a lane holds
  static constexpr int kRawWords = (kElems * sizeof(scalar_t) + 3) / 4;  // registers per slice
  // Entries a slot keeps in flight: 8 gathered registers a lane or fewer
  // (one gathered row per entry; the source pass gathers two and takes
  // half). More left ptxas at 120-170 registers (8-16 warps an SM) for
  // the common head sizes; these are the first knobs to time on a GPU.
  static constexpr int kUnroll = kRawWords <= 2 ? 4 : (kRawWords <= 4 ? 2 : 1);
  static constexpr int kSourceUnroll = kUnroll > 1 ? kUnroll / 2 : 1;
  static constexpr int kWarpsPerBlock = 8;
  // Whether a lane holds one vector piece of a head (the common head
  // sizes: up to 128 channels in fp32, 256 in 16-bit).
  static constexpr bool kOnePiece = kPieces == 1 && kVec > 1;
  // Blocks an SM holds at least in the backward rows and sources kernels
  // and their hub-chunk kernels (0: ptxas's choice): with one piece a
  // lane, 4 in fp32 and 3 in 16-bit.
  // ptxas then keeps 64 or 80 registers, spilling up to 256 bytes, for 32
  // or 24 warps an SM instead of 16-24 (H200, pokec-like, backward
  // kernels: GATv2 (2, 64) fp32 28.9 -> 24.5 ms, bf16 24.3 -> 22.6 ms;
  // transformer (4, 128) fp32 105.2 -> 95.9 ms, bf16 108.0 -> 85.4 ms;
  // 4 blocks in 16-bit were slower).
  static constexpr int kBackwardMinBlocks = !kOnePiece ? 0 : sizeof(scalar_t) == 4 ? 4 : 3;
  static constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;

  static_assert(sizeof(scalar_t) * kVec == 16 || kVec == 1, "16-byte pieces or single channels");
  static_assert(kElems <= 32, "a lane holds at most 32 channels");
  static_assert(sizeof(index_t) == 4 || sizeof(index_t) == 8, "index_t is int32 or int64");
};

// Whether a kernel of Traits reads the edge attributes of params p.
template <typename Traits, typename P>
__device__ __forceinline__ bool has_edges(const P& p) {
  return Traits::kEdges && p.edge != nullptr;
}

// Entries of a hub row per chunk of the hub kernels (forward and backward).
constexpr int kGatHubChunk = 256;

// The hub list of one backward pass and its fp32 accumulators (zeroed
// before): a member's per-hub rows of heads * channels (GATv2: A and B in
// the destination pass, grad_x_l in the source pass; the transformer:
// grad_q, then grad_k and grad_v).
struct GatGradHubs {
  HubList list;
  const int64_t* degree;  // device scalar (NULL: no split)
  float* acc;
};

// body(slot, row, lane) for each registered hub of `hubs`, a warp per hub
// (grid-stride over the hub slots); row is the hub's row.
template <typename Body>
__device__ __forceinline__ void for_each_hub_warp(const GatGradHubs& hubs, Body&& body) {
  const int64_t num_hubs = hub_count(hubs.list);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarpSize);
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) +
                      threadIdx.x / kWarpSize;
       slot < num_hubs; slot += warps)
    body(slot, hubs.list.hubs[slot].row, lane);
}

// One output of attention_hub_rows_finish_kernel: [rows, width] with rows
// `row_stride` elements apart.
template <typename scalar_t>
struct HubRowsOutput {
  scalar_t* data;
  int64_t row_stride;
};

// out_n[row] = acc[slot, n] (cast) for each registered hub of a pass and
// each of its `count` accumulator rows of `width`: a warp per hub.
template <typename scalar_t>
__global__ void attention_hub_rows_finish_kernel(GatGradHubs hubs, int64_t width, int count,
                                                 HubRowsOutput<scalar_t> out0,
                                                 HubRowsOutput<scalar_t> out1) {
  for_each_hub_warp(hubs, [&](int64_t slot, int64_t row, int lane) {
    for (int n = 0; n < count; ++n) {
      const HubRowsOutput<scalar_t>& out = n == 0 ? out0 : out1;
      const float* acc = hubs.acc + (slot * count + n) * width;
      for (int64_t k = lane; k < width; k += kWarpSize)
        out.data[row * out.row_stride + k] = DTypeTraits<scalar_t>::store(acc[k]);
    }
  });
}

// The runtime shape every kernel needs besides its traits.
struct GatShape {
  WarpLayout layout;  // lanes per group (one head)
  int head_shift;     // log2(heads per pass)
  int64_t heads;
  int64_t channels;
  __host__ __device__ int64_t width() const { return heads * channels; }
  __host__ __device__ int heads_per_pass() const { return 1 << head_shift; }
  __device__ int head_in_pass(int lane) const {
    return layout.sub_group(lane) & ((1 << head_shift) - 1);
  }
  __device__ int slots() const { return 1 << slot_shift(); }
  // log2(slots): entry counts divide by slots with a shift.
  __device__ int slot_shift() const { return kWarpShift - layout.shift - head_shift; }
  __device__ int slot(int lane) const { return layout.sub_group(lane) >> head_shift; }
  // Shuffle offsets between the slots of one head: first_slot_offset() << k.
  __device__ int first_slot_offset() const { return layout.lanes() << head_shift; }
  __host__ __device__ int64_t passes() const {
    return (heads + heads_per_pass() - 1) >> head_shift;
  }
};

// The head the caller's group takes in the pass starting at head h0
// (clamped to the last head: a group past it computes but must not write).
struct PassHead {
  int64_t h;
  bool active;
};
__device__ __forceinline__ PassHead pass_head(const GatShape& s, int lane, int64_t h0) {
  const int64_t h = h0 + s.head_in_pass(lane);
  return PassHead{h < s.heads ? h : s.heads - 1, h < s.heads};
}

// Whether for_each_hub_chunk gives its items to blocks: where a warp per
// item would leave more than half the grid's warps idle (few hubs:
// arxiv-like's 933 hub rows hold 30% of its entries, a dozen warps an SM
// walking 256 entries each). The same answer in every block of a launch
// once the registering kernel has finished.
template <int kWarpsPerBlock>
__device__ __forceinline__ bool hub_items_by_block(const HubList& list, const GatShape& s) {
  return hub_chunk_count(list) * s.passes() * 2 <=
         static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
}

// Calls work(chunk, slot, head, begin, end) for every (registered hub chunk,
// pass of heads) of `list` over the rows of `rowptr`: `head` the caller's
// head of the pass, [begin, end) entries of the hub in `slot`. A warp per
// item (grid-stride), or with by_block (hub_items_by_block) a block per
// item, each warp taking an equal part of the chunk's entries (some none)
// and every warp of the block making the same calls, so work may
// synchronize the block. Chunks counted for rows a full list refused are
// empty and skipped. Every lane of a warp makes the same calls. The grid:
// a block per item at most.
template <int kWarpsPerBlock, typename index_t, typename Work>
__device__ __forceinline__ void for_each_hub_chunk(const HubList& list,
                                                   const index_t* __restrict__ rowptr,
                                                   const GatShape& s, int lane, bool by_block,
                                                   Work work) {
  const int64_t num_hubs = hub_count(list);
  if (num_hubs == 0) return;
  const int64_t items = hub_chunk_count(list) * s.passes();
  const int warp = threadIdx.x / kWarpSize;
  const int parts = by_block ? kWarpsPerBlock : 1, part = by_block ? warp : 0;
  const int64_t first_item =
      by_block ? blockIdx.x : static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const int64_t stride = by_block ? gridDim.x : static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = first_item; item < items; item += stride) {
    const int64_t chunk = item / s.passes();
    const PassHead head = pass_head(s, lane, (item % s.passes()) << s.head_shift);
    int64_t begin, end;
    const int64_t slot =
        hub_chunk_range(list, num_hubs, rowptr, chunk, kGatHubChunk, &begin, &end);
    if (begin == end) continue;  // the same for every warp of the item
    const int64_t size = (end - begin + parts - 1) / parts;
    const int64_t first = begin + part * size < end ? begin + part * size : end;
    work(chunk, slot, head, first, first + size < end ? first + size : end);
  }
}

// The channel of element 0 of piece q of `lane`, or -1 past the head's end.
template <typename Traits>
__device__ __forceinline__ int64_t piece_channel(const GatShape& s, int lane, int q) {
  const int64_t c = (static_cast<int64_t>(q) * s.layout.lanes() + s.layout.lane_in_group(lane)) *
                    Traits::kVec;
  return c < s.channels ? c : -1;
}

// A lane's slice of one head row as loaded (the storage type): in flight
// it costs kRawWords registers; to_float widens it where it is used.
template <typename Traits>
struct RawSlice {
  using scalar_t = typename Traits::scalar_t;
  Pack<scalar_t, Traits::kVec> piece[Traits::kPieces];

  // The slice of the head row at `head_row` (0 past the head's end).
  __device__ __forceinline__ void load(const scalar_t* __restrict__ head_row, const GatShape& s,
                                       int lane) {
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) {
      const int64_t c = piece_channel<Traits>(s, lane, q);
      if (c >= 0) piece[q] = load_pack<Traits::kVec>(head_row + c);
      else clear(q);
    }
  }
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) clear(q);
  }
  __device__ __forceinline__ void clear(int q) {
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) piece[q].v[i] = DTypeTraits<scalar_t>::store(0.f);
  }
  __device__ __forceinline__ void to_float(float (&v)[Traits::kElems]) const {
#pragma unroll
    for (int q = 0; q < Traits::kPieces; ++q) {
      float widened[Traits::kVec];
      widen_pack(piece[q], widened);
#pragma unroll
      for (int i = 0; i < Traits::kVec; ++i) v[q * Traits::kVec + i] = widened[i];
    }
  }
};

// v = the lane's slice of the head row at `head_row` (fp32; 0 past the end).
template <typename Traits, typename T>
__device__ __forceinline__ void load_slice(const T* __restrict__ head_row, const GatShape& s,
                                           int lane, float (&v)[Traits::kElems]) {
  RawSlice<Traits> raw;
  raw.load(head_row, s, lane);
  raw.to_float(v);
}

// att is fp32 whatever the features are: loaded one element at a time
// (once per row and head, from L1).
template <typename Traits>
__device__ __forceinline__ void load_att(const float* __restrict__ head_att, const GatShape& s,
                                         int lane, float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) v[q * Traits::kVec + i] = c >= 0 ? head_att[c + i] : 0.f;
  }
}

// The lane's slice of v stored at `head_row` (converted to T).
template <typename Traits, typename T>
__device__ __forceinline__ void store_slice(T* __restrict__ head_row, const GatShape& s, int lane,
                                            const float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
    if (c < 0) continue;
    float piece[Traits::kVec];
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) piece[i] = v[q * Traits::kVec + i];
    store_pack<Traits::kVec>(head_row + c, piece);
  }
}

// The lane's slice of v stored to, or added with atomics to, an fp32 row.
template <typename Traits>
__device__ __forceinline__ void store_float_slice(float* head_row, const GatShape& s, int lane,
                                                  const float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
    if (c < 0) continue;
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) head_row[c + i] = v[q * Traits::kVec + i];
  }
}
template <typename Traits>
__device__ __forceinline__ void atomic_add_slice(float* head_row, const GatShape& s, int lane,
                                                 const float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
    if (c < 0) continue;
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) atomicAdd(head_row + c + i, v[q * Traits::kVec + i]);
  }
}

// Sums over the lanes of the caller's group (every lane gets them): of v,
// and of each v[k] (reduced together, so the shuffles overlap).
__device__ __forceinline__ float group_sum(float v, const WarpLayout& layout) {
  for (int offset = layout.lanes() / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <int N>
__device__ __forceinline__ void group_sums(float (&v)[N], const WarpLayout& layout) {
  for (int offset = layout.lanes() / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
  }
}

// v summed over the entry slots of the caller's head (every slot gets the total).
__device__ __forceinline__ float sum_over_slots(float v, const GatShape& s) {
  for (int offset = s.first_slot_offset(); offset < kWarpSize; offset <<= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <int N>
__device__ __forceinline__ void sum_over_slots(float (&v)[N], const GatShape& s) {
  for (int offset = s.first_slot_offset(); offset < kWarpSize; offset <<= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
  }
}

// One step of a row walk for the caller's slot: entries u < U at
// positions pos(u) of the walked structure, real(u) false for the padding
// past the row's end, index[n][u] the value of index array n there
// (offset(u): the position as EntryOffset, 32-bit for int32 indices).
template <int U, int N, typename index_t>
struct WalkStep {
  EntryOffset<index_t> first;
  int stride;
  int real_count;
  index_t index[N][U];
  __device__ __forceinline__ EntryOffset<index_t> offset(int u) const {
    return first + static_cast<EntryOffset<index_t>>(u * stride);
  }
  __device__ __forceinline__ int64_t pos(int u) const { return static_cast<int64_t>(offset(u)); }
  __device__ __forceinline__ bool real(int u) const { return u < real_count; }
};

// walk_row's default: no prefetch of the next step's rows.
struct NoPrefetch {
  template <typename index_t>
  __device__ __forceinline__ void operator()(index_t) const {}
};

// Calls step(WalkStep) for the entries [begin, end) the caller's slot
// takes, U per step, the slots interleaving (every lane of the warp makes
// the same calls, so step may shuffle). The N index arrays are read 32
// entries at a time, one load per lane (the next 32 prefetched), and
// handed out with shuffles, so a step's gathers wait on no index load.
// prefetch(j) is called, before a step, for index array 0's values j of
// the slot's next step in the same batch (a hint such as prefetch_l2 of
// the rows that step will gather).
template <int U, int N, typename index_t, typename Step, typename Prefetch = NoPrefetch>
__device__ __forceinline__ void walk_row(const GatShape& s, int lane, int64_t begin, int64_t end,
                                         const index_t* const (&index)[N], Step step,
                                         Prefetch prefetch = {}) {
  using offset_t = EntryOffset<index_t>;
  const int slot_shift = s.slot_shift(), slots = 1 << slot_shift, slot = s.slot(lane);
  const offset_t first = static_cast<offset_t>(begin), last = static_cast<offset_t>(end);
  index_t next[N];
#pragma unroll
  for (int n = 0; n < N; ++n) next[n] = first + lane < last ? index[n][first + lane] : index_t{0};
  for (offset_t batch = first; batch < last; batch += kWarpSize) {
    index_t mine[N];
#pragma unroll
    for (int n = 0; n < N; ++n) {
      mine[n] = next[n];
      const offset_t ahead = batch + kWarpSize + lane;
      next[n] = ahead < last ? index[n][ahead] : index_t{0};
    }
    const int count = last - batch < kWarpSize ? static_cast<int>(last - batch) : kWarpSize;
    for (int k = 0; k < count; k += U * slots) {
      WalkStep<U, N, index_t> walk;
      walk.first = batch + k + slot;
      walk.stride = slots;
      const int left = count - (k + slot);  // entries from this slot's first on
      walk.real_count = left <= 0 ? 0 : ((left - 1) >> slot_shift) + 1;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int n = 0; n < N; ++n)
          walk.index[n][u] = __shfl_sync(0xffffffffu, mine[n], (k + u * slots + slot) & 31);
      if constexpr (!std::is_same_v<Prefetch, NoPrefetch>) {
        const int next_k = k + U * slots;  // the slot's next step in this batch
        if (next_k < count) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int at = next_k + u * slots + slot;
            const index_t j = __shfl_sync(0xffffffffu, mine[0], at & 31);
            if (at < count) prefetch(j);
          }
        }
      }
      step(walk);
    }
  }
}

__device__ __forceinline__ float leaky_relu(float z, float slope) { return z > 0.f ? z : z * slope; }
__device__ __forceinline__ float leaky_relu_grad(float z, float slope) {
  return z > 0.f ? 1.f : slope;
}

// z = x_l[j] + x_r[i] (+ edge[e]) of an entry from the lane's slices.
// Every pass sums in this order, so each recomputes the forward's scores
// bit for bit.
template <int N>
__device__ __forceinline__ void entry_z(const float (&xl)[N], const float (&xr)[N], bool has_edge,
                                        const float (&edge)[N], float (&z)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) z[k] = has_edge ? (xl[k] + xr[k]) + edge[k] : xl[k] + xr[k];
}

// The lane's part of the score sum_c att[c] * leaky_relu(z[c]) (group_sum
// completes it).
template <int N>
__device__ __forceinline__ float score_part(const float (&z)[N], const float (&att)[N],
                                            float slope) {
  float partial = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) partial += att[k] * leaky_relu(z[k], slope);
  return partial;
}

// keep(e, h) / (1 - p): the dropout factor of entry e (CSR position), head h.
__device__ __forceinline__ float dropout_factor(uint64_t seed, int64_t entry, int64_t head,
                                                float p) {
  if (p <= 0.f) return 1.f;
  return dropout_keep(seed, entry, static_cast<int>(head), p) ? 1.f / (1.f - p) : 0.f;
}

// exp(x) for the family's softmax exponents (at most 0 but for rounding,
// or -inf): ex2.approx.ftz of x log2(e), two instructions where expf's
// accurate range reduction takes eight (and __expf's denormal handling
// five). Relative error about 2^-21 near 0, growing with |x| where a term
// no longer counts against the largest; results below 2^-126 flush to 0;
// -inf gives 0. Every pass (forward, weights, backward) takes it, so the
// backward's weights exp(s - lse) match the forward's. H200, against expf:
// GATv2 (2, 64) pokec-like forward fp32 6.55 -> 6.34 ms, bf16 5.51 -> 5.32,
// backward fp32 20.71 -> 20.18; the transformer (4, 128) 0.5-2% faster.
__device__ __forceinline__ float softmax_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.44269504088896341f));
  return y;
}

// A running softmax-weighted sum: m the largest score so far, l the sum of
// exp(score - m), acc the sum of exp(score - m) * factor * value (dropout
// scales acc, never l).
template <int N>
struct SoftmaxState {
  float m = -INFINITY;
  float l = 0.f;
  float acc[N] = {};

  // Moves the running maximum up to m_new > m, rescaling l and acc.
  __device__ __forceinline__ void raise_max(float m_new) {
    const float rescale = softmax_exp(m - m_new);  // 0 while m is -inf
    l *= rescale;
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] *= rescale;
    m = m_new;
  }

  // Adds an entry of weight exp(score - m) (score <= m).
  __device__ __forceinline__ void add(float weight, float factor, const float (&value)[N]) {
    l += weight;
    const float w = weight * factor;
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += w * value[k];
  }

  // Merges another state (m_o, l_o, acc_o) into this one.
  __device__ __forceinline__ void merge(float m_o, float l_o, const float (&acc_o)[N]) {
    const float m_new = fmaxf(m, m_o);
    const float a = m == -INFINITY ? 0.f : softmax_exp(m - m_new);
    const float b = m_o == -INFINITY ? 0.f : softmax_exp(m_o - m_new);
    l = l * a + l_o * b;
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = acc[k] * a + acc_o[k] * b;
    m = m_new;
  }

  // Merges the states of the slots of the caller's head: every slot ends
  // with the total.
  __device__ __forceinline__ void merge_slots(const GatShape& s) {
    for (int offset = s.first_slot_offset(); offset < kWarpSize; offset <<= 1) {
      float acc_o[N];
#pragma unroll
      for (int k = 0; k < N; ++k) acc_o[k] = __shfl_xor_sync(0xffffffffu, acc[k], offset);
      merge(__shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, l, offset),
            acc_o);
    }
  }

  // log sum exp of the scores (-inf for none).
  __device__ __forceinline__ float lse() const { return l > 0.f ? m + logf(l) : -INFINITY; }
};

// The hub threshold of a row walk: rows above max(*degree,
// PYGIO_ATTENTION_MIN_HUB_DEGREE) entries are hubs; none without a list.
__device__ __forceinline__ int64_t gat_hub_threshold(const int64_t* degree, int64_t capacity) {
  if (capacity == 0) return INT64_MAX;
  const int64_t d = *degree;
  return d > PYGIO_ATTENTION_MIN_HUB_DEGREE ? d : PYGIO_ATTENTION_MIN_HUB_DEGREE;
}

}  // namespace pygio
