// GATv2 attention's member of the attention family (contracts: pygio_gatv2,
// pygio_gatv2_alpha in pyg_ioaware.h): the scores and values of a row's
// entries; attention_forward.cuh does the softmax, the hubs and the
// weights. For destination i, head h and entry e = (j -> i):
//   s[e,h]     = att[h,:] . leaky_relu(x_l[j,h,:] + x_r[i,h,:] (+ edge[e,h,:])),
//   value[e,h] = x_l[j,h,:].
// for_each_step also serves the backward passes (gatv2_backward_kernel.cuh).
#pragma once

#include "attention_forward.cuh"
#include "gatv2_traits.cuh"

namespace pygio {

// The x_l slice and z of each entry of a step, widened from the loads on
// demand: values(u, xl, z).
template <typename Traits, int U>
struct EntryValues {
  const RawSlice<Traits> (&xl_raw)[U];
  const RawSlice<Traits> (&edge_raw)[U];
  const float (&xr)[Traits::kElems];
  bool has_edge;

  // Entry u's x_l slice alone (its value in the forward).
  __device__ __forceinline__ void operator()(int u, float (&xl)[Traits::kElems]) const {
    xl_raw[u].to_float(xl);
  }

  __device__ __forceinline__ void operator()(int u, float (&xl)[Traits::kElems],
                                             float (&z)[Traits::kElems]) const {
    float edge_values[Traits::kElems];
    xl_raw[u].to_float(xl);
    edge_raw[u].to_float(edge_values);
    entry_z(xl, xr, has_edge, edge_values, z);
  }
};

// Calls step(walk, score, dot, values) for each step (WalkStep walk) of the caller's
// slot over the entries [begin, end) of a row of a (Params: any params
// struct with a, x_l, edge) whose destination's x_r slice of head h is xr:
// for entry u (x_l row j = col[e]) score[u] = att . leaky_relu(z) with
// z = x_l[j] + xr (+ edge[e]), and with kDot dot[u] = <dout, x_l[j]> (else
// 0), both summed over the group (the shuffles of a step's entries
// overlap); values(u, xl, z) fills entry u's x_l slice and z. Every lane of
// the warp makes the same calls, so step may shuffle; it must ignore the
// entries that are not real.
template <typename Traits, bool kDot, typename Params, typename Step>
__device__ __forceinline__ void for_each_step(const Params& p, const GatShape& s, int lane,
                                              int64_t h, int64_t begin, int64_t end,
                                              const float (&att)[Traits::kElems],
                                              const float (&xr)[Traits::kElems],
                                              const float (&dout)[Traits::kElems], Step step) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kUnroll;
  const auto* __restrict__ x_l = static_cast<const scalar_t*>(p.x_l) + h * s.channels;
  const bool has_edge = has_edges<Traits>(p);
  const scalar_t* __restrict__ edge =
      has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
  const uint64_t x_l_row_bytes = p.x_l_row_stride * sizeof(scalar_t);
  const uint64_t edge_row_bytes = s.width() * sizeof(scalar_t);
  const index_t* const index[1] = {static_cast<const index_t*>(p.a.col)};
  // The backward's destination pass asks L2 for the next step's x_l rows
  // while this step gathers (H200, (2, 64) fp32 backward: pokec-like 22.20
  // -> 21.56 ms, web-like 12.91 -> 12.62, arxiv-like 1.48 -> 1.46). Not in
  // the forward (1-7% slower there), nor in the source pass (faster on
  // pokec-like, slower on web- and arxiv-like).
  const int64_t piece = piece_channel<Traits>(s, lane, 0);
  const auto prefetch_x_l = [&](index_t j) {
    if (piece >= 0) prefetch_l2(row_address(x_l, j, x_l_row_bytes) + piece);
  };
  const auto gather_step = [&](const WalkStep<U, 1, index_t>& walk) {
    RawSlice<Traits> xl_raw[U], edge_raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (walk.real(u)) xl_raw[u].load(row_address(x_l, walk.index[0][u], x_l_row_bytes), s, lane);
      else xl_raw[u].clear();
      if (walk.real(u) && has_edge)
        edge_raw[u].load(row_address(edge, walk.offset(u), edge_row_bytes), s, lane);
      else edge_raw[u].clear();
    }
    const EntryValues<Traits, U> values{xl_raw, edge_raw, xr, has_edge};
    float sums[kDot ? 2 * U : U];  // scores, then dots
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xl[E], z[E];
      values(u, xl, z);
      sums[u] = score_part(z, att, p.negative_slope);
      if constexpr (kDot) {
        sums[U + u] = 0.f;
#pragma unroll
        for (int k = 0; k < E; ++k) sums[U + u] += dout[k] * xl[k];
      }
    }
    group_sums(sums, s.layout);
    float score[U], dot[U];
#pragma unroll
    for (int u = 0; u < U; ++u) score[u] = sums[u], dot[u] = 0.f;
    if constexpr (kDot) {
#pragma unroll
      for (int u = 0; u < U; ++u) dot[u] = sums[U + u];
    }
    step(walk, score, dot, values);
  };
  if constexpr (kDot) walk_row<U, 1>(s, lane, begin, end, index, gather_step, prefetch_x_l);
  else walk_row<U, 1>(s, lane, begin, end, index, gather_step);
}

// GATv2 for attention_forward.cuh: stages att and the destination's x_r
// slice, then for_each_step; an entry's value is its x_l slice.
struct Gatv2Family {
  template <typename Traits>
  static constexpr int unroll() { return Traits::kUnroll; }
  // 4 blocks (64 registers, spilling 40 bytes in fp32, 140 in 16-bit: 32
  // warps an SM instead of 16-24) where a lane holds one piece of a head
  // (H200, (2, 64) on pokec-like: fp32 8.73 -> 7.48 ms, bf16 9.14 -> 7.16 ms).
  template <typename Traits>
  static constexpr int min_blocks() { return Traits::kOnePiece ? 4 : 0; }
  template <typename Traits, int U>
  using Entries = EntryValues<Traits, U>;

  template <typename Traits, bool kValues, typename P, typename Step>
  static __device__ __forceinline__ void for_each_score(const P& p, const GatShape& s, int lane,
                                                        int64_t row, int64_t h, int64_t begin,
                                                        int64_t end, Step step) {
    using index_t = typename Traits::index_t;
    using scalar_t = typename Traits::scalar_t;
    constexpr int E = Traits::kElems, U = Traits::kUnroll;
    float att[E], xr[E];
    load_att<Traits>(p.att + h * s.channels, s, lane, att);
    load_slice<Traits>(static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride +
                           h * s.channels, s, lane, xr);
    for_each_step<Traits, false>(
        p, s, lane, h, begin, end, att, xr, att,
        [&](const WalkStep<U, 1, index_t>& walk, const float (&score)[U], const float (&)[U],
            const EntryValues<Traits, U>& values) { step(walk, score, values); });
  }
};

}  // namespace pygio
