// GATv2's backward passes (gatv2_backward_kernel.cuh) with their gathers
// streamed, for the shapes whose forward streams (streams_shape,
// row_stream.cuh: a warp walks a few consecutive rows' entries as one
// stream through shared memory), where the pass's rows are short.
//
// Destination pass (over a): grad_x_r and G of every row that is no hub,
// each row's x_r and grad_out slices and its lse copied with its first
// entry. Per entry, with alpha = exp(s - lse[i, h]) recomputed:
//   G += f alpha dot,  A += f alpha dot v,  B += alpha v,
// with f the dropout factor, dot = <grad_out[i, h], x_l[j, h]> and
// v = att[h] * leaky_relu'(z); a row's slots sum theirs at its end and
// grad_x_r[i, h] = A - G B, as gatv2_backward_rows_kernel computes them.
// A hub row registers (its G zeroed) for the hub kernels, as there.
//
// Source pass (over a_t): grad_x_l of every source that is no hub and the
// grad_att terms, each entry's x_r and grad_out slices and its lse and G
// copied with it, each source's x_l slice with its first entry. Per entry,
// with ds = alpha (f dot - G[i, h]):
//   grad_x_l[j] += f alpha grad_out[i] + ds v,  grad_att += ds leaky_relu(z),
// as gatv2_backward_sources_kernel.
#pragma once

#include "gatv2_backward_kernel.cuh"
#include "row_stream.cuh"

namespace pygio {

// Steps in flight a warp: three keep a block's shared memory within 48 KB
// (the destination pass: x_r, grad_out and lse of four rows a warp; the
// source pass: x_r, grad_out, lse and G of three entries, x_l of four
// rows, and the block's grad_att sums).
constexpr int kStreamBackwardStages = 3;
using DestinationStreamLayout = StreamLayout<kStreamBackwardStages, 2, true>;
using SourceStreamLayout = StreamLayout<kStreamBackwardStages, 1, false, 2, 2>;

// grad_x_r and G of the rows that are no hubs (stream_rows); 2^kHeadShift
// lanes a head, kSlots entry slots. Registers and blocks as
// gatv2_backward_rows_kernel's (kBackwardMinBlocks: 64 registers in fp32,
// spilling 80 bytes, 80 in 16-bit, spilling 100).
template <typename Traits, int kHeadShift, int kSlots>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_streamed_backward_rows_kernel(const __grid_constant__ pygio_gatv2_backward_params p,
                                        GatShape s, GatGradHubs hubs, float* __restrict__ g) {
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  // A row's walk: its sums (zero first), x_r and grad_out slices and lse.
  struct Row {
    DestinationSums<Traits> sums;
    float xr[E], dout[E], lse;
  };
  const StreamLane<Traits> lane(s, p.att);
  const auto write = [&](int64_t row, const float (&dxr)[E], float g_row) {
    if (!lane.writes) return;
    store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_r) + row * p.grad_x_r_row_stride +
                            lane.head.h * s.channels, s, lane.index, dxr);
    if (s.layout.lane_in_group(lane.index) == 0) g[row * s.heads + lane.head.h] = g_row;
  };
  stream_rows<Traits, kSlots, DestinationStreamLayout, Row>(
      p.a, static_cast<const scalar_t*>(p.x_l), p.x_l_row_stride,
      [&](int t, int64_t row) {  // x_r, grad_out
        return t == 0 ? static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride
                      : static_cast<const scalar_t*>(p.grad_out) + row * s.width();
      },
      [&](int64_t row) { return p.lse + row * s.heads + lane.head.h; },
      NoStreamTable<scalar_t>(), NoStreamTable<float>(), hubs.list,
      gat_hub_threshold(hubs.degree, hubs.list.capacity), lane.piece_offset, lane.loads,
      [&](int64_t row) {  // no entries: grad_x_r = 0, G = 0
        const float zeros[E] = {};
        write(row, zeros, 0.f);
      },
      [&](int64_t row) {  // G from the hub kernels' atomics
        for (int64_t h = lane.index; h < s.heads; h += kWarpSize) g[row * s.heads + h] = 0.f;
      },
      [&](Row& r, const float (&slices)[2][E], float lse) {
#pragma unroll
        for (int k = 0; k < E; ++k) r.xr[k] = slices[0][k], r.dout[k] = slices[1][k];
        r.lse = lse;
      },
      [&](Row& r, const float (&xl)[E], int64_t e, bool real) {
        float z[E];
        const float no_edge[E] = {};
        entry_z(xl, r.xr, false, no_edge, z);
        float score_dot[2] = {score_part(z, lane.att, p.negative_slope), 0.f};
#pragma unroll
        for (int k = 0; k < E; ++k) score_dot[1] += r.dout[k] * xl[k];
        head_lanes_sums<kHeadShift>(score_dot);
        if (!real) return;
        r.sums.add(softmax_exp(score_dot[0] - r.lse),
                   dropout_factor(p.seed, e, lane.head.h, p.dropout_p), score_dot[1], lane.att,
                   z, p.negative_slope);
      },
      [&](Row& r, int64_t row) {
        if constexpr (kSlots > 1) r.sums.merge_slots(s);
        float dxr[E];
        r.sums.grad_x_r(dxr);
        write(row, dxr, r.sums.g);
      });
}

// Launches gatv2_streamed_backward_rows_kernel (streams_rows must hold).
template <typename Traits>
int launch_streamed_backward_rows(const pygio_gatv2_backward_params& p, const GatShape& s,
                                  const GatGradHubs& hubs, float* g, cudaStream_t stream) {
  const auto kernel = stream_kernel<Traits>(s, [](auto shift, auto slots) {
    return gatv2_streamed_backward_rows_kernel<Traits, decltype(shift)::value,
                                               decltype(slots)::value>;
  });
  return launch_stream<Traits, DestinationStreamLayout>(kernel, p.a, 0, p.device, stream, p,
                                                        s, hubs, g);
}

// grad_x_l of the sources (rows of a_t) that are no hubs, and the block's
// grad_att terms (stream_rows); blocks and hubs as
// gatv2_backward_sources_kernel's (64 registers in fp32, spilling 80
// bytes, 80 in 16-bit, spilling 108). With dropout, an entry's CSR
// position (its dropout counter) is read from perm_t when its turn comes.
template <typename Traits, int kHeadShift, int kSlots>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_streamed_backward_sources_kernel(const __grid_constant__
                                           pygio_gatv2_backward_params p,
                                           GatShape s, GatGradHubs hubs,
                                           const float* __restrict__ g) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  // A source's walk: its x_l slice and its sums (zero first).
  struct Row {
    float xl[E];
    SourceSums<Traits> sums;
  };
  constexpr size_t kAttOffset = stream_block_bytes<Traits, SourceStreamLayout>() / sizeof(float);
  float* const att_sums = begin_att_sums(p, s, true, kAttOffset);
  const StreamLane<Traits> lane(s, p.att);
  const auto* __restrict__ perm_t = static_cast<const index_t*>(p.perm_t);
  const auto write = [&](int64_t row, const float (&dxl)[E]) {
    store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_l) + row * p.grad_x_l_row_stride +
                            lane.head.h * s.channels, s, lane.index, dxl);
  };
  stream_rows<Traits, kSlots, SourceStreamLayout, Row>(
      p.a_t, static_cast<const scalar_t*>(p.x_r), p.x_r_row_stride,
      [&](int, int64_t row) {  // x_l of the source
        return static_cast<const scalar_t*>(p.x_l) + row * p.x_l_row_stride;
      },
      NoStreamTable<float>(),
      [&](int, index_t i) {  // grad_out of the destination
        return static_cast<const scalar_t*>(p.grad_out) + static_cast<int64_t>(i) * s.width();
      },
      [&](int k, index_t i) {  // lse, G of the destination
        return (k == 0 ? p.lse : g) + static_cast<int64_t>(i) * s.heads + lane.head.h;
      },
      hubs.list, gat_hub_threshold(hubs.degree, hubs.list.capacity), lane.piece_offset,
      lane.loads,
      [&](int64_t row) {  // no entries: grad_x_l = 0
        const float zeros[E] = {};
        if (lane.writes) write(row, zeros);
      },
      [](int64_t) {},
      [&](Row& r, const float (&slices)[1][E], float) {
#pragma unroll
        for (int k = 0; k < E; ++k) r.xl[k] = slices[0][k];
      },
      [&](Row& r, const float (&slices)[2][E], const float (&scalars)[2], int64_t t, bool real) {
        const float(&xr)[E] = slices[0];
        const float(&dout)[E] = slices[1];
        float z[E];
        const float no_edge[E] = {};
        entry_z(r.xl, xr, false, no_edge, z);
        float score_dot[2] = {score_part(z, lane.att, p.negative_slope), 0.f};
#pragma unroll
        for (int k = 0; k < E; ++k) score_dot[1] += dout[k] * r.xl[k];
        head_lanes_sums<kHeadShift>(score_dot);
        if (!real) return;
        const int64_t e = p.dropout_p > 0.f ? static_cast<int64_t>(perm_t[t]) : t;
        float dz[E];
        r.sums.add(softmax_exp(score_dot[0] - scalars[0]),
                   dropout_factor(p.seed, e, lane.head.h, p.dropout_p), score_dot[1], scalars[1],
                   lane.att, z, dout, p.negative_slope, dz);
      },
      [&](Row& r, int64_t row) {
        if constexpr (kSlots > 1) r.sums.merge_slots(s);
        if (!lane.writes) return;
        write(row, r.sums.dxl);
        atomic_add_slice<Traits>(att_sums + lane.head.h * s.channels, s, lane.index,
                                 r.sums.datt);
      });
  end_att_sums(p, s, true, kAttOffset);
}

// Whether the source pass of a call of these traits and shape streams:
// its shape streams, a_t's rows are short on average and the block's
// grad_att sums fit beside the stream in shared memory.
template <typename Traits>
bool streams_sources(const pygio_gatv2_backward_params& p, const GatShape& s) {
  return streams_shape<Traits>(s) && short_rows(p.a_t) &&
         stream_fits<Traits, SourceStreamLayout>(s.width() * sizeof(float));
}

// Launches gatv2_streamed_backward_sources_kernel (streams_sources must hold).
template <typename Traits>
int launch_streamed_backward_sources(const pygio_gatv2_backward_params& p, const GatShape& s,
                                     const GatGradHubs& hubs, const float* g,
                                     cudaStream_t stream) {
  const auto kernel = stream_kernel<Traits>(s, [](auto shift, auto slots) {
    return gatv2_streamed_backward_sources_kernel<Traits, decltype(shift)::value,
                                                  decltype(slots)::value>;
  });
  return launch_stream<Traits, SourceStreamLayout>(kernel, p.a_t, s.width() * sizeof(float),
                                                   p.device, stream, p, s, hubs, g);
}

}  // namespace pygio
