// Neighbour min / max kernels (contract: pygio_minmax and
// pygio_minmax_backward in pyg_ioaware.h).
//
// Forward, out[r, f] = best over the entries e of row r of x[col[e], f]:
//  - minmax_rows_kernel: a warp per row, laid out by WarpLayout (lanes span
//    the features with kVec-wide loads, sub-groups take interleaved entries,
//    kUnroll gathered loads in flight per lane), sub-group winners merged
//    with shuffles; a row above the hub degree is only registered.
//  - minmax_hub_chunks_kernel: a warp per kMinMaxHubChunk-entry chunk of a
//    hub, every chunk's winners merged into the hub's words with one
//    atomicMax each (plus a CAS that marks a tie between chunks);
//  - minmax_hub_finish_kernel: hub words -> out and arg.
// Backward, grad_x = the gradient of out through arg's rule:
//  - minmax_scatter_grad_kernel: an element per thread, plain winners get
//    their gradient with one atomicAdd; ties, zeros and NaN walk the row;
//  - deterministic: minmax_share_kernel (each element's share of its
//    gradient) then minmax_gather_grad_kernel (a warp per source row of
//    CSR^T, every element summed in one lane in CSR^T order).
#pragma once

#include "pyg_ioaware.h"
#include "minmax_traits.cuh"

namespace pygio {

// A lane's running winners for its kVec features: value, source (-1:
// none yet) and whether another entry tied with it.
template <typename Traits>
struct Winners {
  typename Traits::acc_t value[Traits::kVec];
  int32_t source[Traits::kVec];
  bool tied[Traits::kVec];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) source[i] = -1, tied[i] = false;
  }

  // Offers (v, s, t) for feature i: a better value replaces the winner, an
  // equal one marks a tie and keeps the smaller source.
  __device__ __forceinline__ void offer(int i, typename Traits::acc_t v, int32_t s, bool t) {
    if (s < 0) return;
    if (source[i] < 0) {
      value[i] = v, source[i] = s, tied[i] = t;
    } else if (same_value(v, value[i])) {
      tied[i] = true;
      if (s < source[i]) value[i] = v, source[i] = s;
    } else if (better_value<Traits::kMax>(v, value[i])) {
      value[i] = v, source[i] = s, tied[i] = t;
    }
  }
};

// The winners of entries [begin, end) for the piece `piece` of this lane,
// merged over the warp's sub-groups (valid in sub-group 0). Every lane of
// the warp calls it with the same arguments but `lane` and `piece`.
template <typename Traits>
__device__ __forceinline__ void warp_winners(const pygio_minmax_params& p, WarpLayout layout,
                                             int lane, int64_t piece, int64_t begin, int64_t end,
                                             Winners<Traits>& best) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  constexpr int V = Traits::kVec, U = Traits::kUnroll;
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const bool active = piece < p.width / V;
  const int sub = layout.sub_group(lane), subs = layout.sub_groups();
  best.clear();
  for (int64_t e0 = begin + sub; e0 < end; e0 += static_cast<int64_t>(subs) * U) {
    int64_t src[U];
    Pack<scalar_t, V> packs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t e = e0 + static_cast<int64_t>(subs) * u;
      src[u] = e < end ? static_cast<int64_t>(col[e]) : -1;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (src[u] >= 0 && active) packs[u] = load_pack<V>(x + src[u] * p.x_row_stride + piece * V);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (src[u] >= 0 && active)
#pragma unroll
        for (int i = 0; i < V; ++i)
          best.offer(i, DTypeTraits<scalar_t>::load(packs[u].v[i]), static_cast<int32_t>(src[u]),
                     false);
  }
  for (int offset = layout.lanes(); offset < kWarpSize; offset <<= 1)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const auto v = __shfl_xor_sync(0xffffffffu, best.value[i], offset);
      const int32_t s = __shfl_xor_sync(0xffffffffu, best.source[i], offset);
      const bool t = __shfl_xor_sync(0xffffffffu, static_cast<int>(best.tied[i]), offset) != 0;
      best.offer(i, v, s, t);
    }
}

// V arg codes at p, moved in loads / stores of up to 16 bytes (p aligned
// to 4 * V bytes, or 16 where V > 4).
template <int V>
__device__ __forceinline__ void store_codes(int32_t* __restrict__ p, const int32_t (&codes)[V]) {
  constexpr int kStep = V < 4 ? V : 4;
#pragma unroll
  for (int c = 0; c < V; c += kStep) {
    Pack<int32_t, kStep> pack;
#pragma unroll
    for (int i = 0; i < kStep; ++i) pack.v[i] = codes[c + i];
    *reinterpret_cast<Pack<int32_t, kStep>*>(p + c) = pack;
  }
}
template <int V>
__device__ __forceinline__ void load_codes(const int32_t* __restrict__ p, int32_t (&codes)[V]) {
  constexpr int kStep = V < 4 ? V : 4;
#pragma unroll
  for (int c = 0; c < V; c += kStep) {
    const Pack<int32_t, kStep> pack = load_pack<kStep>(p + c);
#pragma unroll
    for (int i = 0; i < kStep; ++i) codes[c + i] = pack.v[i];
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_rows_kernel(const __grid_constant__ pygio_minmax_params p, WarpLayout layout,
                       const MinMaxHubs hubs) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  auto* __restrict__ out = static_cast<scalar_t*>(p.out);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  int64_t hub_degree = -1;  // no split
  if (hubs.list.hubs != nullptr) {
    hub_degree = *hubs.degree;
    if (hub_degree < kMinMaxHubChunk) hub_degree = kMinMaxHubChunk;
  }
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                     threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    if (hub_degree >= 0 && end - begin > hub_degree &&
        register_hub(hubs.list, row, end - begin, kMinMaxHubChunk, lane))
      continue;
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      Winners<Traits> best;
      warp_winners<Traits>(p, layout, lane, piece, begin, end, best);
      if (layout.sub_group(lane) != 0 || piece >= pieces) continue;
      acc_t values[V];
      int32_t codes[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const bool found = best.source[i] >= 0;
        values[i] = found ? best.value[i] : acc_t(0);
        codes[i] = found ? arg_code(best.source[i], best.tied[i], best.value[i]) : PYGIO_ARG_EMPTY;
      }
      store_pack<V>(out + row * p.out_row_stride + piece * V, values);
      if (p.arg != nullptr) store_codes<V>(p.arg + row * p.width + piece * V, codes);
    }
  }
}

// Sets the tie bit of *word while its rank is `rank`.
__device__ __forceinline__ void mark_tie(unsigned long long* word, uint32_t rank) {
  unsigned long long seen = *word;
  while (word_rank(seen) == rank && !word_tied(seen)) {
    const unsigned long long old = atomicCAS(word, seen, seen | 1ull);
    if (old == seen) break;
    seen = old;
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_hub_chunks_kernel(const __grid_constant__ pygio_minmax_params p, WarpLayout layout,
                             const MinMaxHubs hubs) {
  using index_t = typename Traits::index_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t num_hubs = hub_count(hubs.list);
  const int64_t num_chunks = num_hubs > 0 ? hub_chunk_count(hubs.list) : 0;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < num_chunks; chunk += warps) {
    int64_t begin = 0, end = 0;
    const int64_t slot = hub_chunk_range(hubs.list, num_hubs, rowptr, chunk, kMinMaxHubChunk,
                                         &begin, &end);
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      Winners<Traits> best;
      warp_winners<Traits>(p, layout, lane, piece, begin, end, best);
      if (layout.sub_group(lane) != 0 || piece >= pieces) continue;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (best.source[i] < 0) continue;
        const uint32_t rank = rank_of<Traits::kMax>(static_cast<float>(best.value[i]));
        unsigned long long* word = hubs.words + slot * p.width + piece * V + i;
        const unsigned long long old = atomicMax(word, merge_word(rank, best.source[i],
                                                                  best.tied[i]));
        // Another chunk reached this rank first: a tie, if the rank stays the best.
        if (word_rank(old) == rank) mark_tie(word, rank);
      }
    }
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_hub_finish_kernel(const __grid_constant__ pygio_minmax_params p,
                             const MinMaxHubs hubs) {
  using scalar_t = typename Traits::scalar_t;
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  auto* __restrict__ out = static_cast<scalar_t*>(p.out);
  const int64_t total = hub_count(hubs.list) * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = i / p.width, f = i - slot * p.width;
    const int64_t row = hubs.list.hubs[slot].row;
    const unsigned long long word = hubs.words[i];
    if (word == 0) continue;  // never for a registered hub: each of its chunks has entries
    const int32_t source = word_source(word);
    const scalar_t value = x[source * p.x_row_stride + f];
    out[row * p.out_row_stride + f] = value;
    if (p.arg != nullptr)
      p.arg[row * p.width + f] = arg_code(source, word_tied(word),
                                          DTypeTraits<scalar_t>::load(value));
  }
}

// ------------------------------------------------------------- backward
// Calls visit(source, share) for every entry of row r that takes a share
// of gradient g at feature f where arg does not give it to one source: an
// even share for every entry equal to the result (the zero fill counted
// once more where the result is 0), or NaN for every entry of a NaN.
template <typename Traits, typename Visit>
__device__ __forceinline__ void walk_row(const pygio_minmax_backward_params& p, int64_t r,
                                         int64_t f, typename Traits::acc_t g, Visit visit) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const acc_t result = DTypeTraits<scalar_t>::load(
      static_cast<const scalar_t*>(p.out)[r * p.out_row_stride + f]);
  const int64_t begin = rowptr[r], end = rowptr[r + 1];
  if (result != result) {
    for (int64_t e = begin; e < end; ++e) visit(static_cast<int64_t>(col[e]), result);
    return;
  }
  auto equal = [&](int64_t e) {
    return same_value(DTypeTraits<scalar_t>::load(x[static_cast<int64_t>(col[e]) *
                                                     p.x_row_stride + f]), result);
  };
  acc_t count = result == acc_t(0) ? acc_t(1) : acc_t(0);
  for (int64_t e = begin; e < end; ++e) count += equal(e) ? acc_t(1) : acc_t(0);
  const acc_t share = g / count;
  for (int64_t e = begin; e < end; ++e)
    if (equal(e)) visit(static_cast<int64_t>(col[e]), share);
}

// acc (row stride acc_stride, in the accumulator type, zeroed) += the
// gradient of every output element.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_scatter_grad_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                               typename Traits::acc_t* __restrict__ acc, int64_t acc_stride) {
  using scalar_t = typename Traits::scalar_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ grad_out = static_cast<const scalar_t*>(p.grad_out);
  const int64_t pieces = p.width / V;
  const int64_t total = p.a.num_rows * pieces;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces, f0 = (i - r * pieces) * V;
    int32_t codes[V];
    load_codes<V>(p.arg + r * p.width + f0, codes);
    const Pack<scalar_t, V> grads = load_pack<V>(grad_out + r * p.grad_out_row_stride + f0);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int32_t code = codes[k];
      const acc_t g = DTypeTraits<scalar_t>::load(grads.v[k]);
      const int64_t f = f0 + k;
      if (code >= 0) {
        if (code < p.a.num_cols) atomicAdd(acc + code * acc_stride + f, g);
      } else if (code != PYGIO_ARG_EMPTY) {
        walk_row<Traits>(p, r, f, g, [&](int64_t source, acc_t share) {
          atomicAdd(acc + source * acc_stride + f, share);
        });
      }
    }
  }
}

// share[r * width + f] = the gradient every taking source of element (r, f) gets.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_share_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                        typename Traits::acc_t* __restrict__ share) {
  using scalar_t = typename Traits::scalar_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ grad_out = static_cast<const scalar_t*>(p.grad_out);
  const int64_t total = p.a.num_rows * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.width, f = i - r * p.width;
    const int32_t code = p.arg[i];
    const acc_t g = DTypeTraits<scalar_t>::load(grad_out[r * p.grad_out_row_stride + f]);
    acc_t value = acc_t(0);
    if (code >= 0) {
      value = g;
    } else if (code != PYGIO_ARG_EMPTY) {
      bool first = true;  // every taking source gets the same share: keep the first
      walk_row<Traits>(p, r, f, g, [&](int64_t, acc_t s) {
        if (first) value = s, first = false;
      });
    }
    share[i] = value;
  }
}

// grad_x[u, f] = sum over the CSR^T entries (u -> v) of share[v, f] where
// source u takes a share of element (v, f); a warp per source row.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_gather_grad_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                              const typename Traits::acc_t* __restrict__ share) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const auto* __restrict__ col_t = static_cast<const index_t*>(p.a_t.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const auto* __restrict__ out = static_cast<const scalar_t*>(p.out);
  auto* __restrict__ grad_x = static_cast<scalar_t*>(p.grad_x);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                   threadIdx.x / kWarpSize;
       u < p.a_t.num_rows; u += warps) {
    const int64_t begin = rowptr_t[u], end = rowptr_t[u + 1];
    for (int64_t f = lane; f < p.width; f += kWarpSize) {
      acc_t sum = acc_t(0);
      for (int64_t e = begin; e < end; ++e) {
        const int64_t v = col_t[e];
        const int32_t code = p.arg[v * p.width + f];
        bool takes = code == u;
        if (code < 0 && code != PYGIO_ARG_EMPTY) {
          const acc_t result = DTypeTraits<scalar_t>::load(out[v * p.out_row_stride + f]);
          takes = result != result ||
                  same_value(DTypeTraits<scalar_t>::load(x[u * p.x_row_stride + f]), result);
        }
        if (takes) sum += share[v * p.width + f];
      }
      grad_x[u * p.grad_x_row_stride + f] = DTypeTraits<scalar_t>::store(sum);
    }
  }
}

// y[r, f] = acc[r * width + f] in y's type.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_cast_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                       const typename Traits::acc_t* __restrict__ acc) {
  auto* __restrict__ y = static_cast<typename Traits::scalar_t*>(p.grad_x);
  const int64_t total = p.a.num_cols * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.width, f = i - r * p.width;
    y[r * p.grad_x_row_stride + f] = DTypeTraits<typename Traits::scalar_t>::store(acc[i]);
  }
}

}  // namespace pygio
