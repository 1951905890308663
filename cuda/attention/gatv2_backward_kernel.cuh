// GATv2 attention backward (contract: pygio_gatv2_backward). With alpha
// recomputed from lse, f = keep(e,h)/(1-p), dot[e,h] = <grad_out[i,h,:],
// x_l[j,h,:]> and v[e,h,:] = att[h,:] * leaky_relu'(z[e,h,:]):
//   G[i,h]    = sum_{e into i} f alpha dot           (= <grad_out[i,h], out[i,h]>),
//   ds[e,h]   = alpha (f dot - G[i,h]),  dz[e,h,:] = ds[e,h] v[e,h,:].
// Destination pass, over a (rows = destinations i): one walk of each row
// sums G, A = sum_e f alpha dot v and B = sum_e alpha v, then
// grad_x_r[i] = sum_e dz = A - G B. G is exact in fp32 (never taken from
// the rounded out) and goes to the workspace for the source pass.
//  - gatv2_backward_rows_kernel: a warp per row, its heads in passes; a row
//    above the hub threshold is only registered (its G zeroed);
//  - gatv2_backward_hub_rows_kernel: a warp per (hub chunk, pass of heads)
//    adds the chunk's G, A, B to the hub's with fp32 atomics;
//  - gatv2_backward_hub_rows_finish_kernel: grad_x_r of each hub = A - G B.
// Source pass, over a_t (rows = sources j; perm_t gives each entry's CSR
// position e, for edge and the dropout counter), after the first:
//   grad_x_l[j] = sum_{e=(j->i)} f alpha grad_out[i] + dz[e],
//   grad_edge[e] = dz[e],  grad_att += sum_e ds[e] leaky_relu(z[e]),
//  - gatv2_backward_sources_kernel: a warp per row, its heads in passes,
//    grad_x_l summed in registers and written once; a row above the hub
//    threshold is only registered;
//  - gatv2_backward_hub_sources_kernel: a warp per (hub chunk, pass of
//    heads) adds the chunk's grad_x_l terms to the hub's accumulator;
//  - attention_hub_rows_finish_kernel (gatv2_traits.cuh): each hub's
//    accumulator into grad_x_l.
// grad_att is summed per block in shared memory, then added to grad_att
// (fp32, zeroed first) once per block.
#pragma once

#include "../common/hubs.cuh"
#include "../common/row_loop.cuh"
#include "gatv2_kernel.cuh"

namespace pygio {

extern __shared__ float gat_att_shared[];

// Where a block sums its grad_att terms: shared memory (heads * channels
// floats from `offset` floats into the dynamic shared memory, zeroed here)
// when `shared`, else grad_att itself. Every thread of the block calls it.
__device__ __forceinline__ float* begin_att_sums(const pygio_gatv2_backward_params& p,
                                                 const GatShape& s, bool shared,
                                                 size_t offset = 0) {
  if (!shared) return p.grad_att;
  float* const sums = gat_att_shared + offset;
  for (int64_t k = threadIdx.x; k < s.width(); k += blockDim.x) sums[k] = 0.f;
  __syncthreads();
  return sums;
}

// Adds the block's shared sums to grad_att (every thread of the block calls it).
__device__ __forceinline__ void end_att_sums(const pygio_gatv2_backward_params& p,
                                             const GatShape& s, bool shared,
                                             size_t offset = 0) {
  if (!shared) return;
  __syncthreads();
  const float* const sums = gat_att_shared + offset;
  for (int64_t k = threadIdx.x; k < s.width(); k += blockDim.x)
    if (sums[k] != 0.f) atomicAdd(p.grad_att + k, sums[k]);
}

// The destination pass's sums over a row's entries (or a hub chunk's), one
// head: g = sum_e f alpha dot, a = sum_e f alpha dot v, b = sum_e alpha v.
template <typename Traits>
struct DestinationSums {
  static constexpr int E = Traits::kElems;
  float g = 0.f;
  float a[E] = {};
  float b[E] = {};

  // Adds an entry's terms: alpha recomputed, f its dropout factor, dot =
  // <grad_out[i, h], x_l[j, h]>, z its pre-activation.
  __device__ __forceinline__ void add(float alpha, float factor, float dot, const float (&att)[E],
                                      const float (&z)[E], float negative_slope) {
    const float w = factor * alpha * dot;
    g += w;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float v = att[k] * leaky_relu_grad(z[k], negative_slope);
      a[k] += w * v;
      b[k] += alpha * v;
    }
  }

  // Sums the head's slots' sums (every slot gets the total).
  __device__ __forceinline__ void merge_slots(const GatShape& s) {
    g = sum_over_slots(g, s);
    sum_over_slots(a, s);
    sum_over_slots(b, s);
  }

  // grad_x_r[i, h] = A - G B.
  __device__ __forceinline__ void grad_x_r(float (&dxr)[E]) const {
#pragma unroll
    for (int k = 0; k < E; ++k) dxr[k] = a[k] - g * b[k];
  }
};

// The source pass's sums over a source's entries (or a hub chunk's), one
// head: dxl = sum_e f alpha grad_out[i] + dz, datt = sum_e ds leaky_relu(z),
// with ds = alpha (f dot - G[i, h]) and dz = ds v.
template <typename Traits>
struct SourceSums {
  static constexpr int E = Traits::kElems;
  float dxl[E] = {};
  float datt[E] = {};

  // Adds an entry's terms (alpha, f, dot and z as DestinationSums::add's,
  // g_dst = G[i, h]) and gives its dz.
  __device__ __forceinline__ void add(float alpha, float factor, float dot, float g_dst,
                                      const float (&att)[E], const float (&z)[E],
                                      const float (&dout)[E], float negative_slope,
                                      float (&dz)[E]) {
    const float ds = alpha * (factor * dot - g_dst);
#pragma unroll
    for (int k = 0; k < E; ++k) {
      dz[k] = ds * att[k] * leaky_relu_grad(z[k], negative_slope);
      dxl[k] += factor * alpha * dout[k] + dz[k];
      datt[k] += ds * leaky_relu(z[k], negative_slope);
    }
  }

  // Sums the head's slots' sums (every slot gets the total).
  __device__ __forceinline__ void merge_slots(const GatShape& s) {
    sum_over_slots(dxl, s);
    sum_over_slots(datt, s);
  }
};

// The destination pass's sums over entries [begin, end) of `row`, head h,
// merged over the head's slots.
template <typename Traits>
__device__ __forceinline__ DestinationSums<Traits> destination_sums(
    const pygio_gatv2_backward_params& p, const GatShape& s, int lane, int64_t row, int64_t h,
    int64_t begin, int64_t end) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kUnroll;
  float att[E], xr[E], dout[E];
  load_att<Traits>(p.att + h * s.channels, s, lane, att);
  load_slice<Traits>(static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride +
                         h * s.channels, s, lane, xr);
  load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + row * s.width() + h * s.channels,
                     s, lane, dout);
  const float lse = p.lse[row * s.heads + h];
  DestinationSums<Traits> sums;
  for_each_step<Traits, true>(
      p, s, lane, h, begin, end, att, xr, dout,
      [&](const WalkStep<U, 1, index_t>& step, const float (&score)[U], const float (&dot)[U],
          const EntryValues<Traits, U>& values) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (!step.real(u)) continue;
          float xl[E], z[E];
          values(u, xl, z);
          sums.add(softmax_exp(score[u] - lse), dropout_factor(p.seed, step.pos(u), h, p.dropout_p),
                   dot[u], att, z, p.negative_slope);
        }
      });
  sums.merge_slots(s);
  return sums;
}

// The source pass's sums over entries [begin, end) of row `src` of a_t,
// head h (i = col_t[t], e = perm_t[t]), merged over the head's slots; dz
// written to grad_edge[e] where edge is given and the group is `active`.
// g: G from the destination pass.
template <typename Traits>
__device__ __forceinline__ SourceSums<Traits> source_grads(const pygio_gatv2_backward_params& p,
                                                           const GatShape& s, int lane,
                                                           int64_t src, int64_t h, bool active,
                                                           int64_t begin, int64_t end,
                                                           const float* __restrict__ g) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kSourceUnroll;
  SourceSums<Traits> sums;
  if (begin == end) return sums;  // x_l may be NULL without entries
  const auto* __restrict__ x_r = static_cast<const scalar_t*>(p.x_r) + h * s.channels;
  const auto* __restrict__ grad_out = static_cast<const scalar_t*>(p.grad_out) + h * s.channels;
  const bool has_edge = has_edges<Traits>(p);
  const scalar_t* __restrict__ edge =
      has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
  float att[E], xl[E];
  load_att<Traits>(p.att + h * s.channels, s, lane, att);
  load_slice<Traits>(static_cast<const scalar_t*>(p.x_l) + src * p.x_l_row_stride +
                         h * s.channels, s, lane, xl);
  const index_t* const index[2] = {static_cast<const index_t*>(p.a_t.col),
                                   static_cast<const index_t*>(p.perm_t)};
  const uint64_t x_r_row_bytes = p.x_r_row_stride * sizeof(scalar_t);
  const uint64_t row_bytes = s.width() * sizeof(scalar_t);  // grad_out, edge
  const uint64_t heads_bytes = s.heads * sizeof(float);     // lse, g
  walk_row<U, 2>(s, lane, begin, end, index, [&](const WalkStep<U, 2, index_t>& step) {
    RawSlice<Traits> xr_raw[U], dout_raw[U], edge_raw[U];
    float lse[U], g_dst[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const index_t dst = step.index[0][u];
      if (step.real(u)) {
        xr_raw[u].load(row_address(x_r, dst, x_r_row_bytes), s, lane);
        dout_raw[u].load(row_address(grad_out, dst, row_bytes), s, lane);
        lse[u] = *row_address(p.lse + h, dst, heads_bytes);
        g_dst[u] = *row_address(g + h, dst, heads_bytes);
      } else {
        xr_raw[u].clear();
        dout_raw[u].clear();
        lse[u] = g_dst[u] = 0.f;
      }
      if (step.real(u) && has_edge)
        edge_raw[u].load(row_address(edge, step.index[1][u], row_bytes), s, lane);
      else
        edge_raw[u].clear();
    }
    // Entry u's x_r and grad_out slices and z, widened from the loads.
    const auto values = [&](int u, float (&xr)[E], float (&dout)[E], float (&z)[E]) {
      float edge_values[E];
      xr_raw[u].to_float(xr);
      dout_raw[u].to_float(dout);
      edge_raw[u].to_float(edge_values);
      entry_z(xl, xr, has_edge, edge_values, z);
    };
    float dots[2 * U];  // scores, then dots <grad_out[i], x_l[src]>
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xr[E], dout[E], z[E];
      values(u, xr, dout, z);
      dots[u] = score_part(z, att, p.negative_slope);
      dots[U + u] = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) dots[U + u] += dout[k] * xl[k];
    }
    group_sums(dots, s.layout);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!step.real(u)) continue;
      float xr[E], dout[E], z[E], dz[E];
      values(u, xr, dout, z);
      const int64_t e = step.index[1][u];
      sums.add(softmax_exp(dots[u] - lse[u]), dropout_factor(p.seed, e, h, p.dropout_p),
               dots[U + u], g_dst[u], att, z, dout, p.negative_slope, dz);
      if (has_edge && active)
        store_slice<Traits>(static_cast<scalar_t*>(p.grad_edge) + e * s.width() + h * s.channels,
                            s, lane, dz);
    }
  });
  sums.merge_slots(s);
  return sums;
}

// grad_x_r and G of every row of a that is not a hub: a warp per row
// (grid-stride), its heads in passes; rows above the hub threshold are
// registered for gatv2_backward_hub_rows_kernel instead (their G zeroed
// for its atomics).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_backward_rows_kernel(const __grid_constant__ pygio_gatv2_backward_params p, GatShape s,
                               GatGradHubs hubs, float* __restrict__ g) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
  for_each_row(rowptr, p.a.num_rows, first, warps, [&](int64_t row, int64_t begin, int64_t end) {
    if (end - begin > threshold && register_hub(hubs.list, row, end - begin, kGatHubChunk, lane)) {
      for (int64_t h = lane; h < s.heads; h += kWarpSize) g[row * s.heads + h] = 0.f;
      return;
    }
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      const DestinationSums<Traits> sums =
          destination_sums<Traits>(p, s, lane, row, head.h, begin, end);
      if (!head.active || s.slot(lane) != 0) continue;
      float dxr[E];
      sums.grad_x_r(dxr);
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_r) + row * p.grad_x_r_row_stride +
                              head.h * s.channels, s, lane, dxr);
      if (s.layout.lane_in_group(lane) == 0) g[row * s.heads + head.h] = sums.g;
    }
  });
}

// G, A and B of each (hub chunk, head) of a added to the hub's (G in g, A
// and B in the accumulator): a warp per (chunk, pass of heads).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_backward_hub_rows_kernel(const __grid_constant__ pygio_gatv2_backward_params p,
                                   GatShape s, GatGradHubs hubs, float* __restrict__ g) {
  using index_t = typename Traits::index_t;
  const int lane = threadIdx.x % kWarpSize;
  for_each_hub_chunk<Traits::kWarpsPerBlock>(
      hubs.list, static_cast<const index_t*>(p.a.rowptr), s, lane,
      hub_items_by_block<Traits::kWarpsPerBlock>(hubs.list, s),
      [&](int64_t, int64_t slot, const PassHead& head, int64_t begin, int64_t end) {
        const int64_t row = hubs.list.hubs[slot].row;
        const DestinationSums<Traits> sums =
            destination_sums<Traits>(p, s, lane, row, head.h, begin, end);
        if (!head.active || s.slot(lane) != 0) return;
        float* acc = hubs.acc + 2 * slot * s.width() + head.h * s.channels;
        atomic_add_slice<Traits>(acc, s, lane, sums.a);
        atomic_add_slice<Traits>(acc + s.width(), s, lane, sums.b);
        if (s.layout.lane_in_group(lane) == 0) atomicAdd(g + row * s.heads + head.h, sums.g);
      });
}

// grad_x_r[row, h, :] = A - G[row, h] B of each registered hub of a: a warp per hub.
template <typename scalar_t>
__global__ void gatv2_backward_hub_rows_finish_kernel(const __grid_constant__
                                                      pygio_gatv2_backward_params p,
                                                      GatShape s, GatGradHubs hubs,
                                                      const float* __restrict__ g) {
  for_each_hub_warp(hubs, [&](int64_t slot, int64_t row, int lane) {
    const float* a = hubs.acc + 2 * slot * s.width();
    for (int64_t k = lane; k < s.width(); k += kWarpSize) {
      const float dxr = a[k] - g[row * s.heads + k / s.channels] * a[s.width() + k];
      static_cast<scalar_t*>(p.grad_x_r)[row * p.grad_x_r_row_stride + k] =
          DTypeTraits<scalar_t>::store(dxr);
    }
  });
}

// grad_x_l, grad_edge and grad_att terms of every row of a_t that is not a
// hub: a warp per row (grid-stride), its heads in passes; rows above the
// hub threshold are registered for gatv2_backward_hub_sources_kernel instead.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_backward_sources_kernel(const __grid_constant__ pygio_gatv2_backward_params p,
                                  GatShape s, GatGradHubs hubs, const float* __restrict__ g,
                                  bool shared_att) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  float* att_sums = begin_att_sums(p, s, shared_att);
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
  for_each_row(rowptr_t, p.a_t.num_rows, first, warps, [&](int64_t src, int64_t begin,
                                                           int64_t end) {
    if (end - begin > threshold && register_hub(hubs.list, src, end - begin, kGatHubChunk, lane))
      return;
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      const SourceSums<Traits> sums =
          source_grads<Traits>(p, s, lane, src, head.h, head.active, begin, end, g);
      if (!head.active || s.slot(lane) != 0) continue;
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_x_l) + src * p.grad_x_l_row_stride +
                              head.h * s.channels, s, lane, sums.dxl);
      if (begin < end)
        atomic_add_slice<Traits>(att_sums + head.h * s.channels, s, lane, sums.datt);
    }
  });
  end_att_sums(p, s, shared_att);
}

// The grad_x_l terms of each (hub chunk, head) of a_t added to the hub's
// accumulator (grad_edge and grad_att as in gatv2_backward_sources_kernel):
// a warp per (chunk, pass of heads).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kBackwardMinBlocks)
    gatv2_backward_hub_sources_kernel(const __grid_constant__ pygio_gatv2_backward_params p,
                                      GatShape s, GatGradHubs hubs, const float* __restrict__ g,
                                      bool shared_att) {
  using index_t = typename Traits::index_t;
  float* att_sums = begin_att_sums(p, s, shared_att);
  const int lane = threadIdx.x % kWarpSize;
  for_each_hub_chunk<Traits::kWarpsPerBlock>(
      hubs.list, static_cast<const index_t*>(p.a_t.rowptr), s, lane,
      hub_items_by_block<Traits::kWarpsPerBlock>(hubs.list, s),
      [&](int64_t, int64_t slot, const PassHead& head, int64_t begin, int64_t end) {
        const SourceSums<Traits> sums = source_grads<Traits>(
            p, s, lane, hubs.list.hubs[slot].row, head.h, head.active, begin, end, g);
        if (!head.active || s.slot(lane) != 0) return;
        atomic_add_slice<Traits>(hubs.acc + slot * s.width() + head.h * s.channels, s, lane,
                                 sums.dxl);
        atomic_add_slice<Traits>(att_sums + head.h * s.channels, s, lane, sums.datt);
      });
  end_att_sums(p, s, shared_att);
}

}  // namespace pygio
