// Graph-transformer attention's member of the attention family (contracts:
// pygio_transformer, pygio_transformer_alpha in pyg_ioaware.h): the scores
// and values of a row's entries; attention_forward.cuh does the softmax,
// the hubs and the weights. For destination i, head h, entry e = (j -> i):
//   s[e,h]     = scale * <q[i,h,:], k[j,h,:] (+ edge[e,h,:])>,
//   value[e,h] = v[j,h,:] (+ edge[e,h,:]).
// The score and value helpers also serve the backward passes
// (transformer_backward_kernel.cuh), which recompute the scores bit for bit.
#pragma once

#include "attention_forward.cuh"
#include "gatv2_traits.cuh"

namespace pygio {

// Whether a walk (the forward's and both backward passes') asks L2 for
// the rows a slot gathers at its next entry while it gathers one
// (prefetch_head_slice): in 16-bit with several pieces a lane. H200,
// (4, 128) bf16, ms: forward pokec-like 25.9 -> 24.1, web-like 13.43 ->
// 13.34, arxiv-like 1.378 -> 1.362 (with 3 blocks an SM); backward 62.6 ->
// 59.5, 33.8 -> 33.5, 3.69 -> 3.70. Not kept: (2, 64) bf16, one piece a
// lane (backward 3% slower on arxiv- and web-like), and fp32 (4, 128)
// (backward 0-6% slower in either pass).
template <typename Traits>
constexpr bool kTransformerPrefetch = sizeof(typename Traits::scalar_t) == 2 && !Traits::kOnePiece;

// walk_row (gatv2_traits.cuh), with `prefetch` where kTransformerPrefetch
// says and without it elsewhere.
template <typename Traits, int U, int N, typename index_t, typename Step, typename Prefetch>
__device__ __forceinline__ void transformer_walk_row(const GatShape& s, int lane, int64_t begin,
                                                     int64_t end,
                                                     const index_t* const (&index)[N], Step step,
                                                     Prefetch prefetch) {
  if constexpr (kTransformerPrefetch<Traits>)
    walk_row<U, N>(s, lane, begin, end, index, step, prefetch);
  else
    walk_row<U, N>(s, lane, begin, end, index, step);
}

// Asks L2 for row j's slice of one head (`slice_bytes` from `head`, rows
// `row_bytes` apart), a 128-byte line per lane of the group.
template <typename scalar_t, typename index_t>
__device__ __forceinline__ void prefetch_head_slice(const scalar_t* head, index_t j,
                                                    uint64_t row_bytes, int line, int slice_bytes) {
  if (line < slice_bytes)
    prefetch_l2(reinterpret_cast<const char*>(row_address(head, j, row_bytes)) + line);
}

// The lane's part of <q, key (+ edge)> (group_sum completes it). Every pass
// sums in this order.
template <int N>
__device__ __forceinline__ float key_part(const float (&q)[N], const float (&key)[N],
                                          bool has_edge, const float (&edge)[N]) {
  float partial = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) partial += q[k] * (has_edge ? key[k] + edge[k] : key[k]);
  return partial;
}

// value (+ edge), elementwise.
template <int N>
__device__ __forceinline__ void add_edge(float (&value)[N], bool has_edge, const float (&edge)[N]) {
  if (!has_edge) return;
#pragma unroll
  for (int k = 0; k < N; ++k) value[k] += edge[k];
}

// The value slices of a step's entries, widened on demand: v (+ edge).
template <typename Traits, int U>
struct TransformerValues {
  const RawSlice<Traits> (&value_raw)[U];
  const RawSlice<Traits> (&edge_raw)[U];
  bool has_edge;

  __device__ __forceinline__ void operator()(int u, float (&value)[Traits::kElems]) const {
    float edge_values[Traits::kElems];
    value_raw[u].to_float(value);
    edge_raw[u].to_float(edge_values);
    add_edge(value, has_edge, edge_values);
  }
};

// Graph-transformer attention for attention_forward.cuh: stages q[row, h];
// a step gathers k (and with kValues v) of its entries' sources and their
// edge rows. Entries a step: twice GATv2's kUnroll where a lane holds at
// most 4 channels (H200, (4, 128) fp32 on pokec-like: 50 -> 41 ms), else
// kUnroll (twice left 16-bit lanes of 8 channels at 159 registers, 1.7x
// slower).
struct TransformerFamily {
  template <typename Traits>
  static constexpr int unroll() {
    return Traits::kElems <= 4 ? 2 * Traits::kUnroll : Traits::kUnroll;
  }
  // In 16-bit: 4 blocks (64 registers, spilling up to 140 bytes: 32 warps
  // an SM instead of 16) where a lane holds one piece of a head (H200,
  // (4, 128) bf16 on pokec-like: 50.5 -> 36.0 ms), 3 (80 registers,
  // spilling 132 bytes: 24 warps instead of 16) where it holds several
  // (the same on pokec-like, one pass of 2 pieces a lane: 29.2 -> 25.9 ms,
  // web-like 15.0 -> 13.4, arxiv-like 1.57 -> 1.38). fp32 lanes keep twice
  // the entries in flight and need their registers (40.5 -> 45.9 ms).
  template <typename Traits>
  static constexpr int min_blocks() {
    if constexpr (sizeof(typename Traits::scalar_t) == 2) return Traits::kOnePiece ? 4 : 3;
    return 0;
  }
  template <typename Traits, int U>
  using Entries = TransformerValues<Traits, U>;

  template <typename Traits, bool kValues, typename P, typename Step>
  static __device__ __forceinline__ void for_each_score(const P& p, const GatShape& s, int lane,
                                                        int64_t row, int64_t h, int64_t begin,
                                                        int64_t end, Step step) {
    using index_t = typename Traits::index_t;
    using scalar_t = typename Traits::scalar_t;
    constexpr int E = Traits::kElems, U = unroll<Traits>();
    float q[E];
    load_slice<Traits>(static_cast<const scalar_t*>(p.q) + row * p.q_row_stride + h * s.channels,
                       s, lane, q);
    const auto* __restrict__ k = static_cast<const scalar_t*>(p.k) + h * s.channels;
    const bool has_edge = has_edges<Traits>(p);
    const scalar_t* __restrict__ edge =
        has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
    const uint64_t k_row_bytes = p.k_row_stride * sizeof(scalar_t);
    const uint64_t edge_row_bytes = s.width() * sizeof(scalar_t);
    const index_t* const index[1] = {static_cast<const index_t*>(p.a.col)};
    const int line = s.layout.lane_in_group(lane) * 128;
    const int slice_bytes = static_cast<int>(s.channels * sizeof(scalar_t));
    const auto prefetch_rows = [&](index_t j) {
      prefetch_head_slice(k, j, k_row_bytes, line, slice_bytes);
      if constexpr (kValues)
        prefetch_head_slice(static_cast<const scalar_t*>(p.v) + h * s.channels, j,
                            p.v_row_stride * sizeof(scalar_t), line, slice_bytes);
    };
    const auto gather = [&](const WalkStep<U, 1, index_t>& walk) {
      RawSlice<Traits> key_raw[U], value_raw[U], edge_raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const index_t j = walk.index[0][u];
        if (walk.real(u)) key_raw[u].load(row_address(k, j, k_row_bytes), s, lane);
        else key_raw[u].clear();
        if constexpr (kValues) {
          if (walk.real(u))
            value_raw[u].load(row_address(static_cast<const scalar_t*>(p.v) + h * s.channels, j,
                                          p.v_row_stride * sizeof(scalar_t)), s, lane);
          else value_raw[u].clear();
        }
        if (walk.real(u) && has_edge)
          edge_raw[u].load(row_address(edge, walk.offset(u), edge_row_bytes), s, lane);
        else edge_raw[u].clear();
      }
      float score[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float key[E], edge_values[E];
        key_raw[u].to_float(key);
        edge_raw[u].to_float(edge_values);
        score[u] = key_part(q, key, has_edge, edge_values);
      }
      group_sums(score, s.layout);
#pragma unroll
      for (int u = 0; u < U; ++u) score[u] *= p.scale;
      step(walk, score, TransformerValues<Traits, U>{value_raw, edge_raw, has_edge});
    };
    transformer_walk_row<Traits, U>(s, lane, begin, end, index, gather, prefetch_rows);
  }
};

}  // namespace pygio
