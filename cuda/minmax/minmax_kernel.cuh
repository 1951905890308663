// Neighbour min / max kernels (contract: pygio_minmax and
// pygio_minmax_backward in pyg_ioaware.h).
//
// Forward, out[r, f] = best over the entries e of row r of x[col[e], f]:
//  - minmax_rows_kernel: a warp per row, laid out by WarpLayout (lanes span
//    the features with kVec-wide loads, kPieces of them a lane, sub-groups
//    take interleaved entries, kUnroll entries in flight per lane), each
//    lane's winners kept as values (LaneWinners) and merged over the
//    sub-groups as words with shuffles; a row above the hub degree is only
//    registered. One launch takes a column slab of every row (PieceRange):
//    all columns, or, where x is far larger than L2, slabs launched one
//    after another (with their hub chunks), so that the source rows a slab
//    gathers stay in L2 for the other rows that gather them.
//  - minmax_hub_chunks_kernel: a warp per chunk of a hub (MinMaxHubs::chunk
//    entries), every chunk's winners merged into the hub's two words per
//    element with two atomicMax, whose results nobody waits for (the
//    smallest and the largest position at the best rank: a tie between
//    chunks is where they differ); launched a slab at a time after the
//    slab's rows;
//  - minmax_hub_finish_kernel: hub words -> out and arg.
// Backward, grad_x = the gradient of out through arg's rule:
//  - minmax_grad_rows_kernel: a warp per row, laid out as the forward;
//    plain winners get their gradient with one atomicAdd, consecutive
//    lanes on consecutive features (add_winner_gradients); the elements arg
//    marks (ties, zeros, NaN), where a pass holds few, walk their (element,
//    entry) pairs as one list over the warp (stage_walks,
//    match_staged_walks, add_staged_shares), else count the row's matches
//    with vector loads, keeping the first two, then add each its share
//    (add_walk_shares); a hub row with such elements is registered;
//  - minmax_grad_hub_count_kernel / minmax_grad_hub_share_kernel: the same
//    walks (counting, then sharing) over hub chunks spread over all SMs,
//    matches merged with atomicAdd in between;
//  - with buckets (perm_t given), where grad_x is not zeroed first:
//    minmax_grad_bucket_rows_kernel writes the plain winners of rows of at
//    most PYGIO_MINMAX_BUCKET_MAX_DEGREE entries grouped by entry (staged
//    in shared memory) and defers longer rows and rows with elements that
//    walk; minmax_grad_bucket_sums_kernel sums, a warp per source (CSR^T
//    row), the groups of its entries in shared memory and stores its row,
//    then (kChunks) adds chunks of long sources with atomicAdd; then
//    minmax_grad_rows_kernel over the deferred rows (and the hub kernels)
//    as above;
//  - deterministic: minmax_walk_share_kernel (the share of each element
//    that walks), then minmax_gather_grad_kernel (a warp per source row of
//    CSR^T, each entry's winners found by its position in its row, summed
//    in a fixed order; long sources in chunks whose sums
//    minmax_gather_hub_finish_kernel adds in chunk order).
#pragma once

#include "../common/gather.cuh"
#include "pyg_ioaware.h"
#include "minmax_traits.cuh"

namespace pygio {

// The winner words of entries [begin, end) of the row starting at entry
// row_begin for the pieces layout.piece(lane, base, q), q < kPieces, of
// this lane below last_piece, merged over the warp's sub-groups (valid in
// sub-group 0).
// Every lane of the warp calls it with the same arguments but `lane`.
template <typename Traits>
__device__ __forceinline__ void warp_winners(
    const pygio_minmax_params& p, WarpLayout layout, int lane, int64_t base, int64_t last_piece,
    int64_t begin, int64_t end, int64_t row_begin,
    typename Traits::Word::type (&best)[Traits::kPieces][Traits::kVec]) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using offset_t = typename Traits::offset_t;
  using Word = typename Traits::Word;
  constexpr int V = Traits::kVec, U = Traits::kUnroll, P = Traits::kPieces;
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const uint64_t row_bytes = static_cast<uint64_t>(p.x_row_stride) * sizeof(scalar_t);
  int64_t piece[P];
  bool active[P];
#pragma unroll
  for (int q = 0; q < P; ++q) {
    piece[q] = layout.piece(lane, base, q);
    active[q] = piece[q] < last_piece;
  }
  const int sub = layout.sub_group(lane), subs = layout.sub_groups();
  LaneWinners<scalar_t, Traits::kMax, V> winners[P];
#pragma unroll
  for (int q = 0; q < P; ++q) winners[q].init();
  // The next step's sources load while this step's rows are gathered
  // (common/gather.cuh).
  const offset_t first = begin + sub, last = end, stride = subs;
  index_t src[U];
  if (first < last) load_sources(col, first, last, stride, src);
  for (offset_t e0 = first; e0 < last; e0 += stride * U) {
    Pack<scalar_t, V> packs[U][P];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int q = 0; q < P; ++q)
        if (src[u] >= 0 && active[q])
          packs[u][q] = load_pack<V>(row_address(x + piece[q] * V, src[u], row_bytes));
    index_t next[U];
    load_sources(col, e0 + stride * U, last, stride, next);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (src[u] >= 0) {
        const uint32_t low =
            WinnerWord<uint32_t>::low_of(position_in_row(e0 + stride * u, row_begin));
#pragma unroll
        for (int q = 0; q < P; ++q)
          if (active[q]) winners[q].take(packs[u][q], low);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) src[u] = next[u];
  }
#pragma unroll
  for (int q = 0; q < P; ++q) winners[q].words(best[q]);
  for (int offset = layout.lanes(); offset < kWarpSize; offset <<= 1)
#pragma unroll
    for (int q = 0; q < P; ++q)
#pragma unroll
      for (int i = 0; i < V; ++i)
        best[q][i] = Word::merge(best[q][i], Word::shfl_xor(best[q][i], offset));
}

// Calls visit(piece, best) for every piece in `pieces` of the row whose
// entries [begin, end) this lane's warp reduces (rows starting at entry
// row_begin), in passes of layout.lanes() * kPieces pieces: `best` holds
// the piece's V winner words, merged over the warp; only sub-group 0's
// lanes visit. Every lane of the warp calls it alike.
template <typename Traits, typename Visit>
__device__ __forceinline__ void for_each_piece_winners(const pygio_minmax_params& p,
                                                       WarpLayout layout, int lane,
                                                       PieceRange pieces, int64_t begin,
                                                       int64_t end, int64_t row_begin,
                                                       Visit visit) {
  constexpr int V = Traits::kVec, P = Traits::kPieces;
  for (int64_t base = pieces.first; base < pieces.last; base += layout.lanes() * P) {
    typename Traits::Word::type best[P][V];
    warp_winners<Traits>(p, layout, lane, base, pieces.last, begin, end, row_begin, best);
#pragma unroll
    for (int q = 0; q < P; ++q) {
      const int64_t piece = layout.piece(lane, base, q);
      if (layout.sub_group(lane) == 0 && piece < pieces.last) visit(piece, best[q]);
    }
  }
}

// The output value and decoded arg code of a winner word (0 and
// kCodeEmpty for none), for codes of `bytes` bytes.
template <typename Traits>
__device__ __forceinline__ void winner_result(typename Traits::Word::type w, int bytes,
                                              typename Traits::acc_t* value, int32_t* code) {
  using Word = typename Traits::Word;
  if (Word::rank(w) == 0) {
    *value = 0, *code = kCodeEmpty;
    return;
  }
  *value = value_of_rank<Traits::kMax>(Word::rank(w));
  *code = arg_code<Traits::kMax>(Word::position(w), Word::tied(w), *value, bytes);
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    minmax_rows_kernel(const __grid_constant__ pygio_minmax_params p, WarpLayout layout,
                       const MinMaxHubs hubs, PieceRange slab) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  auto* __restrict__ out = static_cast<scalar_t*>(p.out);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  int64_t hub_degree = -1;  // no split
  // The first slab registers the rows above the hub degree; a later one
  // leaves them to the hub kernels where every one was registered, else
  // does them itself (the hub kernels then write the same values again).
  const bool registers = slab.first == 0;
  bool hub_kernels_take_hubs = false;
  if (hubs.list.hubs != nullptr) {
    hub_degree = *hubs.degree;
    if (hub_degree < PYGIO_MINMAX_MIN_HUB_DEGREE) hub_degree = PYGIO_MINMAX_MIN_HUB_DEGREE;
    hub_kernels_take_hubs = !registers && every_hub_registered(hubs.list);
  }
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                     threadIdx.x / kWarpSize;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    if (hub_degree >= 0 && end - begin > hub_degree &&
        (registers ? register_hub(hubs.list, row, end - begin, hubs.chunk, lane)
                   : hub_kernels_take_hubs))
      continue;
    for_each_piece_winners<Traits>(
        p, layout, lane, slab, begin, end, begin,
        [&](int64_t piece, const typename Traits::Word::type (&best)[V]) {
          acc_t values[V];
          int32_t codes[V];
#pragma unroll
          for (int i = 0; i < V; ++i)
            winner_result<Traits>(best[i], p.arg_bytes, &values[i], &codes[i]);
          // Evict-first: out and arg are not read again here (H200, min
          // D=512 fp32 forward with arg: pokec-like 16.50 -> 16.48 ms,
          // web-like 7.98 -> 7.94, arxiv-like 0.812 -> 0.805).
          store_pack<V, true>(out + row * p.out_row_stride + piece * V, values);
          if (p.arg != nullptr)
            store_codes<V, true>(p.arg, p.arg_bytes, row * p.width + piece * V, codes);
        });
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, Traits::kMinBlocksPerSm)
    minmax_hub_chunks_kernel(const __grid_constant__ pygio_minmax_params p, WarpLayout layout,
                             const MinMaxHubs hubs, PieceRange slab) {
  using index_t = typename Traits::index_t;
  using Word = WinnerWord<uint32_t>;
  constexpr int V = Traits::kVec;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t num_hubs = hub_count(hubs.list);
  const int64_t num_chunks = num_hubs > 0 ? hub_chunk_count(hubs.list) : 0;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                       threadIdx.x / kWarpSize;
       chunk < num_chunks; chunk += warps) {
    int64_t begin = 0, end = 0;
    const int64_t slot = hub_chunk_range(hubs.list, num_hubs, rowptr, chunk, hubs.chunk, &begin,
                                         &end);
    const int64_t row_begin = rowptr[hubs.list.hubs[slot].row];
    for_each_piece_winners<Traits>(
        p, layout, lane, slab, begin, end, row_begin,
        [&](int64_t piece, const unsigned long long (&best)[V]) {
#pragma unroll
          for (int i = 0; i < V; ++i) {
            if (Word::rank(best[i]) == 0) continue;
            const int64_t at = slot * p.width + piece * V + i;
            atomicMax(hubs.words + at, best[i]);
            atomicMax(hubs.last_words + at, last_position_word(best[i]));
          }
        });
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_hub_finish_kernel(const __grid_constant__ pygio_minmax_params p,
                             const MinMaxHubs hubs) {
  using scalar_t = typename Traits::scalar_t;
  using acc_t = typename Traits::acc_t;
  auto* __restrict__ out = static_cast<scalar_t*>(p.out);
  const int64_t total = hub_count(hubs.list) * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = i / p.width, f = i - slot * p.width;
    const int64_t row = hubs.list.hubs[slot].row;
    acc_t value;
    int32_t code;
    winner_result<Traits>(hub_winner(hubs.words[i], hubs.last_words[i]), p.arg_bytes, &value,
                          &code);
    out[row * p.out_row_stride + f] = DTypeTraits<scalar_t>::store(value);
    if (p.arg != nullptr) store_code(p.arg, p.arg_bytes, row * p.width + f, code);
  }
}

// ------------------------------------------------------------- backward
// The gradient each of `matches` entries equal to `result` gets of `grad`:
// an even share, the zero fill counted once more where the result is 0;
// NaN to every entry where the result is NaN.
template <typename acc_t>
__device__ __forceinline__ acc_t walk_share(acc_t result, acc_t grad, acc_t matches) {
  if (result != result) return result;
  return grad / (matches + (result == acc_t(0) ? acc_t(1) : acc_t(0)));
}

// The share of gradient g that each source taking element (r, f) gets
// where the element walks: walk_share of the row's entries equal to the
// result (the row is not walked where the result is NaN).
template <typename Traits>
__device__ __forceinline__ typename Traits::acc_t walk_element_share(
    const pygio_minmax_backward_params& p, int64_t r, int64_t f, typename Traits::acc_t g) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const acc_t result = DTypeTraits<scalar_t>::load(
      static_cast<const scalar_t*>(p.out)[r * p.out_row_stride + f]);
  const int64_t begin = rowptr[r], end = rowptr[r + 1];
  acc_t matches(0);
  if (result == result) {
    for (int64_t e = begin; e < end; ++e)
      if (same_value(DTypeTraits<scalar_t>::load(
                         x[static_cast<int64_t>(col[e]) * p.x_row_stride + f]),
                     result))
        matches += acc_t(1);
  }
  return walk_share(result, g, matches);
}

// One piece of a row for the backward: per feature the decoded arg code
// (after resolve_winners, a plain winner's source in place of its
// position), the gradient, whether it walks, and (where any does) the
// forward's result.
template <typename Traits>
struct GradPiece {
  int32_t code[Traits::kVec];
  typename Traits::acc_t grad[Traits::kVec];
  typename Traits::acc_t result[Traits::kVec];
  bool walk[Traits::kVec];
  bool any_walk;

  __device__ __forceinline__ void load(const pygio_minmax_backward_params& p, int64_t row,
                                       int64_t piece, bool active) {
    using scalar_t = typename Traits::scalar_t;
    constexpr int V = Traits::kVec;
    any_walk = false;
#pragma unroll
    for (int i = 0; i < V; ++i) code[i] = kCodeEmpty, walk[i] = false;
    if (!active) return;
    load_codes<V>(p.arg, p.arg_bytes, row * p.width + piece * V, code);
    const Pack<scalar_t, V> g = load_pack<V>(static_cast<const scalar_t*>(p.grad_out) +
                                             row * p.grad_out_row_stride + piece * V);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      grad[i] = DTypeTraits<scalar_t>::load(g.v[i]);
      walk[i] = code[i] == kCodeWalk;
      any_walk = any_walk || walk[i];
    }
    if (!any_walk) return;
    const Pack<scalar_t, V> r = load_pack<V>(static_cast<const scalar_t*>(p.out) +
                                             row * p.out_row_stride + piece * V);
#pragma unroll
    for (int i = 0; i < V; ++i) result[i] = DTypeTraits<scalar_t>::load(r.v[i]);
  }

  // Each plain winner's position -> its source, col[begin + position] for
  // the row's entries [begin, end) (kCodeEmpty for a position past them):
  // the V loads in flight together, before the gradients are added.
  __device__ __forceinline__ void resolve_winners(const pygio_minmax_backward_params& p,
                                                  int64_t begin, int64_t end) {
    using index_t = typename Traits::index_t;
    const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i)
      if (code[i] >= 0)
        code[i] = code[i] < end - begin ? static_cast<int32_t>(col[begin + code[i]]) : kCodeEmpty;
  }

  // The gradient every matching entry gets, given the matches counted.
  __device__ __forceinline__ typename Traits::acc_t share(int i,
                                                          typename Traits::acc_t matches) const {
    return walk_share(result[i], grad[i], matches);
  }
};

// Calls visit(source, mask) for every entry e in [begin, end) (interleaved
// over the warp's sub-groups) where some feature of this lane's piece
// walks and x[col[e], f] takes a share: bit i of mask for feature i, set
// where the value equals the result, or for any value where the result is
// NaN. Every lane of the warp calls it alike.
template <typename Traits, typename Visit>
__device__ __forceinline__ void for_each_matching_entry(const pygio_minmax_backward_params& p,
                                                        WarpLayout layout, int lane,
                                                        int64_t piece, int64_t begin,
                                                        int64_t end, const GradPiece<Traits>& g,
                                                        Visit visit) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  constexpr int V = Traits::kVec, U = Traits::kWalkUnroll;
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const int sub = layout.sub_group(lane), subs = layout.sub_groups();
  for (int64_t e0 = begin + sub; e0 < end; e0 += static_cast<int64_t>(subs) * U) {
    int64_t src[U];
    Pack<scalar_t, V> packs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t e = e0 + static_cast<int64_t>(subs) * u;
      src[u] = e < end && g.any_walk ? static_cast<int64_t>(col[e]) : -1;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (src[u] >= 0) packs[u] = load_pack<V>(x + src[u] * p.x_row_stride + piece * V);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (src[u] < 0) continue;
      unsigned mask = 0;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const auto v = DTypeTraits<scalar_t>::load(packs[u].v[i]);
        if (g.walk[i] && (g.result[i] != g.result[i] || same_value(v, g.result[i])))
          mask |= 1u << i;
      }
      if (mask != 0) visit(src[u], mask);
    }
  }
}

// Calls visit(source, i) for every matching (entry, feature) of
// for_each_matching_entry.
template <typename Traits, typename Visit>
__device__ __forceinline__ void for_each_match(const pygio_minmax_backward_params& p,
                                               WarpLayout layout, int lane, int64_t piece,
                                               int64_t begin, int64_t end,
                                               const GradPiece<Traits>& g, Visit visit) {
  for_each_matching_entry<Traits>(p, layout, lane, piece, begin, end, g,
                                  [&](int64_t source, unsigned mask) {
#pragma unroll
                                    for (int i = 0; i < Traits::kVec; ++i)
                                      if (mask >> i & 1u) visit(source, i);
                                  });
}

// acc[source, piece * V + i] += shares[i] for every matching (entry,
// feature) of for_each_matching_entry, one masked pack an entry
// (atomic_add_pack_masked: one vector atomic where float accumulators have
// them, -0.0 in the features that do not match). A walk over a row whose
// sources tie in many features (a min over ReLU features: 0, most of them)
// then makes one atomic per entry, not one per tied feature (H200, fp32 min
// over ReLU features, D=512: tolokers-like 2.34 -> 1.35 ms, arxiv-like
// 4.7-4.9 -> 3.5; roads-like, whose rows are short, D=64 0.236 -> 0.251).
// The subnormal caveat of atomic_add_pack_masked applies where a gradient
// was stored before (the bucket path).
template <typename Traits>
__device__ __forceinline__ void add_shares_to_matches(
    const pygio_minmax_backward_params& p, WarpLayout layout, int lane, int64_t piece,
    int64_t begin, int64_t end, const GradPiece<Traits>& g,
    const typename Traits::acc_t (&shares)[Traits::kVec], typename Traits::acc_t* __restrict__ acc,
    int64_t acc_stride) {
  typename Traits::acc_t* __restrict__ at = acc + piece * Traits::kVec;
  for_each_matching_entry<Traits>(p, layout, lane, piece, begin, end, g,
                                  [&](int64_t source, unsigned mask) {
                                    atomic_add_pack_masked<Traits::kVec>(
                                        at + source * acc_stride, shares, mask);
                                  });
}

// Matches per walking feature of this lane's piece over [begin, end),
// summed over the warp's sub-groups.
template <typename Traits>
__device__ __forceinline__ void count_matches(const pygio_minmax_backward_params& p,
                                              WarpLayout layout, int lane, int64_t piece,
                                              int64_t begin, int64_t end,
                                              const GradPiece<Traits>& g,
                                              typename Traits::acc_t (&matches)[Traits::kVec]) {
  constexpr int V = Traits::kVec;
#pragma unroll
  for (int i = 0; i < V; ++i) matches[i] = 0;
  for_each_match<Traits>(p, layout, lane, piece, begin, end, g,
                         [&](int64_t, int i) { matches[i] += 1; });
  sum_over_sub_groups(layout, matches);
}

// acc += the shares of the walking elements of this lane's piece over
// [begin, end) (every lane of the warp calls it alike). One walk counts
// each element's matches and keeps the first two sources a lane meets;
// where no lane of the warp met more than two (a tie of two values, or a
// zero with one match: the common cases), the shares go to those, else a
// second walk adds them.
template <typename Traits>
__device__ __forceinline__ void add_walk_shares(const pygio_minmax_backward_params& p,
                                                WarpLayout layout, int lane, int64_t piece,
                                                int64_t begin, int64_t end,
                                                const GradPiece<Traits>& g,
                                                typename Traits::acc_t* __restrict__ acc,
                                                int64_t acc_stride) {
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  acc_t matches[V];
  int32_t first[V], second[V];  // sources fit int32 (pyg_ioaware.h)
#pragma unroll
  for (int i = 0; i < V; ++i) matches[i] = 0, first[i] = second[i] = -1;
  for_each_match<Traits>(p, layout, lane, piece, begin, end, g, [&](int64_t source, int i) {
    if (matches[i] == acc_t(0)) first[i] = static_cast<int32_t>(source);
    else if (matches[i] == acc_t(1)) second[i] = static_cast<int32_t>(source);
    matches[i] += 1;
  });
  bool kept_all = true;
#pragma unroll
  for (int i = 0; i < V; ++i) kept_all = kept_all && matches[i] <= acc_t(2);
  sum_over_sub_groups(layout, matches);
  acc_t shares[V];
#pragma unroll
  for (int i = 0; i < V; ++i) shares[i] = g.share(i, matches[i]);
  if (__all_sync(0xffffffffu, kept_all)) {
    acc_t* __restrict__ at = acc + piece * V;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (first[i] >= 0) atomicAdd(at + first[i] * acc_stride + i, shares[i]);
      if (second[i] >= 0) atomicAdd(at + second[i] * acc_stride + i, shares[i]);
    }
    return;
  }
  add_shares_to_matches<Traits>(p, layout, lane, piece, begin, end, g, shares, acc, acc_stride);
}

// A warp's walking elements of one pass, in shared memory (stage_walks,
// match_staged_walks, add_staged_shares): feature, forward result,
// gradient, and the matches the warp's walk counted.
template <typename acc_t>
struct WalkSlots {
  static constexpr int kSlots = kWarpSize;
  int64_t feature[kSlots];
  int32_t matches[kSlots];
  acc_t result[kSlots];
  acc_t grad[kSlots];
};

// The (element, entry) pairs a warp walks together at the most: a bit a
// pair in each lane's 64-bit record of the pairs that matched.
constexpr int kWalkPairs = kWarpSize * 64;

// Few walking elements of a pass are walked together, as one list of
// (element, entry) pairs spread over the warp's lanes, instead of each by
// the lane holding it. A 16-bit pass with a tie or two (most of them) then
// walks its entries once over all lanes, not once over the one or two
// lanes holding a tie while the others wait.
//
// Stages the walking elements of this pass (sub-group 0's pieces: they hold
// the pass once) in `slots` and returns how many, where they are at most
// WalkSlots::kSlots and at most kWalkPairs pairs with the `entries` entries
// to walk; else -1, staging nothing. Every lane of the warp calls it alike.
template <typename Traits>
__device__ __forceinline__ int stage_walks(WarpLayout layout, int lane, int64_t piece,
                                           const GradPiece<Traits>& g, int64_t entries,
                                           WalkSlots<typename Traits::acc_t>& slots) {
  constexpr int V = Traits::kVec;
  uint32_t mine = 0;
  if (layout.sub_group(lane) == 0)
#pragma unroll
    for (int i = 0; i < V; ++i) mine |= static_cast<uint32_t>(g.walk[i]) << i;
  const int held = __popc(mine);
  const int through = warp_inclusive_sum(held, lane);
  const int elements = __shfl_sync(0xffffffffu, through, kWarpSize - 1);
  if (elements > WalkSlots<typename Traits::acc_t>::kSlots || elements * entries > kWalkPairs)
    return -1;
  int slot = through - held;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (mine >> i & 1u) {
      slots.feature[slot] = piece * V + i;
      slots.matches[slot] = 0;
      slots.result[slot] = g.result[i];
      slots.grad[slot] = g.grad[i];
      ++slot;
    }
  __syncwarp();
  return elements;
}

// Walks the pairs of the `elements` staged elements and the entries [begin,
// end) (a pair a lane, Traits::kWalkUnroll pairs in flight), counting each
// element's matches (equal to its result, or any value where the result is
// NaN) in slots.matches. Returns this lane's record of the pairs that
// matched: bit k for pair k * 32 + lane. Every lane of the warp calls it
// alike.
template <typename Traits>
__device__ __forceinline__ uint64_t match_staged_walks(const pygio_minmax_backward_params& p,
                                                       int lane, int64_t begin, int64_t end,
                                                       int elements,
                                                       WalkSlots<typename Traits::acc_t>& slots) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int U = Traits::kWalkUnroll;
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const auto* __restrict__ x = static_cast<const scalar_t*>(p.x);
  const int degree = static_cast<int>(end - begin), pairs = elements * degree;
  uint64_t matched = 0;
  for (int k0 = 0; k0 * kWarpSize < pairs; k0 += U) {
    int element[U];
    index_t source[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int pair = (k0 + u) * kWarpSize + lane;
      element[u] = pair < pairs ? pair / degree : -1;
      source[u] = element[u] >= 0 ? col[begin + (pair - element[u] * degree)] : index_t(0);
    }
    scalar_t value[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (element[u] >= 0)
        value[u] = x[static_cast<int64_t>(source[u]) * p.x_row_stride + slots.feature[element[u]]];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (element[u] < 0) continue;
      const acc_t result = slots.result[element[u]];
      if (result != result || same_value(DTypeTraits<scalar_t>::load(value[u]), result)) {
        atomicAdd(&slots.matches[element[u]], 1);
        matched |= uint64_t{1} << (k0 + u);
      }
    }
  }
  __syncwarp();
  return matched;
}

// acc[source, feature] += share_of(element) for every pair of this lane's
// record `matched` (match_staged_walks over the same entries [begin, end)).
// Every lane of the warp calls it alike; the slots are free afterwards.
template <typename Traits, typename ShareOf>
__device__ __forceinline__ void add_staged_shares(const pygio_minmax_backward_params& p,
                                                  int lane, int64_t begin, int64_t end,
                                                  const WalkSlots<typename Traits::acc_t>& slots,
                                                  uint64_t matched, ShareOf share_of,
                                                  typename Traits::acc_t* __restrict__ acc,
                                                  int64_t acc_stride) {
  using index_t = typename Traits::index_t;
  const auto* __restrict__ col = static_cast<const index_t*>(p.a.col);
  const int degree = static_cast<int>(end - begin);
  while (matched != 0) {
    const int k = __ffsll(static_cast<long long>(matched)) - 1;
    matched &= matched - 1;
    const int pair = k * kWarpSize + lane, element = pair / degree;
    const int64_t source = col[begin + pair % degree];
    atomicAdd(acc + source * acc_stride + slots.feature[element], share_of(element));
  }
  __syncwarp();
}

// The backward's hub workspace: the hub list (rows above the hub degree
// with an element that walks) and the matches counted per hub element.
template <typename acc_t>
struct GradHubs {
  HubList list;
  acc_t* matches;  // [list.capacity, width], zeroed
  int64_t chunk;   // entries a chunk takes (at most kMinMaxHubChunk)
};

// acc[source, f] += the gradient of every plain winner (resolved to its
// source) among the features of the pass at piece `base` (sub-group 0's
// pieces: features [base * V, (base + lanes) * V)), consecutive lanes
// adding consecutive features:
// lane k takes feature k of the pass from the lane holding it (V shuffles
// a value, one kept). Where lanes added their own pieces, a warp's atomic
// instruction landed on as many 32-byte sectors as lanes, a piece apart;
// now, where winners repeat along the row (every source of a low-degree
// row), it falls on a few (H200, min D=512 fp32 backward: roads-like 0.85
// -> 0.58 ms, arxiv-like 0.72 -> 0.58, pokec-like 19.0 -> 17.0, web-like
// 8.1 -> 7.8; staged through shared memory instead, bf16 lost 7-15% on
// arxiv-, pokec- and web-like). Every lane of the warp calls it alike.
template <typename Traits>
__device__ __forceinline__ void add_winner_gradients(const pygio_minmax_backward_params& p,
                                                     WarpLayout layout, int lane, int64_t base,
                                                     const GradPiece<Traits>& g,
                                                     typename Traits::acc_t* __restrict__ acc,
                                                     int64_t acc_stride) {
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  bool any_winner = false;  // an inactive piece's codes are kCodeEmpty
#pragma unroll
  for (int i = 0; i < V; ++i) any_winner = any_winner || g.code[i] >= 0;
  if (!__any_sync(0xffffffffu, any_winner)) return;  // isolated rows, only ties
  const int features = layout.lanes() * V;
  acc_t* __restrict__ at = acc + base * V;
  for (int k0 = 0; k0 < features; k0 += kWarpSize) {
    const int k = k0 + lane;
    const int holder = k < features ? k / V : 0;
    int32_t code = kCodeEmpty;
    acc_t grad = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int32_t c = __shfl_sync(0xffffffffu, g.code[i], holder);
      const acc_t v = __shfl_sync(0xffffffffu, g.grad[i], holder);
      if (i == k % V) code = c, grad = v;
    }
    if (k < features && code >= 0)
      atomicAdd(at + static_cast<int64_t>(code) * acc_stride + k, grad);
  }
}

// The bucket path's workspace (pyg_ioaware.h, pygio_minmax_backward_params):
// per CSR entry its group (start | length << 16) among its row's width
// slots, 0 (empty) for every entry of a row not bucketed; per slot the
// feature and the gradient of one plain winner, a row's slots grouped by
// entry in entry order (within a group in no fixed order).
template <typename scalar_t>
struct GradBuckets {
  uint32_t* groups;     // [nnz], zeroed
  uint16_t* features;   // [num_rows, width]
  scalar_t* grads;      // [num_rows, width]
};

// A warp's bucket state for its current row, in shared memory: cursor[e]
// (entry e's next slot), and the row's slots staged (feature, gradient)
// before one coalesced write to the workspace.
template <typename scalar_t>
struct RowBuckets {
  int* cursor;          // PYGIO_MINMAX_BUCKET_MAX_DEGREE
  uint16_t* features;   // width
  scalar_t* grads;      // width
};

// Opens the buckets of row `row` (`degree` entries from `begin`, at most
// PYGIO_MINMAX_BUCKET_MAX_DEGREE): counts each entry's plain winners,
// writes each entry's group and leaves s.cursor[e] at entry e's first
// slot. Returns the row's plain winners. Every lane of the warp calls it
// alike.
template <typename Traits>
__device__ __forceinline__ int open_buckets(const pygio_minmax_backward_params& p,
                                            const GradBuckets<typename Traits::scalar_t>& b,
                                            const RowBuckets<typename Traits::scalar_t>& s,
                                            int64_t row, int64_t begin, int degree, int lane) {
  for (int e = lane; e < degree; e += kWarpSize) s.cursor[e] = 0;
  __syncwarp();
  for (int64_t f = lane; f < p.width; f += kWarpSize) {
    const int32_t code = load_code(p.arg, p.arg_bytes, row * p.width + f);
    if (code >= 0 && code < degree) atomicAdd(s.cursor + code, 1);
  }
  __syncwarp();
  int carry = 0;  // exclusive prefix sum of the counts, in place
  for (int e0 = 0; e0 < degree; e0 += kWarpSize) {
    const int e = e0 + lane;
    const int count = e < degree ? s.cursor[e] : 0;
    const int sum = warp_inclusive_sum(count, lane);
    if (e < degree) {
      s.cursor[e] = carry + sum - count;
      b.groups[begin + e] = static_cast<uint32_t>(carry + sum - count) |
                            (static_cast<uint32_t>(count) << 16);
    }
    carry += __shfl_sync(0xffffffffu, sum, kWarpSize - 1);
  }
  __syncwarp();
  return carry;
}

// Stages every plain winner (its code the position in its row, of
// `degree`) of this lane's piece in its entry's next slot (open_buckets);
// sub-group 0's lanes only (the others hold the same pieces).
template <typename Traits>
__device__ __forceinline__ void stage_winner_gradients(
    const RowBuckets<typename Traits::scalar_t>& s, WarpLayout layout, int lane, int64_t piece,
    const GradPiece<Traits>& g, int degree) {
  using scalar_t = typename Traits::scalar_t;
  if (layout.sub_group(lane) != 0) return;
#pragma unroll
  for (int i = 0; i < Traits::kVec; ++i) {
    if (g.code[i] >= 0 && g.code[i] < degree) {
      const int slot = atomicAdd(s.cursor + g.code[i], 1);
      s.features[slot] = static_cast<uint16_t>(piece * Traits::kVec + i);
      s.grads[slot] = DTypeTraits<scalar_t>::store(g.grad[i]);
    }
  }
}

// Writes the row's `count` staged slots to the workspace, coalesced.
template <typename scalar_t>
__device__ __forceinline__ void write_buckets(const pygio_minmax_backward_params& p,
                                              const GradBuckets<scalar_t>& b,
                                              const RowBuckets<scalar_t>& s, int64_t row,
                                              int count, int lane) {
  __syncwarp();
  for (int i = lane; i < count; i += kWarpSize) {
    b.features[row * p.width + i] = s.features[i];
    b.grads[row * p.width + i] = s.grads[i];
  }
  __syncwarp();
}

// Shared memory of a staged slot (the bucketed rows kernel's dynamic part:
// a warp's width slots, every warp of the block).
template <typename scalar_t>
constexpr size_t kStagedSlotBytes = sizeof(scalar_t) + sizeof(uint16_t);

// The rows the bucket rows kernel leaves to the atomics' kernel, which runs
// after the source kernels have written acc: rows of more than
// PYGIO_MINMAX_BUCKET_MAX_DEGREE entries (every element) and bucketed rows
// with elements that walk (those elements).
struct DeferredRows {
  unsigned long long* count;  // zeroed
  int64_t* rows;              // [num_rows]
};

__device__ __forceinline__ void defer_row(const DeferredRows& deferred, int64_t row, int lane) {
  if (lane == 0) deferred.rows[atomicAdd(deferred.count, 1ull)] = row;
}

// acc (row stride acc_stride; zeroed, or with kDeferred stored by the
// bucket path's source kernels) += the gradient of every output element of
// the rows taken (every row; with kDeferred, the deferred rows): a warp per
// row; plain elements with one atomicAdd each (add_winner_gradients; not
// those of a deferred bucketed row, which are in its groups), the elements
// that walk staged and walked together where a pass holds few
// (stage_walks), else through add_walk_shares. Hub rows with walking
// elements are registered for the chunk kernels instead of walked here.
// Registers capped for three blocks an SM (80; the staged walk took 93-98
// uncapped; 16-bit spills about 20 bytes capped).
template <typename Traits, bool kDeferred>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, 3)
    minmax_grad_rows_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                            WarpLayout layout, const GradHubs<typename Traits::acc_t> hubs,
                            const DeferredRows deferred, typename Traits::acc_t* __restrict__ acc,
                            int64_t acc_stride) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  __shared__ WalkSlots<acc_t> walk_slots[Traits::kWarpsPerBlock];
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  const int64_t num_rows = kDeferred ? static_cast<int64_t>(*deferred.count) : p.a.num_rows;
  int64_t hub_degree = -1;
  if (hubs.list.hubs != nullptr) {
    hub_degree = *p.hub_degree;
    if (hub_degree < PYGIO_MINMAX_MIN_HUB_DEGREE) hub_degree = PYGIO_MINMAX_MIN_HUB_DEGREE;
  }
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       i < num_rows; i += warps) {
    const int64_t row = kDeferred ? deferred.rows[i] : i;
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    bool hub = false;
    if (hub_degree >= 0 && end - begin > hub_degree) {
      bool any = false;
      for (int64_t f = lane; f < p.width; f += kWarpSize)
        any = any || load_code(p.arg, p.arg_bytes, row * p.width + f) == kCodeWalk;
      hub = __any_sync(0xffffffffu, any) &&
            register_hub(hubs.list, row, end - begin, hubs.chunk, lane);
    }
    const bool winners = !kDeferred || end - begin > PYGIO_MINMAX_BUCKET_MAX_DEGREE;
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      const bool active = piece < pieces;
      GradPiece<Traits> g;
      g.load(p, row, piece, active);
      if (winners) {
        g.resolve_winners(p, begin, end);
        add_winner_gradients<Traits>(p, layout, lane, base, g, acc, acc_stride);
      }
      if (hub || !__any_sync(0xffffffffu, g.any_walk)) continue;
      WalkSlots<acc_t>& slots = walk_slots[warp];
      const int staged = stage_walks<Traits>(layout, lane, piece, g, end - begin, slots);
      if (staged < 0) {
        add_walk_shares<Traits>(p, layout, lane, piece, begin, end, g, acc, acc_stride);
        continue;
      }
      const uint64_t matched = match_staged_walks<Traits>(p, lane, begin, end, staged, slots);
      add_staged_shares<Traits>(
          p, lane, begin, end, slots, matched,
          [&](int e) {
            return walk_share(slots.result[e], slots.grad[e], static_cast<acc_t>(slots.matches[e]));
          },
          acc, acc_stride);
    }
  }
}

// The bucket path's first kernel, a warp per row: a row of at most
// PYGIO_MINMAX_BUCKET_MAX_DEGREE entries stages its plain winners by entry
// in shared memory and writes them as its entries' groups (open_buckets,
// stage_winner_gradients, write_buckets) for the source kernels, and is
// deferred where an element walks; a longer row is deferred whole.
// Registers capped for three blocks an SM (H200, pokec-like D=512 fp32: an
// earlier form of this kernel, walks included, took 6.40 ms at 104
// registers and two blocks, 4.88 capped; this one 3.87).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock, 3)
    minmax_grad_bucket_rows_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                                   WarpLayout layout,
                                   const GradBuckets<typename Traits::scalar_t> buckets,
                                   const DeferredRows deferred) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  constexpr int V = Traits::kVec;
  __shared__ int cursors[Traits::kWarpsPerBlock][PYGIO_MINMAX_BUCKET_MAX_DEGREE];
  extern __shared__ __align__(16) unsigned char staged[];  // each warp's staged slots
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const RowBuckets<scalar_t> s{
      cursors[warp],
      reinterpret_cast<uint16_t*>(staged + Traits::kWarpsPerBlock * p.width * sizeof(scalar_t)) +
          warp * p.width,
      reinterpret_cast<scalar_t*>(staged) + warp * p.width};
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       row < p.a.num_rows; row += warps) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    if (end - begin > PYGIO_MINMAX_BUCKET_MAX_DEGREE) {
      defer_row(deferred, row, lane);
      continue;
    }
    if (end == begin) continue;  // no element takes a gradient
    const int degree = static_cast<int>(end - begin);
    const int count = open_buckets<Traits>(p, buckets, s, row, begin, degree, lane);
    bool walks = false;
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      GradPiece<Traits> g;
      g.load(p, row, piece, piece < pieces);
      stage_winner_gradients<Traits>(s, layout, lane, piece, g, degree);
      walks = walks || g.any_walk;
    }
    write_buckets(p, buckets, s, row, count, lane);
    if (__any_sync(0xffffffffu, walks)) defer_row(deferred, row, lane);
  }
}

// sums[f] += the bucketed gradients of every CSR^T entry in [begin, end)
// (its CSR entry's group, through perm_t; sums in shared memory, `width`
// of them): lanes read 32 entries' groups at once, then take the slots of
// all 32 groups as one list, a slot a lane (its group found by a binary
// search over the groups' ends), kBucketUnroll slots a lane in flight.
// Every lane of the warp calls it alike.
constexpr int kBucketUnroll = 4;
template <typename Traits>
__device__ __forceinline__ void sum_entry_groups(const pygio_minmax_backward_params& p,
                                                 const GradBuckets<typename Traits::scalar_t>& b,
                                                 int64_t begin, int64_t end,
                                                 typename Traits::acc_t* __restrict__ sums,
                                                 int lane) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  constexpr int U = kBucketUnroll;
  const auto* __restrict__ col_t = static_cast<const index_t*>(p.a_t.col);
  const auto* __restrict__ perm_t = static_cast<const index_t*>(p.perm_t);
  for (int64_t t0 = begin; t0 < end; t0 += kWarpSize) {
    const int64_t t = t0 + lane;
    uint32_t group = 0;
    int64_t first = 0;  // the group's first slot in the workspace
    if (t < end) {
      group = b.groups[perm_t[t]];
      first = static_cast<int64_t>(col_t[t]) * p.width + (group & 0xffffu);
    }
    const int length = static_cast<int>(group >> 16);
    const int ends = warp_inclusive_sum(length, lane);  // the lengths up to this lane's
    const int total = __shfl_sync(0xffffffffu, ends, kWarpSize - 1);
    const long long start = first - (ends - length);  // slot k of the list at start + k
    for (int k0 = 0; k0 < total; k0 += kWarpSize * U) {
      uint16_t feature[U];
      scalar_t grad[U];
      bool valid[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = k0 + u * kWarpSize + lane;
        int j = 0;  // the first lane whose end is past k
        for (int step = kWarpSize / 2; step > 0; step >>= 1)
          if (__shfl_sync(0xffffffffu, ends, j + step - 1) <= k) j += step;
        const long long at = __shfl_sync(0xffffffffu, start, j) + k;
        valid[u] = k < total;
        if (valid[u]) feature[u] = b.features[at], grad[u] = b.grads[at];
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (valid[u]) atomicAdd(sums + feature[u], DTypeTraits<scalar_t>::load(grad[u]));
    }
  }
  __syncwarp();
}

// The bucketed gradients of CSR^T rows added to acc, a warp per item,
// summed in shared memory (each warp's `width` sums in the dynamic part).
// kChunks false: an item is a source u, and acc[u, :] = its entries' sums
// is stored (every row of acc: the bucket path does not zero it); a
// source of more than PYGIO_MINMAX_BUCKET_SOURCE_CHUNK entries stores
// zeros and is registered in source_hubs instead (or, the list full, is
// summed here). kChunks true (launched after): an item is a chunk of a
// registered source, its sums added to the source's row with atomicAdd.
template <typename Traits, bool kChunks>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_grad_bucket_sums_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                                   const GradBuckets<typename Traits::scalar_t> buckets,
                                   const HubList source_hubs,
                                   typename Traits::acc_t* __restrict__ acc,
                                   int64_t acc_stride) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int64_t kChunk = PYGIO_MINMAX_BUCKET_SOURCE_CHUNK;
  extern __shared__ __align__(16) unsigned char shared_sums[];
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  acc_t* __restrict__ sums =
      reinterpret_cast<acc_t*>(shared_sums) + (threadIdx.x / kWarpSize) * p.width;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t num_hubs = kChunks ? hub_count(source_hubs) : 0;
  const int64_t items = row_or_chunk_items<kChunks>(source_hubs, num_hubs, p.a_t.num_rows);
  for (int64_t f = lane; f < p.width; f += kWarpSize) sums[f] = 0;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                      threadIdx.x / kWarpSize;
       item < items; item += warps) {
    int64_t begin = 0, end = 0;
    bool registered = false;
    const int64_t u = row_or_chunk<kChunks>(source_hubs, num_hubs, rowptr_t, item, kChunk, lane,
                                            &begin, &end, &registered);
    if (!registered) sum_entry_groups<Traits>(p, buckets, begin, end, sums, lane);
    for (int64_t f = lane; f < p.width; f += kWarpSize) {
      if constexpr (kChunks) {
        if (sums[f] != acc_t(0)) atomicAdd(acc + u * acc_stride + f, sums[f]);
      } else {
        acc[u * acc_stride + f] = sums[f];
      }
      sums[f] = 0;
    }
    __syncwarp();
  }
}

// hubs.matches[slot, f] += the matches of walking hub elements in each chunk
// (a pass's few walking elements walked together: stage_walks).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_grad_hub_count_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                                 WarpLayout layout, const GradHubs<typename Traits::acc_t> hubs) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  __shared__ WalkSlots<acc_t> walk_slots[Traits::kWarpsPerBlock];
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t num_hubs = hub_count(hubs.list);
  const int64_t num_chunks = num_hubs > 0 ? hub_chunk_count(hubs.list) : 0;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       chunk < num_chunks; chunk += warps) {
    int64_t begin = 0, end = 0;
    const int64_t slot = hub_chunk_range(hubs.list, num_hubs, rowptr, chunk, hubs.chunk, &begin,
                                         &end);
    const int64_t row = hubs.list.hubs[slot].row;
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      GradPiece<Traits> g;
      g.load(p, row, piece, piece < pieces);
      if (!__any_sync(0xffffffffu, g.any_walk)) continue;
      WalkSlots<acc_t>& slots = walk_slots[warp];
      const int staged = stage_walks<Traits>(layout, lane, piece, g, end - begin, slots);
      if (staged >= 0) {
        match_staged_walks<Traits>(p, lane, begin, end, staged, slots);
        if (lane < staged && slots.matches[lane] != 0)
          atomicAdd(hubs.matches + slot * p.width + slots.feature[lane],
                    static_cast<acc_t>(slots.matches[lane]));
        __syncwarp();  // the slots are free
        continue;
      }
      acc_t matches[V];
      count_matches<Traits>(p, layout, lane, piece, begin, end, g, matches);
      if (layout.sub_group(lane) != 0) continue;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (g.walk[i] && matches[i] != acc_t(0))
          atomicAdd(hubs.matches + slot * p.width + piece * V + i, matches[i]);
    }
  }
}

// acc += each chunk's shares of its hub's walking elements (a pass's few
// walking elements walked together: stage_walks).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_grad_hub_share_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                                 WarpLayout layout, const GradHubs<typename Traits::acc_t> hubs,
                                 typename Traits::acc_t* __restrict__ acc, int64_t acc_stride) {
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  __shared__ WalkSlots<acc_t> walk_slots[Traits::kWarpsPerBlock];
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const int64_t num_hubs = hub_count(hubs.list);
  const int64_t num_chunks = num_hubs > 0 ? hub_chunk_count(hubs.list) : 0;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t pieces = p.width / V;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock + warp;
       chunk < num_chunks; chunk += warps) {
    int64_t begin = 0, end = 0;
    const int64_t slot = hub_chunk_range(hubs.list, num_hubs, rowptr, chunk, hubs.chunk, &begin,
                                         &end);
    const int64_t row = hubs.list.hubs[slot].row;
    const acc_t* __restrict__ hub_matches = hubs.matches + slot * p.width;
    for (int64_t base = 0; base < pieces; base += layout.lanes()) {
      const int64_t piece = layout.piece(lane, base, 0);
      const bool active = piece < pieces;
      GradPiece<Traits> g;
      g.load(p, row, piece, active);
      if (!__any_sync(0xffffffffu, g.any_walk)) continue;
      WalkSlots<acc_t>& slots = walk_slots[warp];
      const int staged = stage_walks<Traits>(layout, lane, piece, g, end - begin, slots);
      if (staged >= 0) {
        const uint64_t matched = match_staged_walks<Traits>(p, lane, begin, end, staged, slots);
        add_staged_shares<Traits>(
            p, lane, begin, end, slots, matched,
            [&](int e) {
              return walk_share(slots.result[e], slots.grad[e], hub_matches[slots.feature[e]]);
            },
            acc, acc_stride);
        continue;
      }
      acc_t shares[V];
#pragma unroll
      for (int i = 0; i < V; ++i)
        shares[i] = g.walk[i] ? g.share(i, hub_matches[piece * V + i]) : acc_t(0);
      add_shares_to_matches<Traits>(p, layout, lane, piece, begin, end, g, shares, acc,
                                    acc_stride);
    }
  }
}

// share[r * width + f] = walk_element_share of every element (r, f) that
// walks (arg's kCodeWalk); the other elements of share are not written.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_walk_share_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                             typename Traits::acc_t* __restrict__ share) {
  using scalar_t = typename Traits::scalar_t;
  const auto* __restrict__ grad_out = static_cast<const scalar_t*>(p.grad_out);
  const int64_t total = p.a.num_rows * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (load_code(p.arg, p.arg_bytes, i) != kCodeWalk) continue;
    const int64_t r = i / p.width, f = i - r * p.width;
    share[i] = walk_element_share<Traits>(
        p, r, f, DTypeTraits<scalar_t>::load(grad_out[r * p.grad_out_row_stride + f]));
  }
}

// Pieces of kVec features a lane of the gather kernel holds.
constexpr int kGatherPieces = 4;

// sum[i] += what element (v, piece * V + i) of the forward's output gives
// the CSR^T entry (u -> v) at `position` in v's row: its gradient where
// the entry is the plain winner (arg's code is the position; kByPosition
// false: the code is a position and x[u, f] equals the result, a plain
// winner being its row's one entry equal to it), else, where the element
// walks and x[u, f] equals the result or the result is NaN, its share
// (minmax_walk_share_kernel's). own / own_loaded: x[u, piece], loaded on
// first need.
template <typename Traits, bool kByPosition>
__device__ __forceinline__ void gather_entry_piece(
    const pygio_minmax_backward_params& p, int64_t u, int64_t v, int64_t position,
    int64_t piece, const typename Traits::acc_t* __restrict__ share,
    typename Traits::acc_t (&own)[Traits::kVec], bool& own_loaded,
    typename Traits::acc_t (&sum)[Traits::kVec]) {
  using scalar_t = typename Traits::scalar_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec;
  int32_t code[V];
  load_codes<V>(p.arg, p.arg_bytes, v * p.width + piece * V, code);
  bool plain[V], walk[V], compare = false;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    plain[i] = kByPosition && code[i] == position;
    walk[i] = code[i] == kCodeWalk;
    compare = compare || walk[i] || (!kByPosition && code[i] >= 0);
  }
  if (compare) {
    if (!own_loaded) {
      const Pack<scalar_t, V> mine = load_pack<V>(static_cast<const scalar_t*>(p.x) +
                                                  u * p.x_row_stride + piece * V);
      widen_pack(mine, own);
      own_loaded = true;
    }
    const Pack<scalar_t, V> r = load_pack<V>(static_cast<const scalar_t*>(p.out) +
                                             v * p.out_row_stride + piece * V);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const acc_t result = DTypeTraits<scalar_t>::load(r.v[i]);
      const bool equal = same_value(own[i], result);
      if (!kByPosition) plain[i] = code[i] >= 0 && equal;
      walk[i] = walk[i] && (equal || result != result);
    }
  }
  bool any_plain = false;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    any_plain = any_plain || plain[i];
    if (walk[i]) sum[i] += share[v * p.width + piece * V + i];
  }
  if (!any_plain) return;
  const Pack<scalar_t, V> g = load_pack<V>(static_cast<const scalar_t*>(p.grad_out) +
                                           v * p.grad_out_row_stride + piece * V);
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (plain[i]) sum[i] += DTypeTraits<scalar_t>::load(g.v[i]);
}

// grad_x[u, :] = the sum over the CSR^T entries e = (u -> v) of what each
// element (v, f) gives the entry (gather_entry_piece; the entry's position
// in v's row is perm_t[e] - rowptr[v] with kByPosition): a warp per source,
// the layout's sub-groups on interleaved entries, kGatherPieces pieces of
// kVec features a lane, summed over the sub-groups with shuffles; the next
// entry's destination and position load while an entry is summed. No
// atomics and a fixed order: the same sums every run. kChunks false: an
// item is a source; one of more than PYGIO_MINMAX_BUCKET_SOURCE_CHUNK
// entries is registered in source_hubs instead (or, the list full, is
// summed here). kChunks true (launched after): an item is a chunk of a
// registered source, its sums stored to its row of chunk_sums
// (minmax_gather_hub_finish_kernel adds them up).
template <typename Traits, bool kByPosition, bool kChunks>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_gather_grad_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                              WarpLayout layout,
                              const typename Traits::acc_t* __restrict__ share,
                              const HubList source_hubs,
                              typename Traits::acc_t* __restrict__ chunk_sums) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int V = Traits::kVec, P = kGatherPieces;
  constexpr int64_t kChunk = PYGIO_MINMAX_BUCKET_SOURCE_CHUNK;
  const auto* __restrict__ rowptr = static_cast<const index_t*>(p.a.rowptr);
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  const auto* __restrict__ col_t = static_cast<const index_t*>(p.a_t.col);
  const auto* __restrict__ perm_t = static_cast<const index_t*>(p.perm_t);
  auto* __restrict__ grad_x = static_cast<scalar_t*>(p.grad_x);
  const int lane = threadIdx.x % kWarpSize;
  const int sub = layout.sub_group(lane), subs = layout.sub_groups();
  const int64_t pieces = p.width / V;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * Traits::kWarpsPerBlock;
  const int64_t num_hubs = kChunks ? hub_count(source_hubs) : 0;
  const int64_t items = row_or_chunk_items<kChunks>(source_hubs, num_hubs, p.a_t.num_rows);
  // The destination of entry e and its position in the destination's row.
  auto entry = [&](int64_t e, int64_t* v, int64_t* position) {
    *v = col_t[e];
    *position = kByPosition ? static_cast<int64_t>(perm_t[e]) - static_cast<int64_t>(rowptr[*v])
                            : -1;
  };
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * Traits::kWarpsPerBlock +
                      threadIdx.x / kWarpSize;
       item < items; item += warps) {
    int64_t begin = 0, end = 0;
    bool registered = false;
    const int64_t u = row_or_chunk<kChunks>(source_hubs, num_hubs, rowptr_t, item, kChunk, lane,
                                            &begin, &end, &registered);
    if (registered) continue;
    for (int64_t base = 0; base < pieces; base += layout.lanes() * P) {
      acc_t sum[P][V] = {};
      acc_t own[P][V];
      bool own_loaded[P] = {};
      int64_t v = 0, position = 0;
      if (begin + sub < end) entry(begin + sub, &v, &position);
      for (int64_t e = begin + sub; e < end; e += subs) {
        int64_t next_v = 0, next_position = 0;
        if (e + subs < end) entry(e + subs, &next_v, &next_position);
#pragma unroll
        for (int q = 0; q < P; ++q) {
          const int64_t piece = layout.piece(lane, base, q);
          if (piece < pieces)
            gather_entry_piece<Traits, kByPosition>(p, u, v, position, piece, share, own[q],
                                                    own_loaded[q], sum[q]);
        }
        v = next_v, position = next_position;
      }
#pragma unroll
      for (int q = 0; q < P; ++q) sum_over_sub_groups(layout, sum[q]);
      if (sub != 0) continue;
#pragma unroll
      for (int q = 0; q < P; ++q) {
        const int64_t piece = layout.piece(lane, base, q);
        if (piece >= pieces) continue;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if constexpr (kChunks)
            chunk_sums[item * p.width + piece * V + i] = sum[q][i];
          else
            grad_x[u * p.grad_x_row_stride + piece * V + i] =
                DTypeTraits<scalar_t>::store(sum[q][i]);
        }
      }
    }
  }
}

// grad_x[u, f] of each source u registered by minmax_gather_grad_kernel =
// the sum of its chunks' rows of chunk_sums, in chunk order: a thread per
// (source, feature).
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreadsPerBlock)
    minmax_gather_hub_finish_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                                    const HubList source_hubs,
                                    const typename Traits::acc_t* __restrict__ chunk_sums) {
  using scalar_t = typename Traits::scalar_t;
  using index_t = typename Traits::index_t;
  using acc_t = typename Traits::acc_t;
  constexpr int64_t kChunk = PYGIO_MINMAX_BUCKET_SOURCE_CHUNK;
  const auto* __restrict__ rowptr_t = static_cast<const index_t*>(p.a_t.rowptr);
  auto* __restrict__ grad_x = static_cast<scalar_t*>(p.grad_x);
  const int64_t total = hub_count(source_hubs) * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = i / p.width, f = i - slot * p.width;
    const HubEntry hub = source_hubs.hubs[slot];
    const int64_t chunks = (rowptr_t[hub.row + 1] - rowptr_t[hub.row] + kChunk - 1) / kChunk;
    acc_t sum(0);
    for (int64_t c = hub.first_chunk; c < hub.first_chunk + chunks; ++c)
      sum += chunk_sums[c * p.width + f];
    grad_x[hub.row * p.grad_x_row_stride + f] = DTypeTraits<scalar_t>::store(sum);
  }
}

// y[r, f] = acc[r * width + f] in y's type, V features a thread in one
// load and one store (width, y's row stride and y's address multiples of
// V elements; acc 16-byte aligned).
template <typename scalar_t, typename acc_t, int V>
__global__ void __launch_bounds__(kCastThreadsPerBlock)
    minmax_cast_kernel(const __grid_constant__ pygio_minmax_backward_params p,
                       const acc_t* __restrict__ acc) {
  auto* __restrict__ y = static_cast<scalar_t*>(p.grad_x);
  const int64_t pieces = p.width / V, total = p.a.num_cols * pieces;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces, f = (i - r * pieces) * V;
    const Pack<acc_t, V> pack = load_pack<V>(acc + r * p.width + f);
    acc_t values[V];
#pragma unroll
    for (int k = 0; k < V; ++k) values[k] = pack.v[k];
    store_pack<V>(y + r * p.grad_x_row_stride + f, values);
  }
}

}  // namespace pygio
