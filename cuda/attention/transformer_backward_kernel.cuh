// Graph-transformer attention backward (contract: pygio_transformer_backward).
// With alpha recomputed from lse, f = keep(e,h)/(1-p), key = k[j] (+ edge[e]),
// value = v[j] (+ edge[e]):
//   Delta[i,h] = <grad_out[i,h], out[i,h]>,
//   ds[e,h]    = alpha (f <grad_out[i,h], value> - Delta[i,h]).
// Destination pass, over a (rows = destinations i):
//   grad_q[i] = scale sum_e ds key; Delta into the workspace for the source pass.
//  - transformer_backward_rows_kernel: a warp per row, its heads in passes;
//    a row above the hub threshold only gets its Delta and is registered;
//  - transformer_backward_hub_rows_kernel: a warp per (hub chunk, pass of
//    heads) adds the chunk's grad_q terms to the hub's fp32 accumulator;
// Source pass, over a_t (rows = sources j; perm_t gives each entry's CSR
// position e, for edge and the dropout counter), after the first:
//   grad_k[j] = scale sum_e ds q[i],  grad_v[j] = sum_e f alpha grad_out[i],
//   grad_edge[e] = scale ds q[i] + f alpha grad_out[i],
//  - transformer_backward_sources_kernel: a warp per row, its heads in
//    passes, both sums in registers and written once; a row above the hub
//    threshold is only registered;
//  - transformer_backward_hub_sources_kernel: a warp per (hub chunk, pass of
//    heads) adds the chunk's terms to the hub's accumulators.
// attention_hub_rows_finish_kernel (gatv2_traits.cuh) writes each pass's hub
// accumulators out.
// Each entry gathers two rows in either pass (k and v, then q and grad_out)
// plus its edge row; kUnroll entries a step (twice measured slower here).
#pragma once

#include "transformer_kernel.cuh"

namespace pygio {

// Blocks an SM holds at least in the four kernels below: the traits' rule
// where a lane holds one piece of a head; with several pieces (the heads
// of one pass; transformer_launch.cu's backward plan) 3 in fp32 and 2 in
// 16-bit, where ptxas chose 125-182 registers (8-16 warps an SM) and now
// keeps 80 or 128, spilling up to 190 bytes (4 blocks in fp32, 64
// registers: 10-35% slower; one pass's kernels at another bound than the
// other's, either way in either dtype: 0-38% slower).
template <typename Traits>
constexpr int transformer_backward_min_blocks() {
  return Traits::kOnePiece ? Traits::kBackwardMinBlocks
                           : sizeof(typename Traits::scalar_t) == 4 ? 3 : 2;
}

// Delta[row, h] = <grad_out[row, h], out[row, h]> (every lane of the group gets it).
template <typename Traits>
__device__ __forceinline__ float row_delta(const pygio_transformer_backward_params& p,
                                           const GatShape& s, int lane, int64_t row, int64_t h) {
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  const int64_t node_head = row * s.width() + h * s.channels;
  float dout[E], out[E];
  load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + node_head, s, lane, dout);
  load_slice<Traits>(static_cast<const scalar_t*>(p.out) + node_head, s, lane, out);
  float part = 0.f;
#pragma unroll
  for (int k = 0; k < E; ++k) part += dout[k] * out[k];
  return group_sum(part, s.layout);
}

// acc = scale sum_e ds (k[j] (+ edge[e])) over entries [begin, end) of
// `row`, head h, merged over the head's slots.
template <typename Traits>
__device__ __forceinline__ void query_grad(const pygio_transformer_backward_params& p,
                                           const GatShape& s, int lane, int64_t row, int64_t h,
                                           int64_t begin, int64_t end, float delta,
                                           float (&acc)[Traits::kElems]) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kUnroll;
  const index_t* const index[1] = {static_cast<const index_t*>(p.a.col)};
  const bool has_edge = has_edges<Traits>(p);
  float q[E], dout[E];
  load_slice<Traits>(static_cast<const scalar_t*>(p.q) + row * p.q_row_stride + h * s.channels,
                     s, lane, q);
  load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + row * s.width() + h * s.channels,
                     s, lane, dout);
  const float lse = p.lse[row * s.heads + h];
  const auto* __restrict__ k_head = static_cast<const scalar_t*>(p.k) + h * s.channels;
  const auto* __restrict__ v_head = static_cast<const scalar_t*>(p.v) + h * s.channels;
  const scalar_t* __restrict__ edge =
      has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
  const uint64_t k_row_bytes = p.k_row_stride * sizeof(scalar_t);
  const uint64_t v_row_bytes = p.v_row_stride * sizeof(scalar_t);
  const uint64_t edge_row_bytes = s.width() * sizeof(scalar_t);
#pragma unroll
  for (int k = 0; k < E; ++k) acc[k] = 0.f;
  const int line = s.layout.lane_in_group(lane) * 128;
  const int slice_bytes = static_cast<int>(s.channels * sizeof(scalar_t));
  const auto prefetch_rows = [&](index_t j) {
    prefetch_head_slice(k_head, j, k_row_bytes, line, slice_bytes);
    prefetch_head_slice(v_head, j, v_row_bytes, line, slice_bytes);
  };
  const auto step = [&](const WalkStep<U, 1, index_t>& walk) {
    RawSlice<Traits> key_raw[U], value_raw[U], edge_raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const index_t j = walk.index[0][u];
      if (walk.real(u)) {
        key_raw[u].load(row_address(k_head, j, k_row_bytes), s, lane);
        value_raw[u].load(row_address(v_head, j, v_row_bytes), s, lane);
      } else {
        key_raw[u].clear();
        value_raw[u].clear();
      }
      if (walk.real(u) && has_edge)
        edge_raw[u].load(row_address(edge, walk.offset(u), edge_row_bytes), s, lane);
      else edge_raw[u].clear();
    }
    const TransformerValues<Traits, U> values{value_raw, edge_raw, has_edge};
    float sums[2 * U];  // score parts, then <grad_out, value> parts
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float key[E], value[E], edge_values[E];
      key_raw[u].to_float(key);
      edge_raw[u].to_float(edge_values);
      sums[u] = key_part(q, key, has_edge, edge_values);
      values(u, value);
      sums[U + u] = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) sums[U + u] += dout[k] * value[k];
    }
    group_sums(sums, s.layout);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!walk.real(u)) continue;
      const float alpha = softmax_exp(sums[u] * p.scale - lse);
      const float f = dropout_factor(p.seed, walk.pos(u), h, p.dropout_p);
      const float ds = alpha * (f * sums[U + u] - delta);
      float key[E], edge_values[E];
      key_raw[u].to_float(key);
      edge_raw[u].to_float(edge_values);
      add_edge(key, has_edge, edge_values);
#pragma unroll
      for (int k = 0; k < E; ++k) acc[k] += ds * key[k];
    }
  };
  transformer_walk_row<Traits, U>(s, lane, begin, end, index, step, prefetch_rows);
  sum_over_slots(acc, s);
#pragma unroll
  for (int k = 0; k < E; ++k) acc[k] *= p.scale;
}

// grad_q and Delta of every row of a that is not a hub: a warp per row
// (grid-stride), its heads in passes; a row above the hub threshold gets
// its Delta and is registered for transformer_backward_hub_rows_kernel.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, transformer_backward_min_blocks<Traits>())
    transformer_backward_rows_kernel(const __grid_constant__ pygio_transformer_backward_params p,
                                     GatShape s, GatGradHubs hubs, float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                     threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    const bool hub =
        end - begin > threshold && register_hub(hubs.list, row, end - begin, kGatHubChunk, lane);
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      const float row_d = row_delta<Traits>(p, s, lane, row, head.h);
      if (head.active && s.slot(lane) == 0 && s.layout.lane_in_group(lane) == 0)
        delta[row * s.heads + head.h] = row_d;
      if (hub) continue;
      float acc[Traits::kElems];
      query_grad<Traits>(p, s, lane, row, head.h, begin, end, row_d, acc);
      if (!head.active || s.slot(lane) != 0) continue;
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_q) + row * p.grad_q_row_stride +
                              head.h * s.channels, s, lane, acc);
    }
  }
}

// The grad_q terms of each (hub chunk, head) of a added to the hub's
// accumulator: a warp per (chunk, pass of heads).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, transformer_backward_min_blocks<Traits>())
    transformer_backward_hub_rows_kernel(
        const __grid_constant__ pygio_transformer_backward_params p, GatShape s,
        GatGradHubs hubs, const float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  const int lane = threadIdx.x % kWarpSize;
  for_each_hub_chunk<Traits::kWarpsPerBlock>(
      hubs.list, static_cast<const index_t*>(p.a.rowptr), s, lane,
      hub_items_by_block<Traits::kWarpsPerBlock>(hubs.list, s),
      [&](int64_t, int64_t slot, const PassHead& head, int64_t begin, int64_t end) {
        const int64_t row = hubs.list.hubs[slot].row;
        float acc[Traits::kElems];
        query_grad<Traits>(p, s, lane, row, head.h, begin, end, delta[row * s.heads + head.h],
                           acc);
        if (!head.active || s.slot(lane) != 0) return;
        atomic_add_slice<Traits>(hubs.acc + slot * s.width() + head.h * s.channels, s, lane,
                                 acc);
      });
}

// acc_k = scale sum_e ds q[i], acc_v = sum_e f alpha grad_out[i] over
// entries [begin, end) of row `source` of a_t, head h, merged over the
// head's slots; grad_edge of each entry written where the head is active.
template <typename Traits>
__device__ __forceinline__ void source_grads(const pygio_transformer_backward_params& p,
                                             const GatShape& s, int lane, int64_t source,
                                             int64_t h, bool active, int64_t begin, int64_t end,
                                             const float* __restrict__ delta,
                                             float (&acc_k)[Traits::kElems],
                                             float (&acc_v)[Traits::kElems]) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kUnroll;
  const index_t* const index[2] = {static_cast<const index_t*>(p.a_t.col),
                                   static_cast<const index_t*>(p.perm_t)};
  const bool has_edge = has_edges<Traits>(p);
  float k[E], v[E];
  load_slice<Traits>(static_cast<const scalar_t*>(p.k) + source * p.k_row_stride +
                         h * s.channels, s, lane, k);
  load_slice<Traits>(static_cast<const scalar_t*>(p.v) + source * p.v_row_stride +
                         h * s.channels, s, lane, v);
  const auto* __restrict__ q_head = static_cast<const scalar_t*>(p.q) + h * s.channels;
  const auto* __restrict__ dout_head = static_cast<const scalar_t*>(p.grad_out) + h * s.channels;
  const scalar_t* __restrict__ edge =
      has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
  scalar_t* __restrict__ grad_edge =
      has_edge ? static_cast<scalar_t*>(p.grad_edge) + h * s.channels : nullptr;
  const uint64_t q_row_bytes = p.q_row_stride * sizeof(scalar_t);
  const uint64_t row_bytes = s.width() * sizeof(scalar_t);  // grad_out, edge
  const uint64_t heads_bytes = s.heads * sizeof(float);     // lse, delta
#pragma unroll
  for (int c = 0; c < E; ++c) acc_k[c] = acc_v[c] = 0.f;
  const int line = s.layout.lane_in_group(lane) * 128;
  const int slice_bytes = static_cast<int>(s.channels * sizeof(scalar_t));
  const auto prefetch_rows = [&](index_t i) {
    prefetch_head_slice(q_head, i, q_row_bytes, line, slice_bytes);
    prefetch_head_slice(dout_head, i, row_bytes, line, slice_bytes);
  };
  const auto step = [&](const WalkStep<U, 2, index_t>& walk) {
    RawSlice<Traits> q_raw[U], dout_raw[U], edge_raw[U];
    float lse[U], row_d[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const index_t i = walk.index[0][u], e = walk.index[1][u];
      if (walk.real(u)) {
        q_raw[u].load(row_address(q_head, i, q_row_bytes), s, lane);
        dout_raw[u].load(row_address(dout_head, i, row_bytes), s, lane);
        lse[u] = *row_address(p.lse + h, i, heads_bytes);
        row_d[u] = *row_address(delta + h, i, heads_bytes);
      } else {
        q_raw[u].clear();
        dout_raw[u].clear();
        lse[u] = row_d[u] = 0.f;
      }
      if (walk.real(u) && has_edge) edge_raw[u].load(row_address(edge, e, row_bytes), s, lane);
      else edge_raw[u].clear();
    }
    float sums[2 * U];  // score parts, then <grad_out, value> parts
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float q[E], dout[E], edge_values[E], value[E];
      q_raw[u].to_float(q);
      dout_raw[u].to_float(dout);
      edge_raw[u].to_float(edge_values);
      sums[u] = key_part(q, k, has_edge, edge_values);
#pragma unroll
      for (int c = 0; c < E; ++c) value[c] = v[c];
      add_edge(value, has_edge, edge_values);
      sums[U + u] = 0.f;
#pragma unroll
      for (int c = 0; c < E; ++c) sums[U + u] += dout[c] * value[c];
    }
    group_sums(sums, s.layout);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!walk.real(u)) continue;
      const int64_t e = walk.index[1][u];
      const float alpha = softmax_exp(sums[u] * p.scale - lse[u]);
      const float fa = dropout_factor(p.seed, e, h, p.dropout_p) * alpha;
      const float ds = fa * sums[U + u] - alpha * row_d[u];
      float q[E], dout[E];
      q_raw[u].to_float(q);
      dout_raw[u].to_float(dout);
#pragma unroll
      for (int c = 0; c < E; ++c) {
        acc_k[c] += ds * q[c];
        acc_v[c] += fa * dout[c];
      }
      if (has_edge && active) {
        float d_edge[E];
#pragma unroll
        for (int c = 0; c < E; ++c) d_edge[c] = p.scale * ds * q[c] + fa * dout[c];
        store_slice<Traits>(grad_edge + e * s.width(), s, lane, d_edge);
      }
    }
  };
  transformer_walk_row<Traits, U>(s, lane, begin, end, index, step, prefetch_rows);
  sum_over_slots(acc_k, s);
  sum_over_slots(acc_v, s);
#pragma unroll
  for (int c = 0; c < E; ++c) acc_k[c] *= p.scale;
}

// grad_k, grad_v (and grad_edge) of every row of a_t that is not a hub: a
// warp per row (grid-stride), its heads in passes; rows above the hub
// threshold are registered for transformer_backward_hub_sources_kernel.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, transformer_backward_min_blocks<Traits>())
    transformer_backward_sources_kernel(
        const __grid_constant__ pygio_transformer_backward_params p, GatShape s,
        GatGradHubs hubs, const float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems;
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  for (int64_t source = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                        threadIdx.x / kWarpSize;
       source < p.a_t.num_rows; source += warps) {
    const int64_t begin = rowptr_t[source], end = rowptr_t[source + 1];
    if (end - begin > threshold &&
        register_hub(hubs.list, source, end - begin, kGatHubChunk, lane))
      continue;
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      float acc_k[E], acc_v[E];
      source_grads<Traits>(p, s, lane, source, head.h, head.active, begin, end, delta, acc_k,
                           acc_v);
      if (!head.active || s.slot(lane) != 0) continue;
      const int64_t head_offset = head.h * s.channels;
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_k) + source * p.grad_k_row_stride +
                              head_offset, s, lane, acc_k);
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_v) + source * p.grad_v_row_stride +
                              head_offset, s, lane, acc_v);
    }
  }
}

// The grad_k and grad_v terms of each (hub chunk, head) of a_t added to
// the hub's accumulators ([slot, 2, heads * channels]; grad_edge written as
// in transformer_backward_sources_kernel): a warp per (chunk, pass of heads).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, transformer_backward_min_blocks<Traits>())
    transformer_backward_hub_sources_kernel(
        const __grid_constant__ pygio_transformer_backward_params p, GatShape s,
        GatGradHubs hubs, const float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  constexpr int E = Traits::kElems;
  const int lane = threadIdx.x % kWarpSize;
  for_each_hub_chunk<Traits::kWarpsPerBlock>(
      hubs.list, static_cast<const index_t*>(p.a_t.rowptr), s, lane,
      hub_items_by_block<Traits::kWarpsPerBlock>(hubs.list, s),
      [&](int64_t, int64_t slot, const PassHead& head, int64_t begin, int64_t end) {
        float acc_k[E], acc_v[E];
        source_grads<Traits>(p, s, lane, hubs.list.hubs[slot].row, head.h, head.active, begin,
                             end, delta, acc_k, acc_v);
        if (!head.active || s.slot(lane) != 0) return;
        float* acc = hubs.acc + 2 * slot * s.width() + head.h * s.channels;
        atomic_add_slice<Traits>(acc, s, lane, acc_k);
        atomic_add_slice<Traits>(acc + s.width(), s, lane, acc_v);
      });
}

}  // namespace pygio
