// GATv2's forward rows kernel where the warp's 32 lanes cover every head of
// an entry with one 16-byte piece each, once (e.g. (2, 64) or (4, 32) fp32,
// (4, 64) 16-bit) or, in 16-bit, twice, two entries at a time (entry
// slots: (2, 64) or (1, 128)), without edge attributes: the same out and
// lse as attention_rows_kernel (attention_forward.cuh), its gathers
// streamed (row_stream.cuh: a warp walks a few consecutive rows' entries
// as one stream through shared memory). A row's slots merge their softmax
// states at its end.
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

#include "attention_forward.cuh"
#include "gatv2_traits.cuh"
#include "row_stream.cuh"

namespace pygio {

// Steps in flight a warp.
constexpr int kStreamStages = 4;
using ForwardStreamLayout = StreamLayout<kStreamStages, 1, false>;

// out and lse of the rows that are no hubs (stream_rows); 2^kHeadShift
// lanes a head, kSlots entry slots. At most 64 registers (4 blocks an SM;
// fp32 spills 36 bytes): H200, (2, 64) fp32 forward, ms, against ptxas's
// 79 registers (3 blocks): arxiv-like 0.40 / 0.42, pokec-like 6.07 /
// 5.85, web-like 3.37 / 3.27, roads-like 0.12 / 0.12 (attention_rows_kernel:
// 0.41, 6.33, 3.98, 0.14).
template <typename Traits, int kHeadShift, int kSlots, typename P>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, 4)
    gatv2_streamed_rows_kernel(const __grid_constant__ P p, GatShape s, GatHubs hubs) {
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  // A row's walk: its softmax state and its x_r slice.
  struct Row {
    SoftmaxState<E> softmax;
    float xr[E];
  };
  const StreamLane<Traits> lane(s, p.att);
  stream_rows<Traits, kSlots, ForwardStreamLayout, Row>(
      p.a, static_cast<const scalar_t*>(p.x_l), p.x_l_row_stride,
      [&](int, int64_t row) {
        return static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride;
      },
      NoStreamTable<float>(), NoStreamTable<scalar_t>(), NoStreamTable<float>(), hubs.list,
      gat_hub_threshold(hubs.degree, hubs.list.capacity),
      lane.piece_offset, lane.loads,
      [&](int64_t row) {  // out = out_bias, lse = -inf
        SoftmaxState<E> none;
        if (lane.head.active) write_row<Traits>(p, s, lane.index, row, lane.head.h, none);
      },
      [](int64_t) {},
      [&](Row& r, const float (&slices)[1][E], float) {
#pragma unroll
        for (int k = 0; k < E; ++k) r.xr[k] = slices[0][k];
      },
      [&](Row& r, const float (&xl)[E], int64_t e, bool real) {
        float z[E];
        const float no_edge[E] = {};
        entry_z(xl, r.xr, false, no_edge, z);
        const float score =
            head_lanes_sum<kHeadShift>(score_part(z, lane.att, p.negative_slope));
        if (real) {
          if (score > r.softmax.m) r.softmax.raise_max(score);
          r.softmax.add(softmax_exp(score - r.softmax.m),
                        dropout_factor(p.seed, e, lane.head.h, p.dropout_p), xl);
        }
      },
      [&](Row& r, int64_t row) {
        if constexpr (kSlots > 1) r.softmax.merge_slots(s);
        if (lane.head.active) write_row<Traits>(p, s, lane.index, row, lane.head.h, r.softmax);
      });
}

// Launches gatv2_streamed_rows_kernel (streams_rows must hold).
template <typename Traits, typename P>
int launch_streamed_rows(const P& p, const GatShape& s, const GatHubs& hubs,
                         cudaStream_t stream) {
  const auto kernel = stream_kernel<Traits>(s, [](auto shift, auto slots) {
    return gatv2_streamed_rows_kernel<Traits, decltype(shift)::value, decltype(slots)::value, P>;
  });
  return launch_stream<Traits, ForwardStreamLayout>(kernel, p.a, 0, p.device, stream, p, s, hubs);
}

}  // namespace pygio
