// GATv2 attention forward and attention weights (contracts: pygio_gatv2,
// pygio_gatv2_alpha in pyg_ioaware.h). For destination i, head h:
//   out[i,h,:] = sum_{e=(j->i)} keep(e,h)/(1-p) * alpha[e,h] * x_l[j,h,:],
//   alpha[e,h] = softmax over the row of s[e,h] = att[h,:] . leaky_relu(x_l[j,h,:] + x_r[i,h,:]
//                (+ edge[e,h,:])),
// in one pass over the row with an online softmax: nothing per entry is written.
#pragma once

#include "../common/hubs.cuh"
#include "gatv2_traits.cuh"

namespace pygio {

// Entries a group keeps in flight per loop step.
constexpr int kGatUnroll = 2;

// The hub list of a forward and the chunks' partial softmax states
// (m, l per chunk and head in `stats`, the accumulators in `partial`).
struct GatHubs {
  HubList list;
  const int64_t* degree;  // device scalar (NULL: no split)
  float* stats;
  float* partial;
};

// Loads x_l[j]'s slice of head h into xl and sets z = xl + xr (+ edge[e]).
template <typename Traits, typename Params>
__device__ __forceinline__ void load_entry(const Params& p, const GatShape& s, int lane,
                                           int64_t j, int64_t e, int64_t h,
                                           const float (&xr)[Traits::kElems],
                                           float (&xl)[Traits::kElems],
                                           float (&z)[Traits::kElems]) {
  using scalar_t = typename Traits::scalar_t;
  load_slice<Traits>(static_cast<const scalar_t*>(p.x_l) + j * p.x_l_row_stride + h * s.channels,
                     s, lane, xl);
#pragma unroll
  for (int k = 0; k < Traits::kElems; ++k) z[k] = xl[k] + xr[k];
  if (p.edge != nullptr) {
    float edge[Traits::kElems];
    load_slice<Traits>(static_cast<const scalar_t*>(p.edge) + e * s.width() + h * s.channels, s,
                       lane, edge);
#pragma unroll
    for (int k = 0; k < Traits::kElems; ++k) z[k] += edge[k];
  }
}

// Calls visit(e, real, xl, z, score) for the entries [begin, end) the
// caller's group takes (the warp's groups interleave, kGatUnroll entries in
// flight per group). Every lane of the warp makes the same calls, so visit
// may shuffle; `real` is false for the padding steps past `end` (whose xl
// and z are 0), where visit must have no other effect.
template <typename Traits, typename Params, typename Visit>
__device__ __forceinline__ void for_each_entry(const Params& p, const GatShape& s, int lane,
                                               int64_t h, int64_t begin,
                                               int64_t end, const float (&att)[Traits::kElems],
                                               const float (&xr)[Traits::kElems], Visit visit) {
  using index_t = typename Traits::index_t;
  const auto* col = static_cast<const index_t*>(p.a.col);
  const int groups = s.layout.sub_groups();
  const int group = s.layout.sub_group(lane);
  for (int64_t base = begin; base < end; base += kGatUnroll * groups) {
    float xl[kGatUnroll][Traits::kElems], z[kGatUnroll][Traits::kElems];
#pragma unroll
    for (int u = 0; u < kGatUnroll; ++u) {
      const int64_t e = base + u * groups + group;
      if (e < end) {
        load_entry<Traits>(p, s, lane, static_cast<int64_t>(col[e]), e, h, xr, xl[u], z[u]);
      } else {
#pragma unroll
        for (int k = 0; k < Traits::kElems; ++k) xl[u][k] = z[u][k] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kGatUnroll; ++u) {
      const int64_t e = base + u * groups + group;
      const float score = entry_score<Traits>(z[u], att, p.negative_slope, s.layout);
      visit(e, e < end, xl[u], z[u], score);
    }
  }
}

// The merged softmax state of entries [begin, end) of `row`, head h.
template <typename Traits>
__device__ __forceinline__ SoftmaxState<Traits::kElems> attend(const pygio_gatv2_params& p,
                                                               const GatShape& s, int lane,
                                                               int64_t row, int64_t h,
                                                               int64_t begin, int64_t end) {
  using scalar_t = typename Traits::scalar_t;
  float att[Traits::kElems], xr[Traits::kElems];
  load_att<Traits>(p.att + h * s.channels, s, lane, att);
  load_slice<Traits>(static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride + h * s.channels,
                     s, lane, xr);
  SoftmaxState<Traits::kElems> state;
  for_each_entry<Traits>(p, s, lane, h, begin, end, att, xr,
                         [&](int64_t e, bool real, const float (&xl)[Traits::kElems],
                             const float (&)[Traits::kElems], float score) {
                           if (real)
                             state.add(score, dropout_factor(p.seed, e, h, p.dropout_p), xl);
                         });
  state.merge_groups(s.layout);
  return state;
}

// out[row, h] = acc / l (0 for an empty row) from group 0; lse from lane 0.
template <typename Traits>
__device__ __forceinline__ void write_row(const pygio_gatv2_params& p, const GatShape& s,
                                          int lane, int64_t row, int64_t h,
                                          SoftmaxState<Traits::kElems>& state) {
  using scalar_t = typename Traits::scalar_t;
  if (s.layout.sub_group(lane) == 0) {
    const float inv = state.l > 0.f ? 1.f / state.l : 0.f;
#pragma unroll
    for (int k = 0; k < Traits::kElems; ++k) state.acc[k] *= inv;
    store_slice<Traits>(static_cast<scalar_t*>(p.out) + row * s.width() + h * s.channels, s, lane,
                        state.acc);
  }
  if (lane == 0) p.lse[row * s.heads + h] = state.lse();
}

__device__ __forceinline__ int64_t gat_hub_threshold(const GatHubs& hubs) {
  if (hubs.list.capacity == 0) return INT64_MAX;
  const int64_t degree = *hubs.degree;
  return degree > PYGIO_ATTENTION_MIN_HUB_DEGREE ? degree : PYGIO_ATTENTION_MIN_HUB_DEGREE;
}

// A warp per destination row (grid-stride), every head in turn; rows above
// the hub threshold are registered for gatv2_hub_chunks_kernel instead.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gatv2_rows_kernel(pygio_gatv2_params p, GatShape s, GatHubs hubs) {
  using index_t = typename Traits::index_t;
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs);
  for (int64_t row = blockIdx.x * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    if (end - begin > threshold && register_hub(hubs.list, row, end - begin, kGatHubChunk, lane))
      continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      SoftmaxState<Traits::kElems> state = attend<Traits>(p, s, lane, row, h, begin, end);
      write_row<Traits>(p, s, lane, row, h, state);
    }
  }
}

// A warp per (hub chunk, head): the chunk's partial softmax state.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gatv2_hub_chunks_kernel(pygio_gatv2_params p, GatShape s, GatHubs hubs) {
  using index_t = typename Traits::index_t;
  const int64_t num_hubs = hub_count(hubs.list);
  if (num_hubs == 0) return;
  const int64_t items = hub_chunk_count(hubs.list) * s.heads;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t item = blockIdx.x * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
       item < items; item += warps) {
    const int64_t chunk = item / s.heads, h = item % s.heads;
    int64_t begin, end;
    const int64_t slot = hub_chunk_range(hubs.list, num_hubs,
                                         static_cast<const index_t*>(p.a.rowptr), chunk,
                                         kGatHubChunk, &begin, &end);
    const SoftmaxState<Traits::kElems> state =
        attend<Traits>(p, s, lane, hubs.list.hubs[slot].row, h, begin, end);
    if (s.layout.sub_group(lane) == 0) {
      float* partial = hubs.partial + item * s.channels;
#pragma unroll
      for (int q = 0; q < Traits::kPieces; ++q) {
        const int64_t c = piece_channel<Traits>(s, lane, q);
        if (c < 0) continue;
#pragma unroll
        for (int i = 0; i < Traits::kVec; ++i) partial[c + i] = state.acc[q * Traits::kVec + i];
      }
    }
    if (lane == 0) {
      hubs.stats[2 * item] = state.m;
      hubs.stats[2 * item + 1] = state.l;
    }
  }
}

// A warp per (hub, head): merges the hub's chunk states into out and lse.
template <typename scalar_t, typename index_t>
__global__ void gatv2_hub_finish_kernel(pygio_gatv2_params p, GatShape s, GatHubs hubs) {
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t items = hub_count(hubs.list) * s.heads;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarpSize);
  for (int64_t item = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
       item < items; item += warps) {
    const int64_t slot = item / s.heads, h = item % s.heads;
    const HubEntry hub = hubs.list.hubs[slot];
    const int64_t chunks = (rowptr[hub.row + 1] - rowptr[hub.row] + kGatHubChunk - 1) / kGatHubChunk;
    const int64_t first = hub.first_chunk * s.heads + h;  // state index of chunk 0
    float m = -INFINITY;
    for (int64_t k = 0; k < chunks; ++k) m = fmaxf(m, hubs.stats[2 * (first + k * s.heads)]);
    float l = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t state = first + k * s.heads;
      l += hubs.stats[2 * state + 1] * expf(hubs.stats[2 * state] - m);
    }
    for (int64_t c = lane; c < s.channels; c += kWarpSize) {
      float acc = 0.f;
      for (int64_t k = 0; k < chunks; ++k) {
        const int64_t state = first + k * s.heads;
        acc += hubs.partial[state * s.channels + c] * expf(hubs.stats[2 * state] - m);
      }
      static_cast<scalar_t*>(p.out)[hub.row * s.width() + h * s.channels + c] =
          DTypeTraits<scalar_t>::store(acc / l);
    }
    if (lane == 0) p.lse[hub.row * s.heads + h] = m + logf(l);
  }
}

// alpha[e, h] = exp(s[e, h] - lse[i, h]): a warp per row, every head in turn.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    gatv2_alpha_kernel(pygio_gatv2_alpha_params p, GatShape s) {
  using index_t = typename Traits::index_t;
  using scalar_t = typename Traits::scalar_t;
  const auto* rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t row = blockIdx.x * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    for (int64_t h = 0; h < s.heads; ++h) {
      float att[Traits::kElems], xr[Traits::kElems];
      load_att<Traits>(p.att + h * s.channels, s, lane, att);
      load_slice<Traits>(
          static_cast<const scalar_t*>(p.x_r) + row * p.x_r_row_stride + h * s.channels, s,
          lane, xr);
      const float lse = p.lse[row * s.heads + h];
      for_each_entry<Traits>(p, s, lane, h, begin, end, att, xr,
                             [&](int64_t e, bool real, const float (&)[Traits::kElems],
                                 const float (&)[Traits::kElems], float score) {
                               if (real && s.layout.lane_in_group(lane) == 0)
                                 p.alpha[e * s.heads + h] = expf(score - lse);
                             });
    }
  }
}

}  // namespace pygio
