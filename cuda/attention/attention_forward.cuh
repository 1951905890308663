// The attention family's forward kernels, shared by its members (GATv2,
// graph-transformer attention): a member (Family) supplies only the scores
// and values of a row's entries, these kernels do the rest. For
// destination i, head h:
//   lse[i,h] = log sum_{e into i} exp(s[e,h]),
//   out[i,h,:] = sum_{e into i} keep(e,h)/(1-p) * exp(s[e,h] - lse[i,h]) * value[e,h,:],
//   alpha[e,h] = exp(s[e,h] - lse[i,h])   (attention weights, on request).
// One pass over each row with an online softmax: nothing per entry written.
//  - attention_rows_kernel: a warp per destination row, its heads in
//    passes; a row above the hub threshold is only registered;
//  - attention_hub_chunks_kernel: a warp (for few hubs, a block) per
//    (kGatHubChunk-entry chunk of a hub, pass of heads): the chunk's
//    softmax states (m, l, acc) into the workspace (launched in both
//    forms, one returning at once);
//  - attention_hub_finish_kernel: a warp per (hub, head) merges its chunks'
//    states (log-sum-exp) into out and lse;
//  - attention_alpha_kernel: a warp per kGatAlphaChunk entries.
//
// A Family is a struct with
//   template <typename Traits> static constexpr int unroll();  // entries a step
//   template <typename Traits> static constexpr int min_blocks();  // of the rows and
//       // hub-chunk kernels an SM holds at least (__launch_bounds__; 0: ptxas's choice)
//   template <typename Traits, int U> using Entries = ...;     // a step's values
//   template <typename Traits, bool kValues, typename P, typename Step>
//   static __device__ void for_each_score(const P& p, const GatShape& s, int lane,
//                                         int64_t row, int64_t h, int64_t begin,
//                                         int64_t end, Step step);
// calling step(WalkStep<U, 1, index_t> walk, const float (&score)[U],
// const Entries<Traits, U>& values) for each step of the caller's slot over
// entries [begin, end) of `row`, head h, with every lane of the warp making
// the same calls; values(u, v) fills entry u's value slice (only called
// with kValues). (Named types, not generic lambdas: nvcc 13.0's front end
// crashes on auto parameters here.) Params P carry
// a (the CSR), heads, channels, dropout_p, seed, hub_degree, max_hubs, out,
// lse and workspace under those names.
#pragma once

#include "../common/hubs.cuh"
#include "../common/row_loop.cuh"
#include "gatv2_traits.cuh"

namespace pygio {

// The forward's hub list and its chunks' partial softmax states.
struct GatHubs {
  HubList list;
  const int64_t* degree;  // device scalar (NULL: no split)
  float* stats;           // [chunks, heads, 2]: m, l
  float* partial;         // [chunks, heads, channels]: acc
};

// Entries per warp of the attention-weights kernel.
constexpr int64_t kGatAlphaChunk = 1024;

// The softmax state of entries [begin, end) of `row`, head h, merged over
// the head's slots. A step raises the maximum once for all its entries.
template <typename Family, typename Traits, typename P>
__device__ __forceinline__ SoftmaxState<Traits::kElems> attend(const P& p, const GatShape& s,
                                                               int lane, int64_t row, int64_t h,
                                                               int64_t begin, int64_t end) {
  using index_t = typename Traits::index_t;
  constexpr int E = Traits::kElems, U = Family::template unroll<Traits>();
  SoftmaxState<E> state;
  Family::template for_each_score<Traits, true>(
      p, s, lane, row, h, begin, end,
      [&](const WalkStep<U, 1, index_t>& step, const float (&score)[U],
          const typename Family::template Entries<Traits, U>& values) {
        float m_new = state.m;
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (step.real(u)) m_new = fmaxf(m_new, score[u]);
        if (m_new > state.m) state.raise_max(m_new);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (!step.real(u)) continue;
          float value[E];
          values(u, value);
          state.add(softmax_exp(score[u] - state.m),
                    dropout_factor(p.seed, step.pos(u), h, p.dropout_p), value);
        }
      });
  state.merge_slots(s);
  return state;
}

// The fp32 [heads, channels] bias added to every output row, or NULL: the
// GATv2 layer's own (folded into the output pass); none for the transformer.
__device__ __forceinline__ const float* out_bias(const pygio_gatv2_params& p) {
  return p.out_bias;
}
__device__ __forceinline__ const float* out_bias(const pygio_transformer_params&) {
  return nullptr;
}

// out[row, h] = acc / l (0 for an empty row) + out_bias[h] from the head's
// slot 0; lse from its lane 0.
template <typename Traits, typename P>
__device__ __forceinline__ void write_row(const P& p, const GatShape& s, int lane, int64_t row,
                                          int64_t h, SoftmaxState<Traits::kElems>& state) {
  using scalar_t = typename Traits::scalar_t;
  if (s.slot(lane) != 0) return;
  const float inv = state.l > 0.f ? 1.f / state.l : 0.f;
  float bias[Traits::kElems] = {};
  if (const float* b = out_bias(p)) load_att<Traits>(b + h * s.channels, s, lane, bias);
#pragma unroll
  for (int k = 0; k < Traits::kElems; ++k) state.acc[k] = state.acc[k] * inv + bias[k];
  store_slice<Traits>(static_cast<scalar_t*>(p.out) + row * s.width() + h * s.channels, s, lane,
                      state.acc);
  if (s.layout.lane_in_group(lane) == 0) p.lse[row * s.heads + h] = state.lse();
}

// out[i, h] and lse[i, h] for every row i that is not a hub: a warp per
// row (grid-stride), its heads in passes; rows above the hub threshold are
// registered for attention_hub_chunks_kernel instead.
template <typename Family, typename Traits, typename P>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Family::template min_blocks<Traits>())
    attention_rows_kernel(const __grid_constant__ P p, GatShape s, GatHubs hubs) {
  using index_t = typename Traits::index_t;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t threshold = gat_hub_threshold(hubs.degree, hubs.list.capacity);
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + threadIdx.x / kWarpSize;
  for_each_row(rowptr, p.a.num_rows, first, warps, [&](int64_t row, int64_t begin, int64_t end) {
    if (end - begin > threshold && register_hub(hubs.list, row, end - begin, kGatHubChunk, lane))
      return;
    for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
      const PassHead head = pass_head(s, lane, h0);
      SoftmaxState<Traits::kElems> state =
          attend<Family, Traits>(p, s, lane, row, head.h, begin, end);
      if (head.active) write_row<Traits>(p, s, lane, row, head.h, state);
    }
  });
}

// Warp 0's softmax state becomes the merge of the block's W warps' states,
// lane by lane through shared memory (every warp lays out heads and
// channels alike). Every thread of the block must call it.
template <int W, int E>
__device__ __forceinline__ void merge_block_states(SoftmaxState<E>& state, int warp, int lane) {
  __shared__ float m[W][kWarpSize], l[W][kWarpSize], acc[W][E][kWarpSize];
  m[warp][lane] = state.m;
  l[warp][lane] = state.l;
#pragma unroll
  for (int k = 0; k < E; ++k) acc[warp][k][lane] = state.acc[k];
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < W; ++w) {
      float acc_w[E];
#pragma unroll
      for (int k = 0; k < E; ++k) acc_w[k] = acc[w][k][lane];
      state.merge(m[w][lane], l[w][lane], acc_w);
    }
  }
  __syncthreads();  // read before the next call writes
}

// The softmax state (m, l, acc) of each (hub chunk, head) into the
// workspace (state = chunk * heads + head), items as for_each_hub_chunk
// hands them out: launched twice, kByBlock false (a warp per item) and
// true (a block per item, its warps' states merged in shared memory), the
// launch that does not match hub_items_by_block returning at once (so the
// warp-per-item kernel keeps its registers and no shared memory). H200,
// arxiv-like, (2, 64) fp32: 0.501 -> 0.457 ms; a block per item everywhere
// was 5% slower on web-like.
template <typename Family, typename Traits, typename P, bool kByBlock>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Family::template min_blocks<Traits>())
    attention_hub_chunks_kernel(const __grid_constant__ P p, GatShape s, GatHubs hubs) {
  using index_t = typename Traits::index_t;
  constexpr int E = Traits::kElems;
  if (hub_items_by_block<Traits::kWarpsPerBlock>(hubs.list, s) != kByBlock) return;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for_each_hub_chunk<Traits::kWarpsPerBlock>(
      hubs.list, static_cast<const index_t*>(p.a.rowptr), s, lane, kByBlock,
      [&](int64_t chunk, int64_t slot, const PassHead& head, int64_t begin, int64_t end) {
        SoftmaxState<E> state =
            attend<Family, Traits>(p, s, lane, hubs.list.hubs[slot].row, head.h, begin, end);
        if constexpr (kByBlock) {
          merge_block_states<Traits::kWarpsPerBlock>(state, warp, lane);
          if (warp != 0) return;
        }
        if (!head.active || s.slot(lane) != 0) return;
        const int64_t index = chunk * s.heads + head.h;
        store_float_slice<Traits>(hubs.partial + index * s.channels, s, lane, state.acc);
        if (s.layout.lane_in_group(lane) == 0) {
          hubs.stats[2 * index] = state.m;
          hubs.stats[2 * index + 1] = state.l;
        }
      });
}

// A warp per (hub, head) merges the hub's chunk states:
//   m = max_k m_k, l = sum_k l_k exp(m_k - m), out = sum_k acc_k exp(m_k - m) / l,
//   lse = m + log(l); out_bias added.
template <typename scalar_t, typename index_t, typename P>
__global__ void attention_hub_finish_kernel(const __grid_constant__ P p, GatShape s,
                                            GatHubs hubs) {
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t items = hub_count(hubs.list) * s.heads;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarpSize);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) +
                      threadIdx.x / kWarpSize;
       item < items; item += warps) {
    const int64_t slot = item / s.heads, h = item % s.heads;
    const HubEntry hub = hubs.list.hubs[slot];
    const int64_t chunks =
        (rowptr[hub.row + 1] - rowptr[hub.row] + kGatHubChunk - 1) / kGatHubChunk;
    const int64_t first = hub.first_chunk * s.heads + h;  // state of chunk 0
    float m = -INFINITY;
    for (int64_t k = lane; k < chunks; k += kWarpSize)
      m = fmaxf(m, hubs.stats[2 * (first + k * s.heads)]);
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float l = 0.f;
    for (int64_t k = lane; k < chunks; k += kWarpSize) {
      const int64_t state = first + k * s.heads;
      l += hubs.stats[2 * state + 1] * softmax_exp(hubs.stats[2 * state] - m);
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
      l += __shfl_xor_sync(0xffffffffu, l, offset);
    const float* bias = out_bias(p);
    for (int64_t c = lane; c < s.channels; c += kWarpSize) {
      float acc = 0.f;
      for (int64_t k = 0; k < chunks; ++k) {
        const int64_t state = first + k * s.heads;
        acc += hubs.partial[state * s.channels + c] * softmax_exp(hubs.stats[2 * state] - m);
      }
      static_cast<scalar_t*>(p.out)[hub.row * s.width() + h * s.channels + c] =
          DTypeTraits<scalar_t>::store(acc / l + (bias ? bias[h * s.channels + c] : 0.f));
    }
    if (lane == 0) p.lse[hub.row * s.heads + h] = m + logf(l);
  }
}

// alpha[e, h] = exp(s[e, h] - lse[i, h]): a warp per kGatAlphaChunk
// consecutive entries (grid-stride), the rows they meet in turn, heads in
// passes, so a hub row of any degree is spread over many warps. P: a, lse,
// alpha and what Family::for_each_score reads.
template <typename Family, typename Traits, typename P>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    attention_alpha_kernel(const __grid_constant__ P p, GatShape s) {
  using index_t = typename Traits::index_t;
  constexpr int U = Family::template unroll<Traits>();
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t chunks = (p.a.nnz + kGatAlphaChunk - 1) / kGatAlphaChunk;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < chunks; chunk += warps) {
    const int64_t first = chunk * kGatAlphaChunk;
    const int64_t last = first + kGatAlphaChunk < p.a.nnz ? first + kGatAlphaChunk : p.a.nnz;
    // The row holding entry `first`: the last row starting at or before it.
    int64_t row = last_at_most(p.a.num_rows, first,
                               [&](int64_t r) { return static_cast<int64_t>(rowptr[r]); });
    for (; row < p.a.num_rows; ++row) {
      const int64_t row_begin = rowptr[row], row_end = rowptr[row + 1];
      if (row_begin >= last) break;
      const int64_t begin = row_begin > first ? row_begin : first;
      const int64_t end = row_end < last ? row_end : last;
      if (begin == end) continue;
      for (int64_t h0 = 0; h0 < s.heads; h0 += s.heads_per_pass()) {
        const PassHead head = pass_head(s, lane, h0);
        const float lse = p.lse[row * s.heads + head.h];
        Family::template for_each_score<Traits, false>(
            p, s, lane, row, head.h, begin, end,
            [&](const WalkStep<U, 1, index_t>& step, const float (&score)[U],
                const typename Family::template Entries<Traits, U>&) {
#pragma unroll
              for (int u = 0; u < U; ++u)
                if (step.real(u) && head.active && s.layout.lane_in_group(lane) == 0)
                  p.alpha[step.pos(u) * s.heads + head.h] = softmax_exp(score[u] - lse);
            });
      }
    }
  }
}

}  // namespace pygio
