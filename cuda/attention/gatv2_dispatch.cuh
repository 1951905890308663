// Host side shared by the GATv2 entries: the checks every entry applies to
// the inputs they share, the lane layout of a head, and the dispatch from
// runtime dtype / index width / vector width / pieces per lane to GatTraits.
#pragma once

#include <string>
#include <type_traits>

#include "../common/abi.h"
#include "../common/vector_width.h"
#include "gatv2_traits.cuh"

namespace pygio {
namespace gatv2 {

constexpr size_t kAlign = 16;

inline size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
inline bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlign == 0; }

// Pieces per lane the kernels are built for (1, 2, 4, 8), and at most 32
// channels a lane (registers): up to 1024 channels a head in 16-byte
// pieces, up to 256 one channel at a time.
constexpr int kMaxPieces = 8;
constexpr int kMaxElemsPerLane = 32;

inline int64_t max_channels(int vec) {
  const int pieces = kMaxElemsPerLane / vec < kMaxPieces ? kMaxElemsPerLane / vec : kMaxPieces;
  return int64_t{kWarpSize} * pieces * vec;
}

// Checks of the fields pygio_gatv2, _backward and _alpha share (no device
// access): the CSR, dtype (fp32 / fp16 / bf16), heads and channels, x_l
// and x_r with their row strides, att.
template <typename P>
int check_inputs(const P& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_CHECK_ARG(p.dtype == PYGIO_FLOAT32 || p.dtype == PYGIO_FLOAT16 ||
                      p.dtype == PYGIO_BFLOAT16,
                  entry_message(entry, "dtype must be float32, float16 or bfloat16, got code " +
                                           std::to_string(p.dtype)));
  PYGIO_CHECK_ARG(p.heads > 0 && p.channels > 0,
                  entry_message(entry, "heads and channels must be positive"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.a.rowptr != nullptr && p.x_r != nullptr && p.att != nullptr,
                    entry_message(entry, "rowptr, x_r and att must not be NULL"));
    PYGIO_TRY(check_row_stride(p.x_r_row_stride, p.heads * p.channels, "x_r", entry));
  }
  if (p.a.nnz > 0) {
    PYGIO_CHECK_ARG(p.x_l != nullptr, entry_message(entry, "x_l must not be NULL"));
    PYGIO_TRY(check_row_stride(p.x_l_row_stride, p.heads * p.channels, "x_l", entry));
  }
  return PYGIO_OK;
}

inline int check_dropout(float p, const char* entry) {
  PYGIO_CHECK_ARG(p >= 0.f && p < 1.f, entry_message(entry, "dropout_p must lie in [0, 1)"));
  return PYGIO_OK;
}

// How the kernels cover a row: kVec channels per load (16 bytes where
// channels, every row stride and every base pointer allow, else 1), groups
// of `layout.lanes()` lanes (a power of two, at most 32), `pieces` pieces
// per lane (a power of two), and 2^head_shift heads a pass (as many of the
// warp's groups as there are heads, rounded down to a power of two; the
// other factor are entry slots).
struct Plan {
  int vec;
  WarpLayout layout;
  int pieces;
  int head_shift;
};

// Pieces a lane holds where 2^shift lanes span `pieces` (a power of two).
inline int pieces_per_lane(int64_t pieces, int shift) {
  const int64_t lanes = int64_t{1} << shift;
  const int64_t needed = (pieces + lanes - 1) / lanes;
  int per_lane = 1;
  while (per_lane < needed) per_lane <<= 1;
  return per_lane;
}

// log2 of the heads a pass takes with groups of 2^shift lanes.
inline int heads_shift(int64_t heads, int shift) {
  int head_shift = 0;
  while (head_shift < kWarpShift - shift && (int64_t{2} << head_shift) <= heads) ++head_shift;
  return head_shift;
}

// Passes over a row's entries for `heads` heads with groups of 2^shift lanes.
inline int64_t passes(int64_t heads, int shift) {
  return (heads + (int64_t{1} << heads_shift(heads, shift)) - 1) >> heads_shift(heads, shift);
}

// Lanes a head: the fewest that span a head's pieces with one piece a lane
// (up to 32), unless fewer lanes with more pieces a lane put more heads in
// one pass: each pass walks every entry again, and a pass's work per entry
// (index shuffles, the score's lane sum, the softmax update) is served for
// all its heads at once. One channel a load (odd head sizes, such as a
// 47-class output layer) takes up to kMaxPieces a lane (H100, GATv2 (2,
// 47): two passes of 32 lanes -> one of two 16-lane groups, 1.5-1.7x
// faster); 16-byte loads up to `wide_pieces`, the family's timed choice
// (more pieces a lane cost registers and entries in flight).
inline int lane_shift(int vec, int64_t heads, int64_t pieces, int wide_pieces) {
  int shift = 0;
  while (shift < kWarpShift && (int64_t{1} << shift) < pieces) ++shift;
  int cap = vec == 1 ? kMaxPieces : wide_pieces;
  if (cap * vec > kMaxElemsPerLane) cap = kMaxElemsPerLane / vec;
  int best = shift;
  for (int s = shift - 1; s >= 0 && pieces_per_lane(pieces, s) <= cap; --s)
    if (passes(heads, s) < passes(heads, best)) best = s;
  return best;
}

// GATv2's wide_pieces: 1, the narrowest layout. Lanes of more pieces lose
// the 4-blocks-an-SM launch bound of one-piece lanes (GatTraits::kOnePiece)
// and were as often slower as faster on an H100, ms fwd / bwd at 1 / 2 / 4
// pieces: arxiv-like (8, 128) fp32 3.70 / 13.04, 3.61 / 10.97, 2.79 /
// 12.5, bf16 2.88 / 10.02, 2.54 / 12.94, 2.91 / 12.3; (4, 64) fp32 at 2
// pieces arxiv-like 0.95 / 3.27 -> 0.87 / 2.77 but pokec-like 15.06 / 51.5
// -> 17.28 / 48.1. Heads that fit one pass, as (2, 64), are unaffected.
constexpr int kGatv2WidePieces = 1;

// GATv2's kNoEdgePieces and kNoEdgeSingles (dispatch): no layout keeps the
// edge path without edge attributes. H200, kernels alone, ms forward /
// backward, with the path -> without: one 16-byte piece a lane, (2, 64)
// pokec-like bf16 6.27 / 18.94 -> 5.45 / 17.59, fp32 6.76 / 21.63 -> 6.50 /
// 20.76; one channel a load (odd head sizes: output layers of 7 or 47
// classes), arxiv-like (1, 47) fp32 0.48 / 1.37 -> 0.37 / 1.15, (2, 47)
// bf16 0.61 / 1.58 -> 0.51 / 1.40, web-like (1, 7) bf16 2.53 / 6.05 ->
// 2.17 / 4.90, (2, 130) bf16 18.9 / 62.9 -> 15.1 / 46.1; two pieces a lane,
// (1, 256) fp32 arxiv-like 0.96 / 2.63 -> 0.84 / 2.55 (docs/results.md).
constexpr int kGatv2NoEdgePieces = kMaxPieces;
constexpr int kGatv2NoEdgeSingles = kMaxPieces;

// The plan for `heads` heads of `channels` channels of a dtype checked by
// check_inputs; PYGIO_ERR_UNSUPPORTED above max_channels. `wide_pieces`:
// see lane_shift (a family passes the same value to its forward, backward
// and weights entries, so each recomputes the forward's scores bit for
// bit). `strides` and `pointers`: every row stride (elements) and base
// pointer the kernels read or write with vector accesses.
inline int make_plan(int32_t dtype, int64_t heads, int64_t channels, int wide_pieces,
                     std::initializer_list<int64_t> strides,
                     std::initializer_list<const void*> pointers, const char* entry,
                     Plan* plan) {
  const size_t element = dtype == PYGIO_FLOAT32 ? 4 : 2;
  const int wide = static_cast<int>(16 / element);
  const int vec = widest_vector(element, channels, strides, pointers) == wide ? wide : 1;
  if (channels > max_channels(vec))
    return fail(PYGIO_ERR_UNSUPPORTED,
                entry_message(entry, "heads of " + std::to_string(channels) +
                                         " channels are not supported (at most " +
                                         std::to_string(max_channels(wide)) +
                                         " with 16-byte aligned rows, else " +
                                         std::to_string(max_channels(1)) + ")"));
  const int64_t pieces = channels / vec;
  const int shift = lane_shift(vec, heads, pieces, wide_pieces);
  *plan = Plan{vec, WarpLayout{shift}, pieces_per_lane(pieces, shift), heads_shift(heads, shift)};
  return PYGIO_OK;
}

// go(GatTraits<scalar_t, index_t, kVec, kPieces>{}), without an edge path
// (GatTraits::kEdges false) where there are no edge attributes (`edges`
// false) and a lane holds at most kNoEdgePieces 16-byte pieces or, one
// channel a load (kVec 1), at most kNoEdgeSingles channels.
template <typename scalar_t, typename index_t, int kVec, int kPieces, int kNoEdgePieces,
          int kNoEdgeSingles, typename Go>
int with_edges(bool edges, Go go) {
  if constexpr (kPieces <= (kVec > 1 ? kNoEdgePieces : kNoEdgeSingles)) {
    if (!edges) return go(GatTraits<scalar_t, index_t, kVec, kPieces, false>{});
  }
  return go(GatTraits<scalar_t, index_t, kVec, kPieces>{});
}

// with_edges for runtime pieces (make_plan keeps them within the
// instantiated ones).
template <typename scalar_t, typename index_t, int kVec, int kNoEdgePieces, int kNoEdgeSingles,
          typename Go>
int with_pieces(int pieces, bool edges, Go go) {
  if (pieces == 1)
    return with_edges<scalar_t, index_t, kVec, 1, kNoEdgePieces, kNoEdgeSingles>(edges, go);
  if (pieces == 2)
    return with_edges<scalar_t, index_t, kVec, 2, kNoEdgePieces, kNoEdgeSingles>(edges, go);
  if constexpr (kVec * 4 <= kMaxElemsPerLane) {
    if (pieces == 4)
      return with_edges<scalar_t, index_t, kVec, 4, kNoEdgePieces, kNoEdgeSingles>(edges, go);
  }
  if constexpr (kVec * 8 <= kMaxElemsPerLane) {
    if (pieces == 8)
      return with_edges<scalar_t, index_t, kVec, 8, kNoEdgePieces, kNoEdgeSingles>(edges, go);
  }
  return fail(PYGIO_ERR_UNSUPPORTED, "GATv2: no kernel for " + std::to_string(pieces) +
                                         " pieces of " + std::to_string(kVec) + " channels a lane");
}

// Binds dtype, index width, vector width, pieces per lane of `plan` and
// whether p (any attention params struct) has edge attributes, then calls
// go(traits, shape). kNoEdgePieces, kNoEdgeSingles: see with_edges; each
// entry takes the values its kernels were timed with, since dropping the
// edge path is not always faster (transformer (4, 128), four pieces a
// lane: backward bf16 pokec-like 57.0 -> 43.4 ms on an H200, but the bf16
// forward 28.1 -> 36.4 on an H100).
template <int kNoEdgePieces, int kNoEdgeSingles = 0, typename P, typename Go>
int dispatch(const P& p, const Plan& plan, Go go) {
  const GatShape shape{plan.layout, plan.head_shift, p.heads, p.channels};
  return PYGIO_DISPATCH_DTYPE(p.dtype, [&]() -> int {
    if constexpr (std::is_same_v<scalar_t, double>) {
      return fail(PYGIO_ERR_INVALID_ARGUMENT, "GATv2 kernels take no float64");
    } else {
      return PYGIO_DISPATCH_INDEX(p.a.index_bits, [&] {
        constexpr int kWide = 16 / sizeof(scalar_t);
        const bool edges = p.edge != nullptr;
        if (plan.vec == kWide)
          return with_pieces<scalar_t, index_t, kWide, kNoEdgePieces, kNoEdgeSingles>(
              plan.pieces, edges, [&](auto t) { return go(t, shape); });
        return with_pieces<scalar_t, index_t, 1, kNoEdgePieces, kNoEdgeSingles>(
            plan.pieces, edges, [&](auto t) { return go(t, shape); });
      });
    }
  });
}

}  // namespace gatv2
}  // namespace pygio
