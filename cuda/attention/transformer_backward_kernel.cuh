// Graph-transformer attention backward (contract: pygio_transformer_backward).
// With alpha recomputed from lse, f = keep(e,h)/(1-p), key = k[j] (+ edge[e]),
// value = v[j] (+ edge[e]):
//   Delta[i,h] = <grad_out[i,h], out[i,h]>,
//   ds[e,h]    = alpha (f <grad_out[i,h], value> - Delta[i,h]).
// Destination pass, over a (rows = destinations i), a warp per row, its
// heads in passes (transformer_backward_rows_kernel):
//   grad_q[i] = scale sum_e ds key; Delta into the workspace.
// Source pass, over a_t (rows = sources j; perm_t gives each entry's CSR
// position e, for edge and the dropout counter), after the first
// (transformer_backward_sources_kernel), a warp per row:
//   grad_k[j] = scale sum_e ds q[i],  grad_v[j] = sum_e f alpha grad_out[i],
//   grad_edge[e] = scale ds q[i] + f alpha grad_out[i].
// Both sums stay in registers and are written once: no atomics. Each entry
// gathers two rows in either pass (k and v, then q and grad_out) plus its
// edge row. Hub rows are walked by one warp (not split) in this version.
#pragma once

#include "transformer_kernel.cuh"

namespace pygio {

// grad_q[i, h] and Delta[i, h] for every row i: a warp per row (grid-stride).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    transformer_backward_rows_kernel(const __grid_constant__ pygio_transformer_backward_params p,
                                     GatShape s, float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kSourceUnroll;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const index_t* const index[1] = {static_cast<const index_t*>(p.a.col)};
  const bool has_edge = p.edge != nullptr;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                     threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      const int64_t h = head.h;
      const int64_t node_head = row * s.width() + h * s.channels;
      float q[E], dout[E], out[E];
      load_slice<Traits>(static_cast<const scalar_t*>(p.q) + row * p.q_row_stride +
                             h * s.channels, s, lane, q);
      load_slice<Traits>(static_cast<const scalar_t*>(p.grad_out) + node_head, s, lane, dout);
      load_slice<Traits>(static_cast<const scalar_t*>(p.out) + node_head, s, lane, out);
      float delta_part = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) delta_part += dout[k] * out[k];
      const float row_delta = group_sum(delta_part, s.layout);
      const float lse = p.lse[row * s.heads + h];
      const auto* __restrict__ k_head = static_cast<const scalar_t*>(p.k) + h * s.channels;
      const auto* __restrict__ v_head = static_cast<const scalar_t*>(p.v) + h * s.channels;
      const scalar_t* __restrict__ edge =
          has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
      float acc[E] = {};
      walk_row<U, 1>(s, lane, begin, end, index, [&](const WalkStep<U, 1, index_t>& walk) {
        RawSlice<Traits> key_raw[U], value_raw[U], edge_raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t j = walk.index[0][u];
          if (walk.real(u)) {
            key_raw[u].load(k_head + j * p.k_row_stride, s, lane);
            value_raw[u].load(v_head + j * p.v_row_stride, s, lane);
          } else {
            key_raw[u].clear();
            value_raw[u].clear();
          }
          if (walk.real(u) && has_edge) edge_raw[u].load(edge + walk.pos(u) * s.width(), s, lane);
          else edge_raw[u].clear();
        }
        float sums[2 * U];  // score parts, then <grad_out, value> parts
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float key[E], value[E], edge_values[E];
          key_raw[u].to_float(key);
          value_raw[u].to_float(value);
          edge_raw[u].to_float(edge_values);
          sums[u] = key_part(q, key, has_edge, edge_values);
          add_edge(value, has_edge, edge_values);
          sums[U + u] = 0.f;
#pragma unroll
          for (int k = 0; k < E; ++k) sums[U + u] += dout[k] * value[k];
        }
        group_sums(sums, s.layout);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (!walk.real(u)) continue;
          const float alpha = expf(sums[u] * p.scale - lse);
          const float f = dropout_factor(p.seed, walk.pos(u), h, p.dropout_p);
          const float ds = alpha * (f * sums[U + u] - row_delta);
          float key[E], edge_values[E];
          key_raw[u].to_float(key);
          edge_raw[u].to_float(edge_values);
          add_edge(key, has_edge, edge_values);
#pragma unroll
          for (int k = 0; k < E; ++k) acc[k] += ds * key[k];
        }
      });
      sum_over_slots(acc, s);
      if (!head.active || s.slot(lane) != 0) continue;
#pragma unroll
      for (int k = 0; k < E; ++k) acc[k] *= p.scale;
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_q) + node_head, s, lane, acc);
      if (s.layout.lane_in_group(lane) == 0) delta[row * s.heads + h] = row_delta;
    }
  }
}

// grad_k[j, h], grad_v[j, h] for every source j and grad_edge of its
// entries: a warp per row of a_t (grid-stride), after the rows kernel.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    transformer_backward_sources_kernel(
        const __grid_constant__ pygio_transformer_backward_params p, GatShape s,
        const float* __restrict__ delta) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  constexpr int E = Traits::kElems, U = Traits::kSourceUnroll;
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const index_t* const index[2] = {static_cast<const index_t*>(p.a_t.col),
                                   static_cast<const index_t*>(p.perm_t)};
  const bool has_edge = p.edge != nullptr;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t source = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                        threadIdx.x / kWarpSize;
       source < p.a_t.num_rows; source += warps) {
    const int64_t begin = rowptr_t[source], end = rowptr_t[source + 1];
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      const int64_t h = head.h;
      float k[E], v[E];
      load_slice<Traits>(static_cast<const scalar_t*>(p.k) + source * p.k_row_stride +
                             h * s.channels, s, lane, k);
      load_slice<Traits>(static_cast<const scalar_t*>(p.v) + source * p.v_row_stride +
                             h * s.channels, s, lane, v);
      const auto* __restrict__ q_head = static_cast<const scalar_t*>(p.q) + h * s.channels;
      const auto* __restrict__ dout_head =
          static_cast<const scalar_t*>(p.grad_out) + h * s.channels;
      const scalar_t* __restrict__ edge =
          has_edge ? static_cast<const scalar_t*>(p.edge) + h * s.channels : nullptr;
      scalar_t* __restrict__ grad_edge =
          has_edge ? static_cast<scalar_t*>(p.grad_edge) + h * s.channels : nullptr;
      float acc_k[E] = {}, acc_v[E] = {};
      walk_row<U, 2>(s, lane, begin, end, index, [&](const WalkStep<U, 2, index_t>& walk) {
        RawSlice<Traits> q_raw[U], dout_raw[U], edge_raw[U];
        float lse[U], row_delta[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t i = walk.index[0][u], e = walk.index[1][u];
          if (walk.real(u)) {
            q_raw[u].load(q_head + i * p.q_row_stride, s, lane);
            dout_raw[u].load(dout_head + i * s.width(), s, lane);
            lse[u] = p.lse[i * s.heads + h];
            row_delta[u] = delta[i * s.heads + h];
          } else {
            q_raw[u].clear();
            dout_raw[u].clear();
            lse[u] = 0.f;
            row_delta[u] = 0.f;
          }
          if (walk.real(u) && has_edge) edge_raw[u].load(edge + e * s.width(), s, lane);
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
          const float alpha = expf(sums[u] * p.scale - lse[u]);
          const float fa = dropout_factor(p.seed, e, h, p.dropout_p) * alpha;
          const float ds = fa * sums[U + u] - alpha * row_delta[u];
          float q[E], dout[E];
          q_raw[u].to_float(q);
          dout_raw[u].to_float(dout);
#pragma unroll
          for (int c = 0; c < E; ++c) {
            acc_k[c] += ds * q[c];
            acc_v[c] += fa * dout[c];
          }
          if (has_edge && head.active) {
            float d_edge[E];
#pragma unroll
            for (int c = 0; c < E; ++c) d_edge[c] = p.scale * ds * q[c] + fa * dout[c];
            store_slice<Traits>(grad_edge + e * s.width(), s, lane, d_edge);
          }
        }
      });
      sum_over_slots(acc_k, s);
      sum_over_slots(acc_v, s);
      if (!head.active || s.slot(lane) != 0) continue;
#pragma unroll
      for (int c = 0; c < E; ++c) acc_k[c] *= p.scale;
      const int64_t node_head = source * s.width() + h * s.channels;
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_k) + node_head, s, lane, acc_k);
      store_slice<Traits>(static_cast<scalar_t*>(p.grad_v) + node_head, s, lane, acc_v);
    }
  }
}

}  // namespace pygio
